"""What the sandbox tests share: a module-wide session with its own leftover guard, a probe script the
commands run (each attempt reported as "ok" or an errno name), and the peers the tests start on the
machine (a loopback listener, an abstract unix socket, a process outside the call)."""

from __future__ import annotations

import functools
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import peon
from helpers import ALLOW_ALL, Leftovers
from peon.client.config import merge
from peon.workers.sandbox import BwrapSupport, probe_bwrap

PROBE = r"""
import ctypes, errno, json, os, socket, sys

def attempt(action):
    try:
        action()
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))

def write(path):
    with open(path, "w") as f:
        f.write("x")

def connect(family, address):
    address = tuple(address) if isinstance(address, list) else address
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.settimeout(5)
        s.connect(address)
    finally:
        s.close()

def bind_tcp():
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
        s.listen()
    finally:
        s.close()

def udp_send(host, port):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"x", (host, port))

def open_socket(family, kind):
    socket.socket(family, kind).close()

def ptrace_seize(pid):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(0x4206, pid, None, None) != 0:  # PTRACE_SEIZE
        raise OSError(ctypes.get_errno(), "ptrace")
    libc.ptrace(17, pid, None, None)  # PTRACE_DETACH, in case it worked

def kill(pid, sig=0):
    os.kill(pid, sig)

actions = json.loads(sys.argv[1])
def function(name):
    return globals().get(name) or getattr(os, name)

print(json.dumps({name: attempt(lambda a=a: function(a[0])(*a[1:])) for name, a in actions.items()}))
"""


def probe_command(actions: dict[str, list]) -> str:
    """A bash command that runs each action (a PROBE function name and its arguments) and prints the
    outcomes as one JSON line."""
    return f"{shlex.quote(sys.executable)} -I -c {shlex.quote(PROBE)} {shlex.quote(json.dumps(actions))}"


def splice(command: str, placeholder: str, shell_expression: str) -> str:
    """Put a shell expression (e.g. ``$PPID``) where ``probe_command`` got the string ``placeholder``."""
    return command.replace(f'"{placeholder}"', f"'\"{shell_expression}\"'")


def outcomes(result) -> dict[str, str]:
    assert result.ok, result.error
    lines = result.value["output"].strip().splitlines()
    assert lines, result.value
    return json.loads(lines[-1])


def run_unsandboxed(actions: dict[str, list], env: dict) -> dict[str, str]:
    """The same probe outside any sandbox: the control that shows each test can fail."""
    proc = subprocess.run(["/bin/bash", "-c", probe_command(actions)], capture_output=True, text=True, env=env,
                          timeout=60)
    return json.loads(proc.stdout.strip().splitlines()[-1])


class Peers:
    """Things outside the call, started by the test on this machine (all on loopback or abstract)."""

    def __init__(self, guard: Leftovers):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.abstract_name = f"\0peon-sandbox-test-{uuid.uuid4().hex}"
        self.abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.abstract.bind(self.abstract_name)
        self.abstract.listen()
        self.outsider = subprocess.Popen(["sleep", "600"], env=guard.env(), start_new_session=True)

    def accepted(self) -> int:
        """How many connections reached the listener (drains them)."""
        count = 0
        while True:
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                return count
            conn.close()
            count += 1

    def close(self) -> None:
        self.listener.close()
        self.abstract.close()
        if self.outsider.poll() is None:
            os.kill(self.outsider.pid, signal.SIGKILL)
        self.outsider.wait()


def peer_actions(peers: Peers) -> dict[str, list]:
    return {
        "tcp_connect": ["connect", socket.AF_INET, ["127.0.0.1", peers.port]],
        "tcp_bind": ["bind_tcp"],
        "abstract_connect": ["connect", socket.AF_UNIX, peers.abstract_name],
        "signal_outsider": ["kill", peers.outsider.pid],
    }


def open_module_session(workspace: Path, state: Path, guard: Leftovers, sandbox: dict, env: dict | None = None,
                        **config) -> peon.Session:
    return peon.Session(workspace, merge(merge(ALLOW_ALL, {"sandbox": sandbox}), config), state_dir=state,
                        env=guard.env(env))


@functools.cache
def bwrap_support() -> BwrapSupport:
    """Whether bwrap can build Peon's sandbox here without a network (one trial run per test process)."""
    return probe_bwrap(os.environ, network=False)
