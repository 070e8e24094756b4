"""A terminal job's screen rendered by the emulator (peon.core.output.screen)."""

from __future__ import annotations

import pytest

from peon.core.output.screen import MAX_COLS, MAX_ROWS, Screen


def test_rows_of_text_and_the_cursor():
    screen = Screen(4, 20)
    screen.feed(b"hello\r\nworld\x1b[1;3H")
    shown = screen.render()
    assert shown["lines"] == ["hello", "world", "", ""]
    assert shown["cursor"] == {"row": 0, "col": 2}
    assert shown["rows"] == 4 and shown["cols"] == 20


def test_a_character_split_between_pieces_is_joined():
    screen = Screen(2, 10)
    data = "é€".encode()
    for i in range(len(data)):
        screen.feed(data[i:i + 1])
    assert screen.render()["lines"][0] == "é€"


def test_a_full_screen_program_is_seen_on_the_alternate_screen_and_clearing_works():
    screen = Screen(3, 10)
    screen.feed(b"old\x1b[?1049h\x1b[2J\x1b[Hvim")
    shown = screen.render()
    assert shown["alternate_screen"] and shown["lines"][0] == "vim"
    screen.feed(b"\x1b[?1049l")
    assert screen.render()["alternate_screen"] is False


def test_feeding_from_offsets_skips_what_was_fed_and_starts_afresh_after_a_gap():
    screen = Screen(2, 10)
    screen.feed_from(0, b"abc")
    screen.feed_from(1, b"bcd")  # overlaps: only "d" is new
    assert screen.render()["lines"][0] == "abcd" and screen.fed == 4
    screen.feed_from(10, b"xy")  # bytes 4..9 were evicted
    shown = screen.render()
    assert shown["incomplete"] and shown["lines"][0] == "xy" and screen.fed == 12


@pytest.mark.parametrize("rows, cols", [(0, 10), (10, 0), (MAX_ROWS + 1, 10), (10, MAX_COLS + 1)])
def test_a_screen_is_bounded(rows, cols):
    with pytest.raises(ValueError):
        Screen(rows, cols)


def test_what_the_emulator_cannot_take_never_fails_a_feed():
    screen = Screen(2, 10)
    screen.feed(b"\x1b[>4;2m")  # xterm's modifyOtherKeys, as vim sends it
    screen.feed(b"ok")
    assert screen.render()["lines"][0] == "ok"
