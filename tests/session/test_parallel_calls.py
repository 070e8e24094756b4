"""A session runs several calls side by side (``limits.max_parallel_calls``), each in a worker of its own:
from threads, ``submit`` and ``AsyncSession``; questions still reach the approver one at a time in arrival
order; every call keeps its one decision line before it runs; two calls changing the same file never tear
it; a runaway call neither kills nor limits another's processes.

Overlap is asserted with events, not timings: each call waits for a file the test creates only once every
call has started (``gate_command``). The deadlines only detect hangs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import threading
from pathlib import Path

import peon
from helpers import living, pids_in, wait_for
from helpers.processes import FORK_LOOP

HANG_SECONDS = 60


def gate_command(tag: str, gate: str = "go") -> str:
    """Record ``started-<tag>``, then wait (bounded) for ``gate``; exit 0 once it exists, 9 on a hang."""
    return (f"touch started-{tag}; for n in $(seq 1200); do [ -e {gate} ] && echo {tag} && exit 0; sleep 0.05; "
            "done; exit 9")


def all_started(workspace: Path, tags) -> bool:
    return all((workspace / f"started-{tag}").exists() for tag in tags)


def release(workspace: Path, gate: str = "go") -> None:
    (workspace / gate).touch()


def test_four_calls_from_threads_run_at_once(session, workspace):
    tags = ["a", "b", "c", "d"]
    results: dict[str, peon.ToolResult] = {}

    def call(tag: str) -> None:
        results[tag] = session.call("bash", {"command": gate_command(tag)})

    threads = [threading.Thread(target=call, args=(tag,)) for tag in tags]
    for thread in threads:
        thread.start()
    try:
        assert wait_for(lambda: all_started(workspace, tags), HANG_SECONDS), "the calls did not all start together"
    finally:
        release(workspace)
    for thread in threads:
        thread.join(HANG_SECONDS)
    assert {tag: results[tag].value["output"] for tag in tags} == {tag: f"{tag}\n" for tag in tags}


def test_submitted_calls_run_side_by_side_and_are_answered_as_each_ends(session, workspace):
    tags = ["a", "b", "c", "d"]
    handles = {tag: session.submit("bash", {"command": gate_command(tag, gate=f"go-{tag}")}) for tag in tags}
    assert wait_for(lambda: all_started(workspace, tags), HANG_SECONDS), "the calls did not all start together"
    for tag in reversed(tags):  # the last submitted is let go first, and is answered first
        release(workspace, f"go-{tag}")
        assert handles[tag].result(HANG_SECONDS).value["output"] == f"{tag}\n"
        assert all(not handles[other].done() for other in tags if other < tag)


def test_a_read_is_answered_while_a_long_command_runs(session, workspace):
    (workspace / "notes.txt").write_text("hello\n")
    long = session.submit("bash", {"command": gate_command("long")})
    try:
        assert wait_for(lambda: all_started(workspace, ["long"]), HANG_SECONDS)
        read = session.call("read", {"path": "notes.txt"})
        assert read.ok and "hello" in read.value["content"]
        assert not long.done()
    finally:
        release(workspace)
    assert long.result(HANG_SECONDS).ok


def test_async_session_runs_its_calls_concurrently(workspace, tmp_path, leftovers):
    tags = ["a", "b", "c", "d"]

    async def scenario():
        async with peon.AsyncSession(workspace, {"approval": {"process": "allow"}}, env=leftovers.env(),
                                     state_dir=tmp_path / "astate") as session:
            calls = [asyncio.ensure_future(session.call("bash", {"command": gate_command(tag)})) for tag in tags]
            try:
                while not all_started(workspace, tags):
                    await asyncio.sleep(0.02)
            finally:
                release(workspace)
            return await asyncio.gather(*calls)

    results = asyncio.run(asyncio.wait_for(scenario(), HANG_SECONDS))
    assert [r.value["output"] for r in results] == [f"{tag}\n" for tag in tags]
    assert leftovers.alive() == []


def test_at_most_max_parallel_calls_run_at_once(open_session, workspace):
    session = open_session({"limits": {"max_parallel_calls": 2}})
    handles = {tag: session.submit("bash", {"command": gate_command(tag)}) for tag in ["a", "b", "c"]}
    try:
        assert wait_for(lambda: all_started(workspace, ["a", "b"]), HANG_SECONDS)
        # Both slots are held until the gate opens: the third, submitted last, cannot have started.
        assert not (workspace / "started-c").exists()
    finally:
        release(workspace)
    assert [handles[tag].result(HANG_SECONDS).value["output"] for tag in "abc"] == ["a\n", "b\n", "c\n"]


def test_a_call_cancelled_while_waiting_for_a_slot_never_starts(open_session, workspace):
    session = open_session({"limits": {"max_parallel_calls": 1}})
    running = session.submit("bash", {"command": gate_command("a")})
    waiting = session.submit("bash", {"command": "touch waiting-ran"})
    assert wait_for(lambda: all_started(workspace, ["a"]), HANG_SECONDS)
    waiting.cancel()
    assert waiting.result(HANG_SECONDS).error.code == "cancelled"
    release(workspace)
    assert running.result(HANG_SECONDS).ok
    assert session.call("bash", {"command": "true"}).ok
    assert not (workspace / "waiting-ran").exists()


# -- approval ----------------------------------------------------------------------------------------


def test_questions_reach_the_approver_one_at_a_time_in_arrival_order(open_session, workspace):
    asked: list[str] = []
    out = {"now": 0, "most": 0}
    lock = threading.Lock()
    first_answer = threading.Event()

    def approver(request):
        command = json.loads(request["canonical_input"])["command"]
        with lock:
            out["now"] += 1
            out["most"] = max(out["most"], out["now"])
            asked.append(command)
        try:
            if command == "echo ask-0":
                first_answer.wait(HANG_SECONDS)  # held while the calls that need no question go on
            return "allow_once"
        finally:
            with lock:
                out["now"] -= 1

    (workspace / "notes.txt").write_text("hello\n")
    session = open_session({"approval": {"process": "ask", "read_only": "allow"}}, approver=approver)
    asks = [session.submit("bash", {"command": f"echo ask-{i}"}) for i in range(4)]
    try:
        assert wait_for(lambda: asked == ["echo ask-0"], HANG_SECONDS)
        # A question pending holds no call that needs none.
        read = session.call("read", {"path": "notes.txt"})
        assert read.ok
        assert asked == ["echo ask-0"] and not any(handle.done() for handle in asks)
    finally:
        first_answer.set()
    assert [handle.result(HANG_SECONDS).value["output"] for handle in asks] == [f"ask-{i}\n" for i in range(4)]
    assert asked == [f"echo ask-{i}" for i in range(4)]
    assert out["most"] == 1


def test_a_session_grant_given_meanwhile_covers_the_calls_waiting_in_line(open_session, workspace):
    asked: list[str] = []
    answer = threading.Event()

    def approver(request):
        asked.append(json.loads(request["canonical_input"])["command"])
        answer.wait(HANG_SECONDS)
        return {"decision": "allow_session"}

    session = open_session({"approval": {"process": "ask"}}, approver=approver)
    handles = [session.submit("bash", {"command": "echo same"}) for _ in range(3)]
    try:
        assert wait_for(lambda: asked, HANG_SECONDS)
    finally:
        answer.set()
    assert [handle.result(HANG_SECONDS).value["output"] for handle in handles] == ["same\n"] * 3
    assert asked == ["echo same"]  # the others found the grant once the first was answered


# -- audit -------------------------------------------------------------------------------------------


def test_each_parallel_call_has_its_durable_decision_line_before_it_runs(open_session, workspace, tmp_path):
    state = tmp_path / "audited"
    # No sandbox: the commands read the audit log, which is outside the workspace.
    session = open_session({"audit": {"fsync": True}, "sandbox": {"mode": "off"}}, state_dir=state)
    log = state / "audit.jsonl"
    tags = [f"tag-{i}" for i in range(6)]
    # Each command finds its own decision line (which holds its command, so its tag) in the log.
    handles = [session.submit("bash", {"command": f"grep -c {tag} {log} > seen-{tag}; " + gate_command(tag)})
               for tag in tags]
    try:
        assert wait_for(lambda: all_started(workspace, tags), HANG_SECONDS)
    finally:
        release(workspace)
    assert all(handle.result(HANG_SECONDS).ok for handle in handles)
    assert all(int((workspace / f"seen-{tag}").read_text()) >= 1 for tag in tags)
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    for handle in handles:
        events = [entry["event"] for entry in entries if entry.get("call_id") == handle.call_id]
        assert events == ["decision", "result"], (handle.call_id, events)


# -- files -------------------------------------------------------------------------------------------


# What a call that changes a file finds when another call changed it meanwhile: the file as it was approved
# for, or a refusal that changes nothing.
REFUSED = {"stale", "changed_since_approval"}


def test_edits_of_the_same_file_at_once_each_see_the_one_before_or_change_nothing(session, workspace):
    (workspace / "list.txt").write_text("end\n")
    count = 6
    handles = [session.submit("edit", {"path": "list.txt", "edits": [{"old_string": "end\n",
                                                                      "new_string": f"line {i}\nend\n"}]})
               for i in range(count)]
    results = [handle.result(HANG_SECONDS) for handle in handles]
    done = [i for i, result in enumerate(results) if result.ok]
    assert done and all(results[i].error.code in REFUSED for i in range(count) if i not in done), results
    lines = (workspace / "list.txt").read_text().splitlines()
    # Every edit that succeeded is there (none undone by another), and nothing else.
    assert sorted(lines) == sorted([f"line {i}" for i in done] + ["end"]) and lines[-1] == "end"


def test_writes_from_one_read_at_once_one_wins_the_others_are_stale(session, workspace):
    (workspace / "f.txt").write_text("first\n")
    sha = session.call("read", {"path": "f.txt"}).value["sha256"]
    contents = [f"{i}".encode() * (1 << 20) for i in range(4)]  # large: a torn install would show
    handles = [session.submit("write", {"path": "f.txt", "content": content.decode(), "mode": "replace",
                                        "expected_sha256": sha}) for content in contents]
    results = [handle.result(HANG_SECONDS) for handle in handles]
    won = [i for i, result in enumerate(results) if result.ok]
    assert len(won) == 1, [r.error for r in results]
    assert all(results[i].error.code in REFUSED for i in range(4) if i not in won), results
    assert hashlib.sha256((workspace / "f.txt").read_bytes()).digest() == hashlib.sha256(contents[won[0]]).digest()


def test_a_file_written_by_two_calls_at_once_is_one_of_them_whole(session, workspace):
    (workspace / "shared").write_text("before\n")
    contents = [f"{i}".encode() * (1 << 20) for i in range(4)]
    handles = [session.submit("bash", {"command": f"head -c 1048576 /dev/zero | tr '\\0' '{i}' > tmp-{i}; "
                                                  f"mv tmp-{i} shared"}) for i in range(4)]
    handles += [session.submit("write", {"path": "shared", "content": content.decode(), "mode": "replace"})
                for content in contents]
    results = [handle.result(HANG_SECONDS) for handle in handles]
    assert all(result.ok or result.error.code in REFUSED for result in results), results
    assert all(result.ok for result in results[:4]), results
    assert (workspace / "shared").read_bytes() in contents


# -- containment -------------------------------------------------------------------------------------


def test_a_call_killed_at_its_deadline_leaves_another_calls_processes_alone(session, workspace):
    survivor = session.submit("bash", {"command": f"sleep 300 & echo $! > bystander.pid; ({gate_command('a')})"})
    assert wait_for(lambda: all_started(workspace, ["a"]) and pids_in(workspace / "bystander.pid"), HANG_SECONDS)
    bystander = pids_in(workspace / "bystander.pid")
    runaway = session.call("bash", {"command": "trap '' TERM; for i in 1 2 3; do sleep 1000 & done; wait",
                                    "timeout_seconds": 0.5})
    assert runaway.value["timed_out"] is True
    assert living(bystander) == bystander and not survivor.done()
    release(workspace)
    assert survivor.result(HANG_SECONDS).ok


def test_a_call_stopped_at_its_process_limit_does_not_limit_another(open_session, containment, workspace, leftovers):
    session = open_session({"runtime": {"containment": containment}, "limits": {"max_processes": 40}})
    (workspace / "forkloop.py").write_text(FORK_LOOP)
    bystander = session.submit("bash", {"command": f"sleep 300 & echo $! > bystander.pid; ({gate_command('a')}); "
                                                   "kill $(cat bystander.pid); "
                                                   "for i in $(seq 30); do sh -c 'echo ok' & done; wait"})
    assert wait_for(lambda: all_started(workspace, ["a"]) and pids_in(workspace / "bystander.pid"), HANG_SECONDS)
    pids = pids_in(workspace / "bystander.pid")
    runaway = session.call("bash", {"command": f"exec {sys.executable} forkloop.py", "timeout_seconds": 60})
    assert runaway.value["limit_exceeded"] == "processes", runaway.value
    assert living(pids) == pids and not bystander.done()
    release(workspace)
    value = bystander.result(HANG_SECONDS).value
    assert value["exit_code"] == 0 and value["limit_exceeded"] is None, value
    assert value["output"].split() == ["a"] + ["ok"] * 30
