"""The output store's rings and quotas, and the terminal-text cleaning: pure, no processes."""

from __future__ import annotations

import fcntl
import gc
import os
import random
import stat
import tracemalloc

import pytest

from peon.core.output.store import OutputRing, OutputStore, open_spill_file
from peon.core.output.terminal import clean_terminal_text, collapse_carriage_returns, strip_escapes


def _page_all(ring: OutputRing, offset: int, limit: int) -> bytes:
    out = b""
    while True:
        page = ring.read(offset, limit)
        if not page.data:
            return out
        assert page.offset == offset
        out += page.data
        offset = page.next_offset


def test_ring_keeps_everything_within_quota_and_pages_exactly() -> None:
    ring = OutputRing(1 << 20)
    data = b"".join(b"%d\n" % i for i in range(1, 50001))
    for start in range(0, len(data), 4093):
        ring.append(data[start : start + 4093])
    assert ring.total == len(data) and ring.retained == len(data) and ring.start == 0
    assert _page_all(ring, 0, 777) == data
    middle = ring.read(100_000, 10)
    assert middle.data == data[100_000:100_010] and middle.dropped_before is None


def test_ring_evicts_oldest_and_reports_what_was_dropped() -> None:
    ring = OutputRing(100)
    stream = bytes(range(256)) * 10
    rng = random.Random(7)
    position = 0
    while position < len(stream):
        size = rng.randint(1, 300)
        ring.append(stream[position : position + size])
        position += size
        assert ring.retained <= 100
    assert ring.total == len(stream) and ring.retained == 100 and ring.start == len(stream) - 100
    page = ring.read(0, 1000)
    assert page.dropped_before == len(stream) - 100
    assert page.offset == len(stream) - 100 and page.data == stream[-100:]
    assert page.next_offset == page.total_bytes == len(stream)
    at_end = ring.read(len(stream), 10)
    assert at_end.data == b"" and at_end.dropped_before is None and at_end.next_offset == len(stream)
    beyond = ring.read(len(stream) + 50, 10)
    assert beyond.data == b"" and beyond.offset == len(stream)


def test_ring_with_zero_quota_counts_but_keeps_nothing() -> None:
    ring = OutputRing(0)
    ring.append(b"abc")
    assert (ring.total, ring.retained, ring.start) == (3, 0, 3)


def test_store_evicts_oldest_jobs_first_within_the_session_quota() -> None:
    store = OutputStore(per_job_bytes=60, per_session_bytes=100)
    first, second = store.open("a"), store.open("b")
    store.append("a", b"A" * 60)
    store.append("b", b"B" * 30)
    assert store.retained == 90
    store.append("b", b"C" * 30)  # the session is 20 bytes over: they come out of "a", the oldest
    assert store.retained == 100 and first.retained == 40 and first.start == 20 and second.retained == 60
    third = store.open("c")
    store.append("c", b"D" * 60)
    assert store.retained <= 100 and first.retained == 0 and third.retained == 60
    store.forget("b")
    assert store.retained == third.retained + first.retained
    with pytest.raises(ValueError):
        store.open("c")


def test_store_memory_is_bounded_under_a_flood() -> None:
    store = OutputStore(per_job_bytes=1 << 16, per_session_bytes=1 << 17)
    for job in range(5):
        store.open(str(job))
        for _ in range(200):
            store.append(str(job), b"x" * 4096)
            assert store.retained <= 1 << 17
    assert store.get("4") is not None and store.get("4").total == 200 * 4096  # type: ignore[union-attr]


def test_a_ring_in_a_file_pages_like_one_in_memory(tmp_path) -> None:
    opened: list[int] = []

    def spill() -> int:
        opened.append(open_spill_file(tmp_path))
        return opened[-1]

    for trial in range(200):
        rng = random.Random(trial)
        quota = rng.randint(1, 400)
        filed, memory = OutputRing(quota, rng.randint(0, quota), spill), OutputRing(quota)
        stream = rng.randbytes(rng.randint(0, 3000))
        position = 0
        while position < len(stream):
            size = rng.randint(1, 600)
            filed.append(memoryview(stream)[position : position + size])
            memory.append(stream[position : position + size])
            position += size
            if rng.random() < 0.1:
                count = rng.randint(0, quota)
                assert filed.drop_oldest(count) == memory.drop_oldest(count)
            assert (filed.total, filed.start, filed.retained) == (memory.total, memory.start, memory.retained)
            offset, limit = rng.randint(0, filed.total + 5), rng.randint(0, 500)
            assert filed.read(offset, limit) == memory.read(offset, limit)
        filed.close()
    assert opened and os.listdir(tmp_path) == []  # unnamed files: nothing is left in the directory
    for fd in opened:
        with pytest.raises(OSError):
            os.fstat(fd)  # every file was closed: emptied by eviction, or by close()


