"""Nothing a call runs can reach Peon's descriptors or forge what a worker reports; every message is
bounded; Peon's processes cannot be ptraced or have their descriptors taken by the same user.

With real processes: commands list what they inherited (directly, after ``setsid``, after a double
fork, and as an agent started by an adapter); a tool plays a worker that writes malformed messages
into its real channel; a helper without ``CAP_SYS_PTRACE`` tries ``pidfd_getfd`` on each process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

import peon.client.session
from helpers import living, wait_for
from peon.workers import proctree

FIXTURES = Path(__file__).parent.parent / "fixtures"
TEST_TOOLS = {"env": {"PYTHONPATH": str(FIXTURES)},
              "tools": ["peon_test_tools:BreakChannelTool", "peon_test_tools:WorkerFactsTool",
                        "peon_test_tools:HugeResultTool"]}

FD_REPORT = textwrap.dedent("""\
    import json, os, sys
    names = os.listdir("/proc/self/fd")  # its own descriptor is closed again when this returns
    open_fds = {}
    for name in names:
        try:
            os.fstat(int(name))
        except OSError:
            continue
        try:
            open_fds[name] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            open_fds[name] = "?"
    with open(sys.argv[1] + ".part", "w") as out:
        json.dump(open_fds, out)
    os.replace(sys.argv[1] + ".part", sys.argv[1])  # complete once it exists
