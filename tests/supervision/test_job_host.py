"""The job host: every background job of a session in one worker (cgroup containment), with real
processes — one Python process for N jobs, outputs kept apart, one job stopped or killed at its
deadline without touching the other, a job's daemon killed with its job only, a host killed or
stopped ending its jobs failed with the reason, and nothing left when the session closes."""

from __future__ import annotations

import base64
import functools
import os
import re
import signal
from pathlib import Path

import psutil
import pytest

from helpers import CGROUP_SUPPORT
from helpers import job_output_until, living, wait_for
from peon.workers import proctree

pytestmark = pytest.mark.skipif(not CGROUP_SUPPORT.available, reason="the job host runs jobs in cgroup containment")
CGROUP = {"runtime": {"containment": "cgroup"}}


def workers(session) -> dict[int, str]:
    """The session's Python worker processes (pid: title)."""
    found = {}
    for pid in proctree.descendants(session.supervisor_pid):
        title = proctree.cmdline(pid)
        if title.startswith("peon-worker"):
            found[pid] = title
    return found


def serving(session) -> list[int]:
    """The session's workers other than the pool's waiting standbys."""
    return [pid for pid, title in workers(session).items() if title != "peon-worker standby"]


def job_hosts(session) -> list[int]:
    return [pid for pid, title in workers(session).items() if title.startswith("peon-worker jobs")]


def start(session, command: str, **args) -> str:
    r = session.call("bash", {"command": command, "background": True, **args})
    assert r.ok, r.error
    assert r.value["state"] == "running", r.value
    return str(r.value["job_id"])


output_until = functools.partial(job_output_until, timeout=30.0)


def job_state(session, job: str) -> dict:
    r = session.call("job_list", {})
    assert r.ok, r.error
    return next(info for info in r.value["jobs"] if info["job_id"] == job)


def ended(session, job: str, timeout: float = 30.0) -> dict:
    assert wait_for(lambda: job_state(session, job)["state"] != "running", timeout=timeout), f"{job} still runs"
    return job_state(session, job)


def test_several_jobs_share_one_host_and_their_outputs_never_mix(open_session):
    session = open_session(CGROUP)
    first = start(session, "echo ready; for i in $(seq 1 300); do echo A$i; done; sleep 300")
    assert "ready" in output_until(session, first, "ready")
    hosts = job_hosts(session)
    assert len(hosts) == 1, workers(session)
    # The pool's standbys come and go (one while idle, a second while calls use workers up, each titled once
    # it has started): what a job could add is a worker of another kind.
    assert sorted(serving(session)) == hosts, workers(session)
    others = [start(session, f"echo ready; for i in $(seq 1 300); do echo {tag}$i; done; sleep 300")
              for tag in ("B", "C")]
    for job in others:
        assert "ready" in output_until(session, job, "ready")
    # Jobs 2 and 3 cost no Python process: the same host runs all three.
    assert job_hosts(session) == hosts
    assert sorted(serving(session)) == hosts, workers(session)
    for job, tag in zip((first, *others), "ABC", strict=True):
        text = output_until(session, job, f"{tag}300")
        lines = text.split()
        assert lines == ["ready", *(f"{tag}{i}" for i in range(1, 301))], (job, lines[:5])
    for job in (first, *others):
        assert session.call("job_stop", {"job_id": job}).value["state"] == "killed"


def test_job_stop_of_one_leaves_the_other_running(open_session):
    session = open_session(CGROUP)
    stopped = start(session, "echo pid $$; exec sleep 300")
    going = start(session, "echo pid $$; while true; do echo tick; sleep 0.1; done")
    pid_stopped = int(output_until(session, stopped, "pid").split()[1])
    pid_going = int(output_until(session, going, "pid").split()[1])
    info = session.call("job_stop", {"job_id": stopped}).value
    assert info["state"] == "killed" and not living([pid_stopped])
    assert job_state(session, going)["state"] == "running" and living([pid_going])
    before = job_state(session, going)["output_bytes"]
    assert wait_for(lambda: job_state(session, going)["output_bytes"] > before, timeout=10)
    assert session.call("job_stop", {"job_id": going}).value["state"] == "killed"
    assert not living([pid_going])


def test_a_jobs_daemon_dies_with_its_job_and_not_with_the_other(open_session, workspace):
    session = open_session(CGROUP)
    daemon = "(setsid sh -c 'sleep 300 & echo $! > {0}; exit 0' &) ; sleep 0.2; echo started; exec sleep 300"
    first = start(session, daemon.format("first.pid"))
    second = start(session, daemon.format("second.pid"))
    for job in (first, second):
        assert "started" in output_until(session, job, "started")
    first_daemon = int((workspace / "first.pid").read_text())
    second_daemon = int((workspace / "second.pid").read_text())
    host = job_hosts(session)[0]
    # Each daemon escaped its job's process group and was reparented to the host: both below it.
    assert {first_daemon, second_daemon} <= set(proctree.descendants(host))
    session.call("job_stop", {"job_id": first})
    assert wait_for(lambda: not living([first_daemon]), timeout=10), "the first job's daemon outlived its job"
    assert living([second_daemon]), "stopping one job killed the other job's daemon"
    session.call("job_stop", {"job_id": second})
    assert wait_for(lambda: not living([second_daemon]), timeout=10)


