"""A running command's input queue (workers/job_input.py): bounded, in order, written without blocking,
a pipe closed at the end of input, and nothing taken once the command reads no more."""

from __future__ import annotations

import asyncio
import os

from peon.workers.job_input import JobInput


def test_a_write_past_the_bound_is_refused_whole():
    queue = JobInput(limit=10)
    assert queue.put(b"12345678")
    assert not queue.put(b"abc") and queue.queued == 8
    assert queue.put(b"ab", eof=True)
    assert not queue.put(b"")  # after the end of input nothing more


def test_the_pump_writes_in_order_and_closes_a_pipe_at_the_end_of_input():
    async def scenario() -> bytes:
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(write_end, False)
        queue = JobInput(limit=1 << 20)
        pump = asyncio.get_running_loop().create_task(queue.pump(write_end, close_at_eof=True))
        queue.put(b"first ")
        await asyncio.sleep(0.01)
        queue.put(b"x" * 200_000)  # more than the pipe holds: written as it is read
        queue.put(b" last", eof=True)
        received = b""
        while chunk := await asyncio.to_thread(os.read, read_end, 1 << 16):
            received += chunk
        await pump
        os.close(read_end)
        return received

    assert asyncio.run(scenario()) == b"first " + b"x" * 200_000 + b" last"


def test_a_command_that_reads_no_more_closes_the_input():
    async def scenario() -> JobInput:
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(write_end, False)
        os.close(read_end)  # the command is gone
        queue = JobInput(limit=1 << 20)
        queue.put(b"lost")
        await queue.pump(write_end, close_at_eof=True)
        return queue

    queue = asyncio.run(scenario())
    assert queue.closed and queue.queued == 0 and not queue.put(b"more")


def test_a_terminal_whose_special_character_became_printable_takes_no_more_input():
    import termios

    from peon.workers.job_input import terminal_keeps_its_keys

    master, slave = os.openpty()
    try:
        assert terminal_keeps_its_keys(master)
        attributes = termios.tcgetattr(slave)
        attributes[6][termios.VKILL] = b"z"  # stty kill z: a typed "z" would discard the line
        termios.tcsetattr(slave, termios.TCSANOW, attributes)
        assert not terminal_keeps_its_keys(master)
    finally:
        os.close(master)
        os.close(slave)
    assert not terminal_keeps_its_keys(master)  # a closed descriptor: no more input either