""")


@pytest.fixture
def tool_session(open_session, containment):
    return open_session({"runtime": {"containment": containment}}, **TEST_TOOLS)


def inherited(workspace: Path, name: str) -> dict[str, str]:
    path = workspace / name
    assert wait_for(path.exists, 10), f"the command did not report {name}"
    return json.loads(path.read_text())


def test_a_command_inherits_only_stdio(session, workspace):
    (workspace / "fds.py").write_text(FD_REPORT)
    py = sys.executable
    command = (f"{py} fds.py direct.json; setsid {py} fds.py setsid.json; "
               f"( ( {py} fds.py double.json & ) & ); until [ -s double.json ]; do sleep 0.01; done")
    r = session.call("bash", {"command": command})
    assert r.ok and r.value["exit_code"] == 0, r
    for name in ("direct.json", "setsid.json", "double.json"):
        fds = inherited(workspace, name)
        assert sorted(fds, key=int) == ["0", "1", "2"], (name, fds)


def test_an_agent_inherits_only_stdio(open_session, workspace, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    agent = bin_dir / "claude"
    agent.write_text(f"#!{sys.executable}\n" + FD_REPORT.replace('sys.argv[1]', '"agent.json"'))
    agent.chmod(0o755)
    session = open_session(env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    r = session.call("agent_claude", {"prompt": "list your descriptors"})
    assert r.ok and r.value["exit_code"] == 0, r
    assert sorted(inherited(workspace, "agent.json"), key=int) == ["0", "1", "2"]


def test_a_command_cannot_forge_its_result(session, workspace):
    # What a command would write if Peon's channel leaked into it: a JSON line and a framed message.
    forged = json.dumps({"op": "result", "ok": True, "value": {"exit_code": 0, "output": "forged"}})
    command = textwrap.dedent(f"""\
        for fd in /proc/self/fd/*; do
          n=${{fd##*/}}
          if [ "$n" -gt 2 ]; then printf '%s\\n' '{forged}' >&"$n"; fi
        done 2>/dev/null
        {sys.executable} -c '
    import os, struct
    payload = b"{{\\"op\\":\\"result\\",\\"ok\\":true,\\"value\\":{{\\"exit_code\\":0}}}}"
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2:
            try:
                os.write(int(name), struct.pack("!i", len(payload)) + payload)
            except OSError:
                pass
    '
        echo real
        exit 3""")
    r = session.call("bash", {"command": command})
    assert r.ok, r
    # The real outcome; whatever the writes reached is the command's own output, not a result.
    assert r.value["exit_code"] == 3 and r.value["output"].endswith("real\n"), r.value


BREAKS = ["forged_id", "not_json", "lone_surrogate", "invalid_utf8", "oversize", "huge", "bad_shape", "unknown_op",
          "bad_error_code", "not_an_object", "truncated"]


def test_a_worker_that_breaks_protocol_is_a_crashed_worker(tool_session):
    """Every way of breaking protocol, one after another in one session: each is a crashed worker, and
    the session goes on to the next."""
    for mode in BREAKS:
        facts = tool_session.call("worker_facts", {})
        assert facts.ok, (mode, facts)
        r = tool_session.call("break_channel", {"mode": mode})
        assert not r.ok and r.error.code == "worker_crashed", (mode, r)
        assert "broke protocol" in r.error.message, (mode, r.error.message)
        # Its worker is gone before the answer; the session goes on.
        after = tool_session.call("worker_facts", {})
        assert after.ok and after.value["pid"] != facts.value["pid"], mode
        assert tool_session.call("bash", {"command": "echo alive"}).value["output"] == "alive\n", mode


def _session_cgroups(session) -> int:
    path = session.info["containment"].get("cgroup")
    return sum(len(dirs) for _, dirs, _ in os.walk(path)) if path else 0


def _descriptors(pid: int) -> list[str]:
    """What each of ``pid``'s descriptors refers to (for a failure's message)."""
    try:
        return [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in sorted(os.listdir(f"/proc/{pid}/fd"), key=int)]
    except OSError:
        return []


def test_protocol_breaks_leak_no_descriptor_process_or_cgroup(tool_session):
    supervisor = psutil.Process(tool_session.supervisor_pid)

    def at_rest():
        """Its figures once the session is idle: one standby ready, nothing else below it."""
        def rest():
            below = proctree.descendants(tool_session.supervisor_pid)
            standbys = [p for p in below if proctree.cmdline(p) == "peon-worker standby"]
            return len(standbys) == 1 and len(below) == 2
        assert wait_for(rest, 15), [proctree.cmdline(p) for p in proctree.descendants(tool_session.supervisor_pid)]
        return supervisor.num_fds(), _session_cgroups(tool_session)

    assert tool_session.call("bash", {"command": "true"}).ok
    baseline = at_rest()
    modes = ["forged_id", "not_json", "lone_surrogate", "oversize", "bad_shape", "truncated"]
    for i in range(24):
        r = tool_session.call("break_channel", {"mode": modes[i % len(modes)]})
        assert r.error.code == "worker_crashed", r
    assert tool_session.call("bash", {"command": "true"}).ok
    assert wait_for(lambda: at_rest() == baseline, 15), (at_rest(), baseline, _descriptors(supervisor.pid))


def test_peon_processes_are_not_dumpable(tool_session, workspace):
    facts = tool_session.call("worker_facts", {})
    assert facts.value["dumpable"] is False
    handle = tool_session.submit("bash", {"command": "sleep 1000 & echo $! > sleep.pid; wait"})
    assert wait_for(lambda: (workspace / "sleep.pid").exists() and (workspace / "sleep.pid").read_text().strip(), 10)
    supervisor = tool_session.supervisor_pid
    [forkserver] = [p for p in proctree.children(supervisor) if proctree.cmdline(p).startswith("peon-forkserver")]
    [worker] = [p for p in proctree.children(forkserver) if proctree.cmdline(p).startswith("peon-worker bash")]
    command = int((workspace / "sleep.pid").read_text())
    verdicts = take_descriptor_zero([supervisor, forkserver, worker, command])
    handle.cancel()
    handle.result(timeout=30)
    if verdicts[str(command)] != 0:
        pytest.skip(f"pidfd_getfd is refused even on an ordinary process here (Yama ptrace_scope?): {verdicts}")
    for pid, name in ((supervisor, "supervisor"), (forkserver, "forkserver"), (worker, "worker")):
        assert verdicts[str(pid)] == 1, f"pidfd_getfd on the {name}: errno {verdicts[str(pid)]} ({verdicts})"  # EPERM


GETFD = textwrap.dedent("""\
    import ctypes, json, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    if os.geteuid() == 0:  # keep every capability but CAP_SYS_PTRACE (19) in effect: a plain same-user process
        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
        class Data(ctypes.Structure):
            _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                        ("inheritable", ctypes.c_uint32)]
        header, data = Header(0x20080522, 0), (Data * 2)()
        assert libc.capget(ctypes.byref(header), data) == 0
        data[0].effective &= ~(1 << 19)
        assert libc.capset(ctypes.byref(header), data) == 0
    SYS_pidfd_getfd = 438
    out = {}
    for pid in map(int, sys.argv[1:]):
        pidfd = os.pidfd_open(pid)
        fd = libc.syscall(SYS_pidfd_getfd, pidfd, 0, 0)
        out[str(pid)] = 0 if fd >= 0 else ctypes.get_errno()
    print(json.dumps(out))