def test_a_jobs_deadline_kills_it_and_not_the_other(open_session):
    session = open_session(CGROUP)
    lasting = start(session, "echo pid $$; exec sleep 300")
    short = start(session, "echo pid $$; exec sleep 300", timeout_seconds=1)
    info = ended(session, short)
    assert info["state"] == "killed" and info["timed_out"] is True and info["signal"] == "SIGKILL"
    assert job_state(session, lasting)["state"] == "running"
    session.call("job_stop", {"job_id": lasting})


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "stopped"])
def test_a_host_killed_or_stopped_ends_its_jobs_failed_and_the_next_job_works(open_session, how):
    session = open_session(CGROUP)
    jobs = [start(session, "echo pid $$; exec sleep 300") for _ in range(2)]
    pids = [int(output_until(session, job, "pid").split()[1]) for job in jobs]
    [host] = job_hosts(session)
    os.kill(host, how)
    for job in jobs:
        info = ended(session, job)
        assert info["state"] == "killed", info
        reason = "job_host" if how == signal.SIGKILL else "job_host_stopped"
        expected = "worker_crashed" if how == signal.SIGKILL else "worker_hung"
        assert info["error"]["code"] == expected and info["error"]["details"]["reason"] == reason, info
        assert "job host" in info["error"]["message"]
    assert wait_for(lambda: not living([*pids, host]), timeout=10), "the host's jobs outlived it"
    after = start(session, "echo pid $$; echo works; exec sleep 300")
    assert "works" in output_until(session, after, "works")
    assert job_hosts(session) != [host] and len(job_hosts(session)) == 1
    assert session.call("job_stop", {"job_id": after}).value["state"] == "killed"


def test_the_host_is_retired_after_its_last_job(open_session):
    session = open_session(CGROUP)
    job = start(session, "echo pid $$; exec sleep 300")
    output_until(session, job, "pid")
    [host] = job_hosts(session)
    session.call("job_stop", {"job_id": job})
    assert wait_for(lambda: not living([host]), timeout=20), "the job host outlived its last job"
    assert job_hosts(session) == []


def test_session_close_with_jobs_running_leaves_nothing(open_session, workspace):
    session = open_session(CGROUP)
    daemon = "(setsid sh -c 'sleep 300 & echo $! > {0}' &); sleep 0.2; echo pid $$; exec sleep 300"
    jobs = [start(session, daemon.format(f"d{i}.pid")) for i in range(2)]
    pids = [int(output_until(session, job, "pid").split()[1]) for job in jobs]
    pids += [int((workspace / f"d{i}.pid").read_text()) for i in range(2)]
    pids += job_hosts(session)
    group = Path(session.info["containment"]["cgroup"])
    assert sorted(p.name for p in group.iterdir() if p.name.startswith("job-")) == sorted(jobs)
    session.close()
    assert wait_for(lambda: not living(pids), timeout=15), [psutil.Process(p).cmdline() for p in living(pids)]
    assert not group.exists()


def test_a_sandboxed_job_in_the_host_is_still_confined(open_session, workspace, tmp_path):
    outside, tmp = tmp_path / "outside", tmp_path / "tmp"
    outside.mkdir()
    tmp.mkdir()
    # The sandbox's temp dir is tmp/: outside/ is outside every writable path.
    session = open_session({**CGROUP, "sandbox": {"mode": "auto", "kind": "landlock"}}, env={"TMPDIR": str(tmp)})
    if not session.info["sandbox"]["active"]:
        pytest.skip("the landlock sandbox is not available here")
    free = start(session, "echo pid $$; exec sleep 300")
    confined = start(session, f"touch {outside}/escaped; echo status $?; touch inside; echo done; exec sleep 300")
    text = output_until(session, confined, "done")
    assert "status 1" in text and not (outside / "escaped").exists() and (workspace / "inside").exists(), text
    assert re.search("Permission denied|Read-only file system", text), text
    (outside / "control").touch()  # the test itself may write there: the refusal was the sandbox's
    for job in (free, confined):
        session.call("job_stop", {"job_id": job})


def test_each_jobs_process_limit_counts_its_own_processes_only(open_session):
    session = open_session({**CGROUP, "limits": {"max_processes": 24}})
    spawn = "for i in $(seq 1 {0}); do sleep 300 & done; echo forked; wait"
    calm = start(session, spawn.format(15))
    busy = start(session, spawn.format(15))
    for job in (calm, busy):
        assert "forked" in output_until(session, job, "forked")
    # 30 processes in all, 15 each: within each job's limit of 24.
    assert job_state(session, calm)["state"] == "running" and job_state(session, busy)["state"] == "running"
    more = start(session, spawn.format(40))
    info = ended(session, more)
    assert info["state"] == "killed", info
    assert job_state(session, calm)["state"] == "running" and job_state(session, busy)["state"] == "running"
    for job in (calm, busy):
        session.call("job_stop", {"job_id": job})