def test_an_empty_or_compacted_ring_pages_evicts_and_grows_like_any_other(tmp_path) -> None:
    for trial in range(200):
        rng = random.Random(trial)
        quota = rng.randint(1, 400)
        spill = (lambda: open_spill_file(tmp_path)) if trial % 2 else None
        compacted, plain = OutputRing(quota, rng.randint(0, quota), spill), OutputRing(quota, quota, None)
        assert compacted.read(0, 10) == plain.read(0, 10)
        for _ in range(rng.randint(0, 30)):
            action = rng.random()
            if action < 0.3:
                compacted.compact()
            elif action < 0.45:
                count = rng.randint(0, quota)
                assert compacted.drop_oldest(count) == plain.drop_oldest(count)
            else:
                chunk = rng.randbytes(rng.randint(0, 150))
                compacted.append(chunk)
                plain.append(chunk)
            assert (compacted.total, compacted.start, compacted.retained) == (plain.total, plain.start, plain.retained)
            offset, limit = rng.randint(0, plain.total + 5), rng.randint(0, 500)
            assert compacted.read(offset, limit) == plain.read(offset, limit)
        compacted.close()
    assert os.listdir(tmp_path) == []


def test_an_empty_or_compacted_ring_holds_no_deque() -> None:
    """A session keeps the rings of up to 1024 ended jobs: each costs 0.1 to 0.15 KiB beside its bytes (0.9 KiB
    with a deque, however little it holds)."""
    chunks = [b"output %d\n" % i for i in range(1000)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        empty = [OutputRing(1 << 20) for _ in range(1000)]
        written = [OutputRing(1 << 20) for _ in range(1000)]
        for ring, chunk in zip(written, chunks, strict=True):
            ring.append(chunk)  # the chunk's own bytes were allocated before
            ring.compact()
        gc.collect()
        per_ring = (tracemalloc.get_traced_memory()[0] - before) / 2000
    finally:
        tracemalloc.stop()
    assert per_ring < 300, f"a ring costs {per_ring:.0f} bytes"
    assert [ring.read(0, 100).data for ring in written] == chunks and empty[0].read(0, 1).data == b""


def test_spill_files_are_private_unnamed_and_close_on_exec(tmp_path) -> None:
    fd = open_spill_file(tmp_path)
    try:
        info = os.fstat(fd)
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600 and info.st_nlink == 0
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        assert os.listdir(tmp_path) == []
    finally:
        os.close(fd)


def test_without_o_tmpfile_a_spill_file_is_unlinked_at_once(tmp_path, monkeypatch) -> None:
    real_open = os.open

    def no_tmpfile(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            raise OSError(95, "Operation not supported")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_tmpfile)
    fd = open_spill_file(tmp_path)
    try:
        info = os.fstat(fd)
        assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_nlink == 0 and os.listdir(tmp_path) == []
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    finally:
        os.close(fd)


def test_a_ring_moves_to_its_file_past_the_spill_threshold_and_gives_it_back_when_emptied(tmp_path) -> None:
    ring = OutputRing(100, 10, lambda: open_spill_file(tmp_path))
    ring.append(b"0123456789")
    assert ring.fd < 0  # within the threshold: in memory
    ring.append(b"abc")
    assert ring.fd >= 0 and ring.read(0, 100).data == b"0123456789abc"
    ring.append(b"x" * 250)  # more than the quota at once: its tail, at offset % quota
    assert (ring.start, ring.total, ring.read(0, 1000).data) == (163, 263, b"x" * 100)
    fd = ring.fd
    assert ring.drop_oldest(1000) == 100 and ring.fd == -1
    with pytest.raises(OSError):
        os.fstat(fd)
    ring.append(b"yz")
    assert ring.read(0, 10).data == b"yz" and ring.read(0, 10).dropped_before == 263


def test_a_ring_whose_file_cannot_be_opened_stays_in_memory_within_its_quota() -> None:
    def refuse() -> int:
        raise PermissionError(13, "no")

    ring = OutputRing(50, 5, refuse)
    for _ in range(20):
        ring.append(b"0123456789")
    assert ring.fd == -1 and ring.retained == 50 and ring.read(150, 100).data == b"0123456789" * 5


def test_a_file_that_fails_drops_what_it_held_and_says_so(tmp_path) -> None:
    store = OutputStore(per_job_bytes=1 << 20, per_session_bytes=64 << 20, spill=lambda: open_spill_file(tmp_path))
    assert store.spill_bytes == 1 << 20  # at most 64 spilled rings: a session quota of 64 MiB spills past 1 MiB
    store = OutputStore(per_job_bytes=100, per_session_bytes=1000, spill=lambda: open_spill_file(tmp_path))
    store.spill_bytes = 10
    ring = store.open("a")
    store.append("a", b"z" * 50)
    assert ring.fd >= 0 and store.retained == 50
    os.ftruncate(ring.fd, 0)  # the file lost its bytes under the ring
    page = store.read("a", 0, 100)
    assert page.data == b"" and page.dropped_before == 50 and page.retained_from == 50
    assert store.retained == 0 and ring.fd == -1
    store.append("a", b"more")  # the ring goes on in memory
    assert store.read("a", 50, 10).data == b"more" and store.retained == 4
    store.forget("a")
    assert store.retained == 0 and len(store) == 0


def test_escapes_are_stripped() -> None:
    coloured = "\x1b[1;32mok\x1b[0m \x1b]0;title\x07done\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x1b(Bz\x9b2Kq"
    assert strip_escapes(coloured) == "ok donelink zq"
    assert strip_escapes("head\x1b[38;5") == "head"  # cut off at the end of a head
    assert strip_escapes("plain text\twith tabs\n") == "plain text\twith tabs\n"


def test_carriage_return_progress_collapses_to_its_final_state() -> None:
    bar = "building\n" + "".join(f"\r[{'#' * i:<10}] {i * 10}%" for i in range(11)) + "\ndone\r\n"
    assert collapse_carriage_returns(bar) == "building\n[##########] 100%\ndone\n"
    assert collapse_carriage_returns("downloading 100%\rok") == "okwnloading 100%"  # what a terminal shows
    assert collapse_carriage_returns("a\r\nb") == "a\nb"
    assert clean_terminal_text("\x1b[2K\r 10%\x1b[2K\r 99%\x1b[2K\rfinished\n") == "finished\n"
    text = "ünïcode ✓ line\n" * 3
    assert clean_terminal_text(text) == text


def test_pages_never_split_a_utf8_character_and_continue_exactly() -> None:
    from peon.core.jobs import page_value

    text = "añ€😀" * 50 + "\n"
    data = text.encode()
    ring = OutputRing(1 << 20)
    ring.append(data)
    out, offset = b"", 0
    for limit in (5, 6, 7, 4, 9) * 100:
        value = page_value(ring.read(offset, limit), raw=False, clean=True, finished=True)
        assert value["offset"] == offset
        out += value["output"].encode()
        offset = value["next_offset"]
        if value["eof"]:
            break
    assert out == data and offset == len(data)
    small = OutputRing(9)
    small.append(data)  # the retained bytes start inside a character: the page starts at the next one
    value = page_value(small.read(0, 100), raw=False, clean=True, finished=True)
    assert value["dropped_before"] == len(data) - 9 and not value["output_invalid_utf8"]
    assert value["output"] == "€😀\n" and value["offset"] == len(data) - 8
    raw = page_value(small.read(0, 100), raw=True, clean=True, finished=True)
    assert raw["offset"] == len(data) - 9 and raw["returned_bytes"] == 9


def test_newest_lines_are_cleaned_bounded_and_skip_blank_ones() -> None:
    from peon.core.output.terminal import newest_lines

    data = b"old\n\x1b[31mfirst\x1b[0m\n\n   \nsecond line that is long\r\nthird 100%\r"
    assert newest_lines(data, 3, 200) == ["first", "second line that is long", "third 100%"]
    assert newest_lines(data, 2, 10) == ["second ...", "third 100%"]
    assert newest_lines("€uro\n".encode()[1:], 5, 200) == ["uro"]  # began inside a character
    assert newest_lines(b"", 5, 200) == [] and newest_lines(b"x\n", 0, 200) == []
