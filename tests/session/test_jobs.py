"""Background jobs, the output store, live output and the text given to the model, with real processes."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket

import psutil
import pytest

import peon
from helpers import ALLOW_ALL, Leftovers, job_output_until, living, wait_for
from helpers.agents import Agents
from helpers.sandbox import bwrap_support


class Shared:
    """One session for the tests that need nothing of their own (session starts are most of the cost)."""

    def __init__(self, root, guard: Leftovers):
        self.workspace = root / "ws"
        self.workspace.mkdir()
        self.session = peon.Session(self.workspace, ALLOW_ALL, state_dir=root / "state", env=guard.env())


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    guard = Leftovers(tmp_path_factory.mktemp("home"))
    box = Shared(tmp_path_factory.mktemp("jobs"), guard)
    yield box
    box.session.close()
    assert guard.kill_all() == [], "processes outlived the shared jobs session"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def seq_offset(n: int) -> int:
    """The byte offset of the line ``n`` in the output of ``seq 1 ...``."""
    offset, width, low = 0, 1, 1
    while low * 10 <= n:
        offset += (low * 10 - low) * (width + 1)
        low, width = low * 10, width + 1
    return offset + (n - low) * (width + 1)


def test_a_background_server_answers_a_later_call_and_job_stop_leaves_nothing(shared):
    (shared.workspace / "index.html").write_text("served by a background job\n")
    session = shared.session
    port = free_port()
    started = session.call("bash", {"command": f"echo pid $$; exec python3 -u -m http.server {port} --bind 127.0.0.1",
                                    "background": True})
    assert started.ok, started.error
    value = started.value
    assert value["background"] is True and value["state"] == "running" and value["job_id"].startswith("job-")
    job = value["job_id"]
    text = job_output_until(session, job, "Serving HTTP")
    assert "Serving HTTP" in text, text
    server_pid = int(text.split("pid ", 1)[1].split()[0])
    assert living([server_pid])

    fetched = session.call("bash", {"command": f"curl -s --max-time 10 http://127.0.0.1:{port}/index.html"})
    assert fetched.ok and fetched.value["exit_code"] == 0, fetched
    assert fetched.value["output"] == "served by a background job\n"
    assert fetched.value["job_id"] != job

    listed = session.call("job_list", {})
    assert listed.ok and listed.value["running"] >= 1
    [entry] = [j for j in listed.value["jobs"] if j["job_id"] == job]
    assert entry["background"] and entry["command"].startswith("echo pid $$") and entry["state"] == "running"

    stopped = session.call("job_stop", {"job_id": job})
    assert stopped.ok, stopped.error
    assert stopped.value["state"] == "killed" and stopped.value["signal"] == "SIGTERM"
    assert "GET /index.html" in stopped.value["output_tail"]
    assert living([server_pid]) == []
    assert not psutil.pid_exists(server_pid) or not living([server_pid])
    after = session.call("job_output", {"job_id": job, "offset": 0})
    assert after.value["state"] == "killed" and after.value["eof"] is True
    again = session.call("job_stop", {"job_id": job})  # idempotent
    assert again.ok and again.value["state"] == "killed"

    audit = [json.loads(line) for line in (session.state_dir / "audit.jsonl").read_text().splitlines()]
    events = [(e["event"], e.get("job_id")) for e in audit if e["event"].startswith("job_") and e["job_id"] == job]
    assert events == [("job_started", job), ("job_ended", job)]
    assert next(e for e in audit if e["event"] == "job_ended")["outcome"]["state"] == "killed"


def test_a_truncated_result_is_recovered_exactly_through_job_output(shared):
    session = shared.session
    r = session.call("bash", {"command": "seq 1 300000"})
    assert r.ok and r.value["truncated"] is True
    expected = b"".join(b"%d\n" % i for i in range(1, 300001))
    assert r.value["output_bytes"] == r.value["output_retained_bytes"] == len(expected)
    pages, offset = [], 0
    while True:
        page = session.call("job_output", {"job_id": r.value["job_id"], "offset": offset, "limit": 1 << 20})
        assert page.ok, page.error
        assert page.value["offset"] == offset and page.value["dropped_before"] is None
        if not page.value["returned_bytes"]:
            break
        pages.append(page.value["output"].encode())
        offset = page.value["next_offset"]
    assert b"".join(pages) == expected and page.value["eof"] and page.value["state"] == "exited"
    middle = session.call("job_output", {"job_id": r.value["job_id"], "offset": seq_offset(150000), "limit": 7})
    assert middle.value["output"] == "150000\n"
    unknown = session.call("job_output", {"job_id": "job-999"})
    assert not unknown.ok and unknown.error.code == "unknown_job"


def test_a_flooding_job_keeps_the_supervisor_bounded_and_pages_with_exact_offsets(open_session):
    quota = 1 << 20
    session = open_session({"jobs": {"output_buffer_bytes": quota, "session_output_bytes": 2 * quota}})
    supervisor = psutil.Process(session.supervisor_pid)
    baseline = supervisor.memory_info().rss
    job = session.call("bash", {"command": "seq 1 100000000", "background": True}).value["job_id"]
    offset, flooded = 0, 0
    while flooded < 16_000_000:
        page = session.call("job_output", {"job_id": job, "offset": offset, "limit": 4096, "wait_seconds": 5})
        assert page.ok, page.error
        value = page.value
        flooded = value["output_bytes"]
        assert value["output_bytes"] - value["retained_from"] <= quota
        if value["dropped_before"] is not None:
            assert value["offset"] >= value["dropped_before"] > offset
        else:
            assert value["offset"] == offset
        # The first whole line of the page sits exactly at the offset seq puts it.
        text = value["output"]
        first_end = text.index("\n")
        line_start = value["offset"] + len(text[: first_end + 1].encode())
        number = int(text[first_end + 1 :].split("\n", 1)[0])
        assert seq_offset(number) == line_start
        offset = value["next_offset"] + 3_000_000  # skip ahead: most of it is evicted by now
    grown = supervisor.memory_info().rss - baseline
    assert grown < 48 << 20, f"the supervisor grew by {grown >> 20} MiB while a job wrote {flooded >> 20} MiB"
    assert session.call("job_stop", {"job_id": job}).value["state"] == "killed"


def test_the_results_of_answered_calls_are_not_held_beside_the_output_store(open_session):
    """A job record outlives its call; the call's result (up to limits.max_output_bytes of output) does not:
    what the supervisor holds of many calls' output stays within the store's quota."""
    calls, output = 150, 64 << 10
    session = open_session({"approval": {"process": "allow"}, "limits": {"max_output_bytes": output},
                            "jobs": {"output_buffer_bytes": output, "session_output_bytes": 1 << 20}})
    command = f"head -c {output} /dev/zero | tr '\\0' x"
    assert len(session.call("bash", {"command": command}).value["output"]) == output
    supervisor = psutil.Process(session.supervisor_pid)
    baseline = supervisor.memory_info().rss
    for _ in range(calls):
        result = session.call("bash", {"command": command})
        assert result.ok and result.value["output_bytes"] == output, result.error
    grown = supervisor.memory_info().rss - baseline
    # Held results would be calls x 64 KiB = 9.4 MiB (measured: +12 MiB); the store keeps 1 MiB.
    assert grown < 5 << 20, f"the supervisor grew by {grown / (1 << 20):.1f} MiB over {calls} answered calls"
    records = session.call("job_list", {}).value
    assert len(records["jobs"]) == calls + 1, records


def test_a_foreground_flood_keeps_its_newest_bytes_in_an_unnamed_file_of_the_state_directory(open_session, tmp_path):
    quota = 4 << 20
    state_dir = tmp_path / "flood-state"
    session = open_session({"jobs": {"output_buffer_bytes": quota}}, state_dir=state_dir)
    r = session.call("bash", {"command": "seq 1 3000000"})
    expected = b"".join(b"%d\n" % i for i in range(1, 3000001))
    assert r.ok and r.value["output_bytes"] == len(expected) and r.value["output_retained_bytes"] == quota
    job = r.value["job_id"]
    # Past 1 MiB the supervisor keeps the job's output in a file of the state directory that has no name.
    kept = [os.readlink(f"/proc/{session.supervisor_pid}/fd/{fd}")
            for fd in os.listdir(f"/proc/{session.supervisor_pid}/fd")]
    assert any(link.startswith(str(state_dir.resolve()) + "/") and link.endswith("(deleted)") for link in kept), kept
    pages, offset = [], 0
    while True:
        page = session.call("job_output", {"job_id": job, "offset": offset, "limit": 1 << 20})
        assert page.ok, page.error
        if not page.value["returned_bytes"]:
            break
        if offset == 0:
            assert page.value["dropped_before"] == len(expected) - quota
        pages.append(page.value["output"].encode())
        offset = page.value["next_offset"]
    assert b"".join(pages) == expected[-quota:]  # the newest bytes, each once (ASCII: no character split)
    assert not [name for name in os.listdir(state_dir) if name.startswith(".output-")]  # no name there


def test_jobs_end_with_their_session_and_the_cap_is_an_error(open_session):
    session = open_session({"jobs": {"max_running": 1}})
    first = session.call("bash", {"command": "echo pid $$; exec sleep 300", "background": True})
    assert first.ok
    pid = int(job_output_until(session, first.value["job_id"], "pid").split()[1])
    second = session.call("bash", {"command": "sleep 300", "background": True})
    assert not second.ok and second.error.code == "job_limit_reached"
    assert "jobs.max_running is 1" in second.error.message
    session.close()
    assert living([pid]) == []


def test_jobs_die_with_a_killed_supervisor(open_session, containment):
    session = open_session({"runtime": {"containment": containment}})
    job = session.call("bash", {"command": "echo pid $$; exec sleep 300", "background": True}).value["job_id"]
    pid = int(job_output_until(session, job, "pid").split()[1])
    os.kill(session.supervisor_pid, signal.SIGKILL)
    assert wait_for(lambda: not living([pid]), timeout=15), f"job process {pid} outlived its supervisor"


def test_yield_returns_output_so_far_and_a_quick_job_its_result(shared):
    session = shared.session
    quick = session.call("bash", {"command": "echo done; exit 4", "background": True, "yield_seconds": 30})
    assert quick.ok and quick.value["state"] == "exited" and quick.value["exit_code"] == 4
    assert quick.value["output"] == "done\n"
    waiting = session.call("bash", {"command": "echo first; exec sleep 300", "background": True, "yield_seconds": 0.5})
    assert waiting.ok and waiting.value["state"] == "running" and waiting.value["output"] == "first\n"
    assert session.call("job_stop", {"job_id": waiting.value["job_id"]}).ok


def test_output_is_cleaned_for_the_model_and_raw_on_request(shared, open_session):
    session = shared.session
    command = r"printf '\033[1;31mred\033[0m\n'; for p in 10 50 100; do printf '\r%3d%%' $p; done; printf '\n'"
    r = session.call("bash", {"command": command})
    assert r.ok and r.value["output"] == "red\n100%\n"
    raw = session.call("job_output", {"job_id": r.value["job_id"], "raw": True})
    assert raw.value["output"].startswith("\x1b[1;31mred\x1b[0m\n\r 10%")
    assert base64.b64decode(raw.value["output_base64"]) == b"\x1b[1;31mred\x1b[0m\n\r 10%\r 50%\r100%\n"
    assert r.value["output_bytes"] == len(base64.b64decode(raw.value["output_base64"]))
    plain = open_session({"jobs": {"clean_output": False}}).call("bash", {"command": command})
    assert plain.value["output"].startswith("\x1b[1;31m")


def test_progress_carries_the_newest_output_lines(shared):
    session, workspace = shared.session, shared.workspace
    seen: list[list[str]] = []

    def on_progress(update: dict) -> None:
        seen.append(update.get("lines") or [])
        if any("\x1b" not in line and "working on step 2" in line for line in update.get("lines") or []):
            (workspace / "go").touch()

    command = ("printf 'step 1\\n\\033[32mworking on step 2\\033[0m\\n'; "
               "while [ ! -e go ]; do sleep 0.05; done; echo end")
    r = session.call("bash", {"command": command, "timeout_seconds": 30}, on_progress=on_progress)
    assert r.ok and r.value["exit_code"] == 0 and r.value["duration_ms"] < 25_000
    assert ["step 1", "working on step 2"] in seen


def test_cwd_is_resolved_beneath_the_workspace(shared, tmp_path):
    workspace, session = shared.workspace, shared.session
    (workspace / "sub" / "deeper").mkdir(parents=True)
    (workspace / "inside").symlink_to("sub/deeper")
    (workspace / "leaves").symlink_to(tmp_path)
    (workspace / "file").write_text("x")
    r = session.call("bash", {"command": "pwd", "cwd": "sub"})
    assert r.ok and r.value["output"] == f"{workspace}/sub\n"
    r = session.call("bash", {"command": "pwd -P", "cwd": "inside"})
    assert r.ok and r.value["output"] == f"{workspace}/sub/deeper\n"
    for cwd, code in (("leaves", "outside_workspace"), ("../", "outside_workspace"), ("/tmp", "invalid_path"),
                      ("missing", "not_found"), ("file", "not_a_directory")):
        r = session.call("bash", {"command": "pwd", "cwd": cwd})
        assert not r.ok and r.error.code == code, (cwd, r)


def test_approval_shows_the_resolved_directory_and_background(open_session, workspace):
    (workspace / "sub").mkdir()
    (workspace / "link").symlink_to("sub")
    asked: list[dict] = []

    def approver(request: dict) -> str:
        asked.append(request)
        return "allow_once"

    session = open_session({"approval": {"process": "ask"}}, approver=approver)
    r = session.call("bash", {"command": "pwd", "cwd": "link", "background": True, "yield_seconds": 10})
    assert r.ok and r.value["state"] == "exited"
    details = asked[0]["details"]
    assert details["cwd"] == f"{workspace}/sub" and details["cwd_path"] == "sub" and details["background"] is True
    assert details["timeout_seconds"] == 3600.0


def test_a_job_ends_at_its_lifetime(open_session):
    session = open_session({"jobs": {"max_lifetime_seconds": 1.0}})
    job = session.call("bash", {"command": "exec sleep 300", "background": True}).value["job_id"]
    ended = session.call("job_output", {"job_id": job, "wait_seconds": 20}).value
    assert ended["state"] == "killed" and ended["timed_out"] is True and ended["signal"] == "SIGKILL"


@pytest.mark.parametrize("kind", ["landlock", "bwrap"])
def test_cwd_inside_the_os_sandbox(open_session, workspace, tmp_path, kind):
    if kind == "bwrap" and not bwrap_support().works:
        pytest.skip(f"bwrap unusable here: {bwrap_support().detail}")
    (workspace / "sub").mkdir()
    (workspace / "link").symlink_to("sub")
    (tmp_path / "tmp").mkdir()
    session = open_session({"sandbox": {"mode": "auto", "kind": kind}}, env={"TMPDIR": str(tmp_path / "tmp")})
    if not session.info["sandbox"]["active"] or session.info["sandbox"]["kind"] != kind:
        pytest.skip(f"the {kind} sandbox is not available here")
    r = session.call("bash", {"command": "pwd -P; touch made-here", "cwd": "link"})
    assert r.ok and r.value["exit_code"] == 0 and r.value["sandbox"]["kind"] == kind, r
    assert r.value["output"] == f"{workspace}/sub\n" and (workspace / "sub" / "made-here").exists()


def test_an_agent_result_carries_its_job(open_session, tmp_path):
    agents = Agents(tmp_path)
    session = open_session(env=agents.env)
    r = session.call("agent_claude", {"prompt": "say hello"})
    assert r.ok and r.value["job_id"].startswith("job-") and r.value["output_retained_bytes"] == r.value["output_bytes"]
    page = session.call("job_output", {"job_id": r.value["job_id"]})
    assert page.ok and page.value["output"] == r.value["output"] and page.value["state"] == "exited"
    [entry] = session.call("job_list", {}).value["jobs"]
    assert entry["tool"] == "agent_claude" and entry["command"] is None and entry["background"] is False


def test_a_waiting_job_output_holds_no_call_behind_it(shared):
    session = shared.session
    job = session.call("bash", {"command": "sleep 300", "background": True}).value["job_id"]
    waiting = session.submit("job_output", {"job_id": job, "wait_seconds": 60})
    echoed = session.call("bash", {"command": "echo behind"})
    assert echoed.ok and echoed.value["output"] == "behind\n"
    listed = session.call("job_list", {})
    assert listed.ok and any(j["job_id"] == job and j["state"] == "running" for j in listed.value["jobs"])
    assert not waiting.done(), "the other calls were answered while job_output still waited"
    stopped = session.call("job_stop", {"job_id": job})
    assert stopped.ok and stopped.value["state"] == "killed", stopped
    result = waiting.result(timeout=30)  # the job's end ends the wait
    assert result.ok and result.value["state"] == "killed", result
