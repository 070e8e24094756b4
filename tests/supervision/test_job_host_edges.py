"""The job host's edges, with real processes (cgroup containment): a job's process found in another job's
cgroup belongs to neither and is killed, the other job untouched; a job given to an idle host that was
stopped gets a new host instead of failing, though it never ran."""

from __future__ import annotations

import functools
import os
import signal
from pathlib import Path

import pytest

from helpers import CGROUP_SUPPORT, job_output_until, living, wait_for
from peon.workers import proctree

pytestmark = pytest.mark.skipif(not CGROUP_SUPPORT.available, reason="the job host runs jobs in cgroup containment")
CGROUP = {"runtime": {"containment": "cgroup"}}
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root may write a process into another cgroup")
output_until = functools.partial(job_output_until, timeout=30.0)


def start(session, command: str, **args) -> str:
    r = session.call("bash", {"command": command, "background": True, **args})
    assert r.ok, r.error
    assert r.value["state"] == "running", r.value
    return str(r.value["job_id"])


def job_state(session, job: str) -> dict:
    r = session.call("job_list", {})
    assert r.ok, r.error
    return next(info for info in r.value["jobs"] if info["job_id"] == job)


def job_hosts(session) -> list[int]:
    return [pid for pid in proctree.descendants(session.supervisor_pid)
            if proctree.cmdline(pid).startswith("peon-worker jobs")]


def cgroup_of(pid: int) -> str:
    with open(f"/proc/{pid}/cgroup") as f:
        return f.read().strip().rpartition("/")[2]


@as_root
def test_a_child_of_a_job_in_another_jobs_cgroup_dies_with_its_job_stop(open_session, workspace):
    """The mover is a child of the job's command (its ancestry names the job)."""
    session = open_session({**CGROUP, "sandbox": {"mode": "off"}})
    group = Path(session.info["containment"]["cgroup"])
    other = start(session, "echo pid $$; exec sleep 300")
    other_pid = int(output_until(session, other, "pid").split()[1])
    target = group / other / "cgroup.procs"
    mover = start(session, f"sh -c 'echo $$ > mover.pid; echo $$ > {target}; exec sleep 300' & "
                           "sleep 0.3; echo moved; exec sleep 300")
    assert "moved" in output_until(session, mover, "moved")
    moved = int((workspace / "mover.pid").read_text())
    assert session.call("job_stop", {"job_id": mover}).value["state"] == "killed"
    assert not living([moved]), f"a process of {mover} written into {other}'s cgroup outlived its job_stop"
    assert job_state(session, other)["state"] == "running" and living([other_pid])
    assert session.call("job_stop", {"job_id": other}).value["state"] == "killed"


@as_root
def test_a_daemon_of_a_job_in_another_jobs_cgroup_is_killed_while_both_run(open_session, workspace):
    """The mover left its job's session and was reparented to the host (``setsid`` and a double fork)
    before it moved: it was seen in its own job's cgroup, and started before the other job's command."""
    session = open_session({**CGROUP, "sandbox": {"mode": "off"}})
    group = Path(session.info["containment"]["cgroup"])
    daemon = ("(setsid sh -c 'echo $$ > mover.pid; while [ ! -s target ]; do sleep 0.05; done; "
              "echo $$ > \"$(cat target)\"; echo $$ > moved.pid; exec sleep 300' &); "
              "sleep 0.2; echo started; exec sleep 300")
    mover_job = start(session, daemon)
    assert "started" in output_until(session, mover_job, "started")
    moved = int((workspace / "mover.pid").read_text())
    [host] = job_hosts(session)
    assert moved in proctree.children(host)  # reparented to the host: no ancestry names its job
    other = start(session, "echo pid $$; exec sleep 300")
    other_pid = int(output_until(session, other, "pid").split()[1])
    (workspace / "target").write_text(str(group / other / "cgroup.procs"))
    assert wait_for(lambda: (workspace / "moved.pid").exists() or not living([moved]), timeout=10)
    assert wait_for(lambda: not living([moved]), timeout=10), (
        f"a process of {mover_job} in {other}'s cgroup ({cgroup_of(moved)}) is still alive")
    assert job_state(session, other)["state"] == "running" and living([other_pid])
    assert job_state(session, mover_job)["state"] == "running"
    for job in (other, mover_job):
        assert session.call("job_stop", {"job_id": job}).value["state"] == "killed"


def test_a_job_given_to_a_stopped_idle_host_gets_a_new_host(open_session):
    session = open_session(CGROUP)
    first = start(session, "echo pid $$; sleep 0.5")
    output_until(session, first, "pid")
    assert wait_for(lambda: job_state(session, first)["state"] == "exited", timeout=20)
    [host] = job_hosts(session)  # idle: it lingers a few seconds after its last job
    os.kill(host, signal.SIGSTOP)
    assert wait_for(lambda: proctree.state(host) == "T")
    r = session.call("bash", {"command": "echo pid $$; echo works; exec sleep 300", "background": True})
    assert r.ok, r.error  # not worker_hung: the job never reached the stopped host
    after = str(r.value["job_id"])
    assert "works" in output_until(session, after, "works")
    assert wait_for(lambda: not living([host]), timeout=10), "the stopped host was not killed"
    assert host not in job_hosts(session) and len(job_hosts(session)) == 1
    assert session.call("job_stop", {"job_id": after}).value["state"] == "killed"