""")


def take_descriptor_zero(pids: list[int]) -> dict[str, int]:
    """From a process of the same user without CAP_SYS_PTRACE in effect: per pid, 0 where
    ``pidfd_getfd`` took its descriptor 0, else the errno."""
    done = subprocess.run([sys.executable, "-c", GETFD, *map(str, pids)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_result_over_the_channel_bound_is_too_large(tool_session):
    r = tool_session.call("huge_result", {"bytes": 64 << 20})
    assert not r.ok and r.error.code == "too_large", r
    assert str(r.error.details["limit"]) in r.error.message
    value = tool_session.call("huge_result", {"bytes": 10}).value
    value.pop("waited_for_worker_ms", None)  # the too-large call's worker was killed: the next may wait for one
    assert value == {"text": "x" * 10}


def test_a_read_within_legal_settings_but_over_the_bound_is_answered(open_session, workspace):
    session = open_session({"limits": {"read_max_bytes": 80 << 20}})
    (workspace / "big.txt").write_bytes(b"a" * (70 << 20))
    r = session.submit("read", {"path": "big.txt"}).result(timeout=120)
    assert not r.ok and r.error.code == "too_large", r
    assert session.call("read", {"path": "big.txt", "limit": 5}).value["content"] == "aaaaa"


def test_the_client_answers_a_call_whose_message_it_cannot_read(open_session, monkeypatch):
    monkeypatch.setattr(peon.client.session.Session, "max_message_bytes", 1 << 20)
    session = open_session(**TEST_TOOLS)
    r = session.submit("huge_result", {"bytes": 2 << 20}).result(timeout=60)
    assert not r.ok and r.error.code == "too_large", r
    value = session.call("huge_result", {"bytes": 3}).value
    value.pop("waited_for_worker_ms", None)  # the previous call's worker was killed: this one may wait for one
    assert value == {"text": "xxx"}  # the stream went on


def test_workers_are_multiprocessing_processes_of_a_lean_forkserver(tool_session):
    facts = tool_session.call("worker_facts", {}).value
    assert facts["process_name"] == "peon-worker"
    assert facts["parent_pid"] == tool_session.supervisor_pid  # multiprocessing's parent: the supervisor
    forkserver = facts["ppid"]
    assert proctree.cmdline(forkserver).startswith("peon-forkserver")
    heavy = [m for m in facts["modules"]
             if m.split(".")[0] in ("pydantic", "pydantic_core", "jsonschema")
             or m in ("peon.client.config", "peon.approval.validation") or m.startswith("peon.supervisor")]
    assert heavy == [], heavy
    assert facts["root_fd"] > 2 and facts["root_fd"] in facts["fds"]
    assert facts["inheritable"] == []  # what arrived with SCM_RIGHTS is close-on-exec too
    # Its channel and its event loop's wake-up pair: no channel of a warm-up round is left open, here
    # or in the forkserver (its listening socket, and a connection while it forks a worker).
    assert len(facts["sockets"]) == 3, facts["sockets"]
    assert wait_for(lambda: len(_sockets_of(forkserver)) <= 2, 10), _sockets_of(forkserver)
    assert living([forkserver]) == [forkserver]


def _sockets_of(pid: int) -> list[str]:
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:"):
            found.append(link)
    return found
