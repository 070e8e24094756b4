"""Auto-yield (``limits.yield_after_seconds``) through real sessions: a foreground command still running
is answered with its output so far and its ``job_id``, and runs on as a job under its own deadline."""

from __future__ import annotations

import json
import os

from helpers import job_output_until, living, wait_for

YIELD = {"limits": {"yield_after_seconds": 1}}


def audit_events(state_dir) -> list[dict]:
    entries = []
    for name in sorted(n for n in os.listdir(state_dir) if n.startswith("audit.jsonl")):
        with open(state_dir / name) as f:
            entries.extend(json.loads(line) for line in f)
    return entries


def test_a_long_command_yields_its_output_so_far_and_runs_on_as_a_job(open_session, tmp_path):
    session = open_session(YIELD, state_dir=tmp_path / "state")
    answer = session.call("bash", {"command": "echo start; sleep 4; echo done"})
    assert answer.ok, answer.error
    value = answer.value
    # Answered while its command still ran: before it wrote its last line.
    assert value["yielded"] is True and value["state"] == "running" and value["background"] is True
    assert value["output"] == "start\n" and "done" not in value["output"]
    job = value["job_id"]
    assert job.startswith("job-") and 0 < value["timeout_seconds"] < 120
    listed = session.call("job_list", {}).value["jobs"]
    assert [j["background"] for j in listed if j["job_id"] == job] == [True]
    assert job_output_until(session, job, "done") == "start\ndone\n"
    assert wait_for(lambda: session.call("job_list", {}).value["running"] == 0)
    ended = session.call("job_output", {"job_id": job}).value
    assert ended["state"] == "exited" and ended["exit_code"] == 0
    session.close()
    events = [(e["event"], e.get("job_id")) for e in audit_events(tmp_path / "state")
              if e.get("call_id") == answer.call_id and e["event"] != "decision"]
    # The job going on beyond its call, the call's answer, the job's end, in that order.
    assert events == [("job_started", job), ("result", None), ("job_ended", job)], events


def test_a_command_that_ends_first_is_answered_plainly(open_session):
    session = open_session(YIELD)
    answer = session.call("bash", {"command": "echo quick; exit 3"})
    assert answer.ok, answer.error
    assert "yielded" not in answer.value and answer.value["exit_code"] == 3 and answer.value["output"] == "quick\n"
    assert answer.value["job_id"].startswith("job-")
    [entry] = session.call("job_list", {}).value["jobs"]
    assert entry["background"] is False and entry["state"] == "exited"


def test_a_yielded_job_keeps_its_deadline_and_job_stop_and_close_end_it(open_session):
    session = open_session(YIELD)
    timed = session.call("bash", {"command": "echo pid $$; exec sleep 300", "timeout_seconds": 3})
    assert timed.ok and timed.value["yielded"], timed
    pid = int(job_output_until(session, timed.value["job_id"], "pid").split()[1])
    assert wait_for(lambda: session.call("job_output", {"job_id": timed.value["job_id"]}).value["state"] != "running",
                    timeout=15)
    info = session.call("job_output", {"job_id": timed.value["job_id"]}).value
    assert info["state"] == "killed" and info["timed_out"] is True
    assert wait_for(lambda: not living([pid]))

    stopped = session.call("bash", {"command": "echo pid $$; exec sleep 300"})
    assert stopped.ok and stopped.value["yielded"]
    pid = int(job_output_until(session, stopped.value["job_id"], "pid").split()[1])
    result = session.call("job_stop", {"job_id": stopped.value["job_id"]})
    assert result.ok and result.value["state"] == "killed"
    assert wait_for(lambda: not living([pid]))

    closed = session.call("bash", {"command": "echo pid $$; exec sleep 300"})
    assert closed.ok and closed.value["yielded"]
    pid = int(job_output_until(session, closed.value["job_id"], "pid").split()[1])
    session.close()
    assert living([pid]) == []


def test_a_call_cancelled_before_it_yields_ends_with_its_job(open_session):
    session = open_session({"limits": {"yield_after_seconds": 60}})
    handle = session.submit("bash", {"command": "echo pid $$; exec sleep 300"})
    assert wait_for(lambda: session.call("job_list", {}).value["jobs"] != [])
    handle.cancel()
    result = handle.result(timeout=30)
    assert result.ok and result.value["cancelled"] is True and "yielded" not in result.value
    [entry] = session.call("job_list", {}).value["jobs"]
    assert entry["state"] == "killed" and entry["background"] is False


def test_no_yield_while_jobs_max_running_run(open_session):
    session = open_session({"limits": {"yield_after_seconds": 0.5}, "jobs": {"max_running": 0}})
    answer = session.call("bash", {"command": "sleep 1.5; echo done"})
    assert answer.ok and "yielded" not in answer.value and answer.value["output"] == "done\n"


def test_a_session_yields_nothing_by_default(open_session):
    session = open_session()
    assert session.config.config.limits.yield_after_seconds == 0


def test_a_call_submitted_without_auto_yield_is_answered_at_its_end(open_session):
    session = open_session({"limits": {"yield_after_seconds": 0.5}})
    answer = session.submit("bash", {"command": "sleep 1.5; echo done"}, auto_yield=False).result(timeout=60)
    assert answer.ok and "yielded" not in answer.value and answer.value["output"] == "done\n"
