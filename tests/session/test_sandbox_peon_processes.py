"""A command cannot change Peon's own processes: under the default sandbox the seccomp filter refuses
``prlimit``, ``renice``, ``taskset`` and ``ionice`` of the supervisor, the forkserver and the worker (the
session keeps working, its limits unchanged), while ``ulimit``, ``nice``, ``prlimit CMD`` and the like still
work on the command itself; and with the sandbox off, where nothing stops such a command, a worker whose
limits or priority were changed is not reused: the next call runs on a fresh worker as the session started it."""

from __future__ import annotations

import shutil

import pytest

from peon.workers.sandbox import landlock as ll
from peon.workers.sandbox import namespaces, syscall_filter

ABI = ll.abi_version().abi
TOOLS = ("prlimit", "renice", "taskset", "ionice")


def _limits(pid: int) -> str:
    with open(f"/proc/{pid}/limits") as handle:
        return handle.read()


def _nice(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rpartition(")")[2].split()[16]


def _run(session, command: str) -> list[str]:
    r = session.call("bash", {"command": command})
    assert r.ok and r.value["exit_code"] == 0, r
    return r.value["output"].split()


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rpartition(")")[2].split()[1])


@pytest.mark.skipif(ABI < 1 or bool(syscall_filter.available()) or any(not shutil.which(t) for t in TOOLS),
                    reason="needs Landlock, libseccomp and util-linux's prlimit, renice, taskset, ionice")
def test_a_sandboxed_command_cannot_change_peons_processes_but_changes_its_own(open_session, tmp_path):
    (tmp_path / "tmp").mkdir()
    session = open_session(env={"TMPDIR": str(tmp_path / "tmp")})
    status = session.info["sandbox"]
    assert status["active"] and "seccomp" in status["layers"], status
    if not namespaces.probe():
        assert "mount_view" in status["layers"]
    supervisor = session.supervisor_pid
    before = {"supervisor": _limits(supervisor), "supervisor_nice": _nice(supervisor)}
    # $PPID is the worker, its parent the forkserver; each attempt prints the tool's exit status.
    attempts = ('prlimit --pid "$p" --nofile=8:8 >/dev/null 2>&1; echo "prlimit=$?"; '
                'renice -n 19 -p "$p" >/dev/null 2>&1; echo "renice=$?"; '
                'taskset -p 1 "$p" >/dev/null 2>&1; echo "taskset=$?"; '
                'ionice -c 3 -p "$p" >/dev/null 2>&1; echo "ionice=$?"; ')
    command = ("forkserver=$(sed 's/.*) //' /proc/$PPID/stat | cut -d' ' -f2); "
               f"for p in {supervisor} $forkserver $PPID; do {attempts} done; "
               # ... and on itself: the shell's own limits, a child's niceness, a command under prlimit
               'ulimit -n 64 && [ "$(ulimit -n)" = 64 ] && echo own_ulimit=0; '
               '[ "$(nice -n 5 nice)" = 5 ] && echo own_nice=0; '
               'prlimit --nofile=32:32 sh -c \'[ "$(ulimit -n)" = 32 ]\' && echo own_prlimit=0; '
               'taskset -c 0 true && echo own_taskset=0; ionice -c 3 true && echo own_ionice=0')
    out = _run(session, command)
    own = [line for line in out if line.startswith("own_")]
    others = [line for line in out if not line.startswith("own_")]
    assert own == ["own_ulimit=0", "own_nice=0", "own_prlimit=0", "own_taskset=0", "own_ionice=0"], out
    assert len(others) == 12 and all(not line.endswith("=0") for line in others), out
    assert _limits(supervisor) == before["supervisor"] and _nice(supervisor) == before["supervisor_nice"]
    for _ in range(3):  # the session serves on, its processes as they were
        assert _run(session, "ulimit -n")[0] != "8"
    session.close()


def test_with_the_sandbox_off_a_worker_whose_limits_or_priority_changed_is_not_reused(open_session):
    if not shutil.which("prlimit") or not shutil.which("renice"):
        pytest.skip("needs util-linux's prlimit and renice")
    session = open_session({"sandbox": {"mode": "off"}})
    first, nofile, nice = _run(session, "echo $PPID; ulimit -n; nice")
    forkserver = _parent(int(first))
    again = _run(session, "echo $PPID")[0]
    assert again == first, "a clean call's worker serves the next one (the control)"
    lowered = str(min(int(nofile) // 2, 64))
    assert _run(session, f"prlimit --pid $PPID --nofile={lowered}:{lowered} && echo $PPID")[0] == first
    worker, limit, niceness = _run(session, "echo $PPID; ulimit -n; nice")
    assert worker != first and (limit, niceness) == (nofile, nice), "the changed worker was reused"
    assert _run(session, "renice -n 7 -p $PPID >/dev/null && echo $PPID")[0] == worker
    fresh, limit, niceness = _run(session, "echo $PPID; ulimit -n; nice")
    assert fresh not in (first, worker) and (limit, niceness) == (nofile, nice), "the reniced worker was reused"
    assert _parent(int(fresh)) == forkserver  # a worker of the same forkserver, as the session started