def test_in_process_tree_containment_each_job_keeps_a_worker(open_session):
    session = open_session({"runtime": {"containment": "process-tree"}})
    jobs = [start(session, "echo pid $$; exec sleep 300") for _ in range(2)]
    for job in jobs:
        output_until(session, job, "pid")
    titles = workers(session).values()
    assert not job_hosts(session)
    assert sum(title.startswith("peon-worker bash job-") for title in titles) == 2, titles
    for job in jobs:
        session.call("job_stop", {"job_id": job})


def test_no_descriptor_of_the_host_or_of_another_job_reaches_a_job(open_session, workspace):
    session = open_session(CGROUP)
    other = start(session, "echo pid $$; exec sleep 300")
    output_until(session, other, "pid")
    # The host holds the other job's pipe and pidfd, its channel and the pinned root: none may be inherited.
    probe = start(session, "ls /proc/$$/fd > fds.txt; echo listed; exec sleep 300")
    output_until(session, probe, "listed")
    assert sorted((workspace / "fds.txt").read_text().split()) == ["0", "1", "2"]
    for job in (other, probe):
        session.call("job_stop", {"job_id": job})


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may move a process to another cgroup")
def test_a_process_that_leaves_its_jobs_cgroup_is_killed_when_a_job_ends(open_session, workspace):
    session = open_session({**CGROUP, "sandbox": {"mode": "off"}})
    elsewhere = Path(session.info["containment"]["cgroup"]) / "forkserver"  # a cgroup of the session's, not the job's
    escape = (f"setsid sh -c 'echo $$ > escapee.pid; echo $$ > {elsewhere}/cgroup.procs; exec sleep 300' & "
              "sleep 0.3; echo moved; exec sleep 300")
    other = start(session, "echo pid $$; exec sleep 300")  # keeps the host running meanwhile
    job = start(session, escape)
    assert "moved" in output_until(session, job, "moved")
    [host] = job_hosts(session)
    escapee = int((workspace / "escapee.pid").read_text())
    with open(f"/proc/{escapee}/cgroup") as f:
        assert f.read().strip().endswith("/forkserver")  # out of its job's cgroup, still below the host
    session.call("job_stop", {"job_id": job})
    assert wait_for(lambda: not living([escapee]), timeout=10), "a process that left its job's cgroup survived"
    assert living([host]) and job_state(session, other)["state"] == "running"
    session.call("job_stop", {"job_id": other})


def test_a_host_that_breaks_protocol_is_killed_with_its_jobs(open_session):
    fixtures = Path(__file__).parent.parent / "fixtures"
    session = open_session(CGROUP, env={"PYTHONPATH": str(fixtures)}, tools=["job_host_tools:BreakHostTool"])
    bystander = start(session, "echo pid $$; exec sleep 300")
    pid = int(output_until(session, bystander, "pid").split()[1])
    [host] = job_hosts(session)
    broken = session.call("break_host", {"background": True})
    assert broken.ok and broken.value["state"] == "running", broken
    for job in (bystander, broken.value["job_id"]):
        info = ended(session, job)
        assert info["state"] == "killed" and info["error"]["code"] == "worker_crashed", info
        assert info["error"]["details"]["reason"] == "protocol" and "broke protocol" in info["error"]["message"]
    assert wait_for(lambda: not living([pid, host]), timeout=10)
    after = start(session, "echo works; exec sleep 300")
    assert "works" in output_until(session, after, "works")
    session.call("job_stop", {"job_id": after})


def test_a_hung_host_is_killed_at_a_jobs_deadline_plus_grace(open_session):
    fixtures = Path(__file__).parent.parent / "fixtures"
    session = open_session({**CGROUP, "limits": {"worker_grace_seconds": 1}}, env={"PYTHONPATH": str(fixtures)},
                           tools=["job_host_tools:BlockHostTool"])
    bystander = start(session, "echo pid $$; exec sleep 300")
    pid = int(output_until(session, bystander, "pid").split()[1])
    [host] = job_hosts(session)
    blocked = session.call("block_host", {"background": True, "timeout_seconds": 1})
    assert blocked.ok, blocked
    for job in (blocked.value["job_id"], bystander):
        info = ended(session, job)
        assert info["state"] == "killed" and info["error"]["code"] == "worker_hung", info
        assert info["error"]["details"]["reason"] == "job_host_hung", info
    assert wait_for(lambda: not living([pid, host]), timeout=10)


def test_two_floods_through_one_host_arrive_whole_and_apart(open_session):
    session = open_session(CGROUP)
    size = 4 << 20
    jobs = {tag: start(session, f"yes {tag} | head -c {size}") for tag in "AB"}
    for tag, job in jobs.items():
        info = ended(session, job)
        assert info["state"] == "exited" and info["output_bytes"] == size, info
        offset, data = 0, b""
        while offset < size:
            page = session.call("job_output", {"job_id": job, "offset": offset, "limit": 1 << 20, "raw": True})
            assert page.ok, page.error
            data += base64.b64decode(page.value["output_base64"])
            offset = page.value["next_offset"]
        assert data == f"{tag}\n".encode() * (size // 2), (tag, len(data), set(data))
