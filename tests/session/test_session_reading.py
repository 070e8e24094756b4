"""A caller of ``Session.call`` reads its own answer off the channel while the reader thread lends it,
and whatever happens meanwhile — other threads' calls, the supervisor's death, an exception in the
caller — every call still gets exactly its own answer and the reader thread takes the channel back."""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from helpers import wait_for, written
from peon.client.session import CallHandle


def _recording_dispatch(session) -> list[tuple[str, str]]:
    """Record (call id, reading thread's name) for each result the session dispatches."""
    seen: list[tuple[str, str]] = []
    dispatch = session._dispatch

    def recording(message: dict, again: bool = False) -> None:
        if message.get("op") == "result":
            seen.append((str(message.get("id")), threading.current_thread().name))
        dispatch(message, again)

    session._dispatch = recording
    return seen


def test_a_call_is_answered_in_the_callers_own_thread_and_a_submitted_one_by_the_reader(open_session):
    session = open_session()
    seen = _recording_dispatch(session)
    assert session.call("bash", {"command": "echo one"}).value["output"] == "one\n"
    handle = session.submit("bash", {"command": "echo two"})
    assert handle.result(timeout=30).value["output"] == "two\n"
    assert [name for _, name in seen] == [threading.current_thread().name, session._reader.name]
    # The reader thread has the channel back: an answer nobody waits for in call() still arrives.
    assert session.submit("bash", {"command": "echo three"}).result(timeout=30).value["output"] == "three\n"


def test_calls_from_many_threads_each_get_their_own_answer(open_session):
    session = open_session()
    answers: dict[tuple[int, int], str] = {}
    failures: list[BaseException] = []

    def caller(n: int) -> None:
        try:
            for i in range(6):
                answers[(n, i)] = session.call("bash", {"command": f"echo {n}-{i}"}).value["output"]
        except BaseException as exc:  # reported below, with the rest
            failures.append(exc)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    submitted = [session.submit("bash", {"command": f"echo s-{i}"}) for i in range(3)]
    for thread in threads:
        thread.join(120)
    assert not failures and not any(thread.is_alive() for thread in threads)
    assert answers == {(n, i): f"{n}-{i}\n" for n in range(4) for i in range(6)}
    assert [h.result(timeout=30).value["output"] for h in submitted] == [f"s-{i}\n" for i in range(3)]


def test_the_supervisor_killed_while_the_caller_reads_answers_the_call_supervisor_died(open_session, workspace,
                                                                                        leftovers):
    session = open_session()
    supervisor = session.supervisor_pid

    def kill_when_started() -> None:
        if wait_for(lambda: written(workspace / "started"), 30):
            os.kill(supervisor, signal.SIGKILL)

    killer = threading.Thread(target=kill_when_started)
    killer.start()
    r = session.call("bash", {"command": "echo $$ > started; sleep 1000"})
    killer.join(30)
    assert not r.ok and r.error.code == "supervisor_died", r
    assert "SIGKILL" in r.error.message
    assert wait_for(lambda: not leftovers.alive(), 10), leftovers.alive()
    assert session.call("bash", {"command": "true"}).error.code == "supervisor_died"


class Interrupted(Exception):
    pass


def test_a_caller_interrupted_while_it_reads_gives_the_channel_back(open_session, workspace):
    session = open_session({"limits": {"max_parallel_calls": 1}})  # the interrupted call is answered first

    def interrupt(signum, frame):
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)

    def signal_when_started() -> None:
        if wait_for(lambda: written(workspace / "started"), 30):
            os.kill(os.getpid(), signal.SIGUSR1)  # handled by the main thread, the one reading

    sender = threading.Thread(target=signal_when_started)
    sender.start()
    try:
        with pytest.raises(Interrupted):
            session.call("bash", {"command": "echo $$ > started; until [ -e go ]; do sleep 0.02; done; echo late"})
    finally:
        sender.join(30)
        signal.signal(signal.SIGUSR1, previous)
    # The interrupted call's answer is read by the reader thread; the next call reads its own again.
    seen = _recording_dispatch(session)
    (workspace / "go").touch()
    assert session.call("bash", {"command": "echo next"}).value["output"] == "next\n"
    assert len(seen) == 2 and seen[0][1] in (session._reader.name, threading.current_thread().name)
    assert seen[1][1] == threading.current_thread().name


def test_a_line_whose_dispatch_was_interrupted_answers_its_call_when_dispatched_again(open_session):
    session = open_session()
    # A call whose answer a caller read, took off the pending calls and was interrupted before it
    # could answer (a signal handler raising in the main thread): the line stays to be dispatched.
    handle = CallHandle(session, "feedc0ffee00", "bash", None)
    with session._calls.lock:
        session._calls.handles[handle.call_id] = handle
    assert session._calls.take(handle.call_id) is handle
    line = json.dumps({"op": "result", "id": handle.call_id, "ok": True, "value": {"output": "late\n"}}).encode()
    session._reading.lines.append(line)
    session._reading.dispatching = True
    # Whoever reads next dispatches it first: the call is answered, and nothing is taken for a broken
    # supervisor (a line naming no call would be).
    assert session.call("bash", {"command": "echo next"}).value["output"] == "next\n"
    assert handle.result(timeout=10).value == {"output": "late\n"}
    assert not session._reading.lines and session.alive
    # Dispatched once more, an answer already given changes nothing.
    session._dispatch_line(line, again=True)
    assert session.alive and session.call("bash", {"command": "echo still"}).value["output"] == "still\n"
