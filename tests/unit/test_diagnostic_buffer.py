"""The supervisor's stderr buffer: whole lines kept, drops counted and said when there is room, never more
than its bound, and everything held dropped when stderr is broken."""

from __future__ import annotations

from peon.supervisor.diagnostics import DiagnosticBuffer, drop_notice


# -- the buffer (pure) ----------------------------------------------------------------------------

def test_the_buffer_keeps_whole_lines_and_counts_what_it_drops():
    buffer = DiagnosticBuffer(limit=40)
    buffer.feed(b"first line\nsecond line\n")  # 23 bytes: fits
    buffer.feed(b"a third line that is too long\n")  # does not fit: dropped whole
    assert bytes(buffer.data) == b"first line\nsecond line\n"
    assert (buffer.dropped_lines, buffer.dropping) == (1, False)
    buffer.feed(b"x")  # fits, a line begun
    buffer.feed(b"yz and more than there is room for")  # cannot end: the line is ended, the rest dropped
    buffer.feed(b" still the same line\nnext\n")
    assert bytes(buffer.data) == b"first line\nsecond line\nx\nnext\n"  # never "x" + "next"
    assert buffer.dropped_lines == 2 and buffer.total_dropped_lines == 2
    buffer.consume(len(buffer.data))
    buffer.feed(b"after\n")  # the notice is held back until there is room for it
    assert bytes(buffer.data) == b"after\n"
    big = DiagnosticBuffer(limit=1000)
    big.feed(b"a" * 999 + b"\n")
    big.feed(b"lost\n")
    big.consume(1000)
    big.feed(b"next\n")
    assert bytes(big.data) == drop_notice(1, 5) + b"next\n"  # said before the next line kept
    assert big.dropped_bytes == 0


def test_the_drop_notice_waits_for_room_and_a_line_cut_short_counts_at_exit():
    buffer = DiagnosticBuffer(limit=len(drop_notice(1, 9)) + 4)
    buffer.feed(b"keep\n")
    buffer.feed(b"x" * 200)  # no newline yet: still dropping at exit
    buffer.finish()
    assert bytes(buffer.data) == b"keep\n"  # no room for the notice: not written in part
    buffer.consume(5)
    assert bytes(buffer.data) == drop_notice(1, 200)
    assert len(buffer.data) <= buffer.limit


def test_the_buffer_never_holds_more_than_its_bound():
    buffer = DiagnosticBuffer(limit=1000)
    for index in range(10_000):
        buffer.feed(f"line {index}\n".encode())
        assert len(buffer.data) <= 1000
    assert buffer.total_dropped_lines > 9000


def test_a_broken_stderr_drops_everything_held():
    buffer = DiagnosticBuffer(limit=100)
    buffer.feed(b"one\ntwo\n")
    buffer.discard_all()
    assert bytes(buffer.data) == b"" and buffer.total_dropped_lines == 2

