"""The forkserver's channel, with real processes and sockets: no socket of a session has a name a
command could find, connect to or put its own in place of (unsandboxed, and inside a real Landlock
sandbox); nothing of Peon's is left in the client's or the supervisor's temp dir; the forkserver forks
only for its supervisor, and the supervisor takes answers only from its forkserver."""

from __future__ import annotations

import array
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from helpers import living, wait_for
from peon.supervisor.forker import ChannelForkServer
from peon.workers import forkserver as wf
from peon.workers import proctree
from peon.workers.sandbox import landlock

LANDLOCK = landlock.abi_version().abi
SANDBOXES = ["off", pytest.param("required", marks=pytest.mark.skipif(
    LANDLOCK < 1, reason="this kernel has no Landlock (see `peon doctor`)"))]

# What a command does to reach the forkserver: look for a socket (or the standard library's runtime
# directories) wherever it can read, connect to each socket, and try to put a socket of its own in
# its place. Prints one JSON line.
SEARCH = r"""
import json, os, socket, stat, sys
found, connected, replaced = [], [], []
for root in sys.argv[1:]:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISSOCK(mode) or name.startswith(("listener-", "pymp-", "peon-run-")):
                found.append(path)
            if not stat.S_ISSOCK(mode):
                continue
            client = socket.socket(socket.AF_UNIX)
            try:
                client.settimeout(2)
                client.connect(path)
                connected.append(path)
            except OSError:
                pass
            finally:
                client.close()
            try:
                os.rename(path, path + ".moved")
                impostor = socket.socket(socket.AF_UNIX)
                impostor.bind(path)
                impostor.listen()
                replaced.append(path)
            except OSError:
                pass
print(json.dumps({"found": found, "connected": connected, "replaced": replaced}))
"""


def search_command(*roots: Path) -> str:
    return " ".join(shlex.quote(str(a)) for a in (sys.executable, "-I", "-c", SEARCH, *roots))


def socket_names(pids: list[int]) -> dict[int, str]:
    """The unix sockets ``pids`` hold, by inode, with their names ("" for none, "@..." abstract)."""
    inodes: set[int] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[len("socket:["):-1]))
    names: dict[int, str] = {}
    with open("/proc/net/unix") as table:
        for line in table.read().splitlines()[1:]:
            fields = line.split()
            if int(fields[6]) in inodes:
                names[int(fields[6])] = fields[7] if len(fields) > 7 else ""
    return names


def forkserver_of(session) -> int:
    found: list[int] = []
    assert wait_for(lambda: found.extend(p for p in proctree.children(session.supervisor_pid)
                                         if proctree.cmdline(p).startswith("peon-forkserver")) or found, 30)
    return found[0]


