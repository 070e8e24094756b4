"""A job's input side in the supervisor (supervisor/job_io.py): which jobs take input and go to a shell,
the errors of a write that cannot be made, the version a write is approved at, the bound on pending
writes, and a terminal job's screen from the output store."""

from __future__ import annotations

import asyncio

import pytest

from peon.core.errors import ToolError
from peon.core.output.store import OutputStore
from peon.supervisor import job_io
from peon.workers.messages import parse_input


def record(command, stdin):
    return {"args": {"command": command}, "approved": {"stdin": stdin} if stdin is not None else {}}


def test_only_a_terminal_or_pipe_job_takes_input_and_a_shell_is_told_by_its_command():
    assert job_io.job_io_for(record("sleep 1", None)) is None
    assert job_io.job_io_for(record("cat", {"kind": "data", "bytes": 3})) is None
    tty = job_io.job_io_for(record("bash -i", {"kind": "tty", "rows": 10, "cols": 30}))
    assert tty.kind == "tty" and tty.shell and (tty.rows, tty.cols) == (10, 30)
    assert job_io.job_io_for(record("python3 -i", {"kind": "pipe"})).shell is False


def test_a_write_that_cannot_be_made_says_why():
    io = job_io.job_io_for(record("cat", {"kind": "pipe"}))
    with pytest.raises(ToolError) as ended:
        job_io.input_state("job-1", "cat", False, io)
    assert ended.value.code == "job_ended"
    with pytest.raises(ToolError) as none:
        job_io.input_state("job-1", "sleep 1", True, None)
    assert none.value.code == "no_input"
    io.open = False
    with pytest.raises(ToolError) as closed:
        job_io.input_state("job-1", "cat", True, io)
    assert closed.value.code == "no_input"


def test_a_write_goes_only_at_the_version_it_was_approved_at_and_is_bounded():
    async def scenario() -> None:
        io = job_io.job_io_for(record("bash -i", {"kind": "tty", "rows": 24, "cols": 80}))
        state = job_io.input_state("job-1", "bash -i", True, io)
        job_io.send("job-1", io, b"ls\r", eof=False, version=state.version, line="", carry="")
        assert io.version == 1 and parse_input(dict(io.inbox.get_nowait())) == (b"ls\r", False)
        with pytest.raises(ToolError) as stale:
            job_io.send("job-1", io, b"x", eof=False, version=0, line="x", carry="")
        assert stale.value.code == "changed_since_approval" and io.line == ""
        for _ in range(job_io.MAX_PENDING_WRITES):
            job_io.send("job-1", io, b"y", eof=False, version=io.version, line="", carry="")
        with pytest.raises(ToolError) as full:
            job_io.send("job-1", io, b"z", eof=False, version=io.version, line="", carry="")
        assert full.value.code == "too_large"

    asyncio.run(scenario())


def test_the_end_of_input_closes_it_and_a_terminal_sends_no_pipe_eof():
    async def scenario() -> None:
        io = job_io.job_io_for(record("cat", {"kind": "tty", "rows": 24, "cols": 80}))
        job_io.send("job-1", io, b"\x04", eof=True, version=0, line="", carry="")
        assert parse_input(dict(io.inbox.get_nowait())) == (b"\x04", False) and io.open is False

    asyncio.run(scenario())


def test_a_terminal_jobs_screen_is_fed_incrementally_from_the_store():
    async def scenario() -> None:
        store = OutputStore(1 << 20, 1 << 20)
        store.open("job-1")
        io = job_io.job_io_for(record("python3 -i", {"kind": "tty", "rows": 3, "cols": 20}))
        store.append("job-1", b">>> print(6*7)\r\n")
        assert (await job_io.render_screen(store, "job-1", io, (3, 20)))["lines"][0] == ">>> print(6*7)"
        store.append("job-1", b"42\r\n>>> ")
        shown = await job_io.render_screen(store, "job-1", io, (3, 20))
        assert shown["lines"] == [">>> print(6*7)", "42", ">>>"] and shown["cursor"] == {"row": 2, "col": 4}
        assert io.screen is not None and io.screen.fed == store.read("job-1", 0, 0).total_bytes
        ended = await job_io.render_screen(store, "job-1", None, (3, 20))  # ended: a fresh screen, same text
        assert ended["lines"] == shown["lines"]

    asyncio.run(scenario())


def test_a_flood_is_rendered_from_its_newest_bytes_only():
    async def scenario() -> dict:
        store = OutputStore(8 << 20, 8 << 20)
        store.open("job-1")
        store.append("job-1", b"x" * (job_io.MAX_SCREEN_FEED_BYTES * 2) + b"\r\nlast")
        return await job_io.render_screen(store, "job-1", None, (2, 10))

    shown = asyncio.run(scenario())
    assert shown["incomplete"] and shown["lines"][-1] == "last"