@pytest.fixture
def private_tmp(tmp_path, monkeypatch) -> Path:
    """One temp dir for the client (this process) and the session's processes (TMPDIR)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def test_no_socket_of_a_session_has_a_name_and_nothing_is_left_in_its_temp_dir(open_session, private_tmp):
    session = open_session(env={"TMPDIR": str(private_tmp)})
    assert session.call("bash", {"command": "true"}).ok
    forkserver = forkserver_of(session)
    assert wait_for(lambda: len(proctree.children(forkserver)) >= 1, 30)  # a standby, started after the reply
    processes = [session.supervisor_pid, *proctree.descendants(session.supervisor_pid)]
    names = socket_names(processes)
    assert names, "the session's processes hold sockets"
    assert {inode: name for inode, name in names.items() if name} == {}
    # Only the sandbox's cache directory for the commands' tool caches (a plain directory, removed at close).
    assert [p.name for p in private_tmp.iterdir() if not (p.name.startswith("peon-cache-") and p.is_dir())] == []
    session.close()
    assert list(private_tmp.iterdir()) == []


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_command_finds_no_socket_to_reach_or_replace_the_forkserver(open_session, private_tmp, workspace, sandbox):
    config = {"sandbox": {"mode": sandbox, "kind": "landlock", "network": False}} if sandbox != "off" else {}
    session = open_session(config, env={"TMPDIR": str(private_tmp)})
    forkserver = forkserver_of(session)
    result = session.call("bash", {"command": search_command(private_tmp, workspace)})
    assert result.ok and result.value["exit_code"] == 0, result
    if sandbox != "off":
        assert result.value["sandbox"], result.value
    assert json.loads(result.value["output"].splitlines()[-1]) == {"found": [], "connected": [], "replaced": []}
    # The forkserver forked nothing but the session's workers, and still serves the session alone.
    for _ in range(3):
        again = session.call("bash", {"command": "echo real"})
        assert again.ok and again.value["output"] == "real\n", again
    assert forkserver_of(session) == forkserver


# -- the two ends of the channel, each with a real process on the other side -----------------------------


def start_forkserver(channel: socket.socket, alive_r: int) -> subprocess.Popen:
    """A Peon forkserver whose supervisor is this process (no session: no tools, no warm-up)."""
    spec = {"supervisor": os.getpid(), "title": "peon-forkserver channel-test", "modules": []}
    code = f"from peon.workers.forkserver import main; main({channel.fileno()}, {alive_r})"
    return subprocess.Popen([sys.executable, "-P", "-c", code], pass_fds=[channel.fileno(), alive_r],
                            env={**os.environ, wf.ENV: json.dumps(spec)}, stdin=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def send_request(sock: socket.socket, fds: list[int], data: bytes = wf.REQUEST) -> None:
    sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])


@pytest.fixture
def forkserver():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    alive_r, alive_w = os.pipe()
    process = start_forkserver(theirs, alive_r)
    theirs.close()
    os.close(alive_r)
    yield process, ours, alive_w
    ours.close()
    os.close(alive_w)
    try:
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_forkserver_forks_for_no_process_but_its_supervisor(forkserver):
    process, ours, alive_w = forkserver
    data, status = os.pipe(), os.pipe()  # what multiprocessing's Popen makes for each process
    tracker = os.open(os.devnull, os.O_WRONLY)
    fds = [data[0], status[1], alive_w, tracker]  # the child's end of each, the alive pipe, the tracker's fd
    try:
        # Another process holding the channel (as a command would, had it reached it) asks for a fork.
        sender = subprocess.run(
            [sys.executable, "-I", "-c",
             "import array, os, socket, sys; s = socket.socket(fileno=int(sys.argv[1])); "
             "s.sendmsg([sys.argv[2].encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, "
             "array.array('i', [int(fd) for fd in sys.argv[3:]]))])",
             str(ours.fileno()), wf.REQUEST.decode(), *map(str, fds)],
            pass_fds=[ours.fileno(), *fds], timeout=60)
        assert sender.returncode == 0
        with pytest.raises(OSError, match="refused"):
            ChannelForkServer._answer(ours, process.pid)
        # The supervisor itself, with anything but a well-formed request.
        send_request(ours, fds, b"please fork")
        with pytest.raises(OSError, match="refused"):
            ChannelForkServer._answer(ours, process.pid)
        send_request(ours, fds[:2])
        with pytest.raises(OSError, match="refused"):
            ChannelForkServer._answer(ours, process.pid)
        assert proctree.children(process.pid) == [], "the forkserver forked for a refused request"
        # A well-formed request of its supervisor is served: a child is forked (it exits at once, as
        # its data pipe is closed without a process in it) and the answer carries its pid.
        send_request(ours, fds)
        pid = ChannelForkServer._answer(ours, process.pid)
        assert pid > 0 and wf.PID.unpack(os.read(status[0], wf.PID.size)) == (pid,)
    finally:
        for fd in (*data, *status, tracker):
            os.close(fd)
    ours.shutdown(socket.SHUT_RDWR)  # the supervisor closes its end: the forkserver exits
    assert process.wait(30) == 0
    assert living([pid]) == []
    stderr = process.stderr.read().decode() if process.stderr else ""
    assert stderr.count("refused a request") == 3, stderr
    assert f"not from the supervisor {os.getpid()}" in stderr


def test_the_supervisor_takes_answers_only_from_its_forkserver():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    with ours, theirs:
        answer = [sys.executable, "-I", "-c",
                  "import os, socket, struct, sys; socket.socket(fileno=int(sys.argv[1])).send(struct.pack('q', 4242))",
                  str(theirs.fileno())]
        impostor = subprocess.Popen(answer, pass_fds=[theirs.fileno()])
        impostor.wait(60)
        with pytest.raises(OSError, match=f"came from {impostor.pid}, not from the forkserver"):
            ChannelForkServer._answer(ours, impostor.pid + 1)
        genuine = subprocess.Popen(answer, pass_fds=[theirs.fileno()])
        genuine.wait(60)
        assert ChannelForkServer._answer(ours, genuine.pid) == 4242
        theirs.send(wf.PID.pack(4242))  # this process wrote it: not the forkserver either
        with pytest.raises(OSError, match="not from the forkserver"):
            ChannelForkServer._answer(ours, genuine.pid)
