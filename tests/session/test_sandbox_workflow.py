"""A day of real work under the default sandbox, and every escape a command would try under
``network = false``, with real tools and real peers on the host's loopback.

The day: a venv and ``pip install`` from a local wheel directory, ``npm install`` of a local tarball,
``git init/commit/checkout/fetch/log`` with ``.git/config`` and ``.git/hooks`` read-only, ``pytest`` of a test
that starts and queries a local HTTP server, a build writing to the tool caches, a login profile that
cannot write. The escapes (each refused, and the refusal named by its errno): TCP, UDP and DNS to
listeners the test runs on the host's loopback, a named unix socket of a host "daemon", raw packet
sockets, ``chmod u+s`` outside the writable paths and inside them, writing ``.git/hooks/pre-commit``,
and Peon itself: its audit log, state and runtime directories, the supervisor's signals and memory, the
session's cgroup. The allowlist: a loopback HTTP "registry" allowed by name answers, a second one is
refused with its name. Traffic goes only to loopback addresses (the host's, or the sandbox's own)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from helpers.loopback import ATTACKS, RULE, SEND_HEADS, CountingServer, attack_head, text_server
from peon.workers.sandbox import landlock as ll
from peon.workers.sandbox import namespaces

ABI = ll.abi_version().abi
NAMESPACES = namespaces.probe()
pytestmark = pytest.mark.skipif(ABI < ll.SCOPE_ABI or bool(NAMESPACES),
                                 reason=f"the full default sandbox needs Landlock ABI 6+ (this kernel: {ABI}) "
                                        f"and namespaces ({NAMESPACES or 'available'}); see `peon doctor`")

PROBE = r"""
import errno, json, os, socket, sys

def attempt(action):
    try:
        action()
        return "ok"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc))

def tcp(family, host, port):
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(3)
        s.connect((host, port))
        s.sendall(b"escaped")

def udp(host, port, payload):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(1.5)
        s.sendto(bytes.fromhex(payload), (host, port))
        s.recvfrom(512)

def unix(path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(3)
        s.connect(path)

def packet():
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close()

def raw():
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close()

def write(path):
    with open(path, "w") as f:
        f.write("#!/bin/sh\necho planted\n")

def read(path):
    with open(path, "rb") as f:
        f.read(1)

actions = json.loads(sys.argv[1])
functions = {"chmod": os.chmod, "kill": os.kill, "utime": lambda path, times: os.utime(path, tuple(times))}
print(json.dumps({name: attempt(lambda a=a: (globals().get(a[0]) or functions[a[0]])(*a[1:]))
                  for name, a in actions.items()}))
"""

# A DNS query for example.test, type A (what a resolver sends): 12-byte header, the name, type, class.
DNS_QUERY = (b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"\x07example\x04test\x00"
             + b"\x00\x01\x00\x01").hex()


def probe(actions: dict[str, list]) -> str:
    return f"{shlex.quote(sys.executable)} -I -c {shlex.quote(PROBE)} {shlex.quote(json.dumps(actions))}"


def outcomes(result) -> dict[str, str]:
    assert result.ok, result.error
    return json.loads(result.value["output"].strip().splitlines()[-1])


def unsandboxed(actions: dict[str, list]) -> dict[str, str]:
    run = subprocess.run(["/bin/bash", "-c", probe(actions)], capture_output=True, text=True, timeout=60)
    return json.loads(run.stdout.strip().splitlines()[-1])


def run_call(session, command: str) -> dict:
    r = session.call("bash", {"command": command})
    assert r.ok, r.error
    return r.value


def run(session, command: str, **args) -> str:
    r = session.call("bash", {"command": command, "timeout_seconds": 300, **args})
    assert r.ok, r.error
    assert r.value["exit_code"] == 0, r.value["output"]
    return r.value["output"]


@pytest.fixture
def day(open_session, workspace, tmp_path):
    """A session with the default sandbox (only what a test needs set: approval, a temp dir of its own so
    the rest of /tmp is outside the writable paths)."""
    def start(**sandbox):
        (tmp_path / "tmp").mkdir(exist_ok=True)
        return open_session({"sandbox": sandbox} if sandbox else None, env={"TMPDIR": str(tmp_path / "tmp")})
    return start


# -- the artefacts of a day: a wheel, an npm tarball, a remote repository ------------------------------------


def make_wheel(directory: Path) -> None:
    files = {"tinypkg/__init__.py": b"VALUE = 'tinypkg works'\n",
             "tinypkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
             "tinypkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                            b"Tag: py3-none-any\n"}
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for name, data in files.items()) + "tinypkg-1.0.dist-info/RECORD,,\n"
    directory.mkdir()
    with zipfile.ZipFile(directory / "tinypkg-1.0-py3-none-any.whl", "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("tinypkg-1.0.dist-info/RECORD", record)


def make_npm_tarball(path: Path) -> None:
    files = {"package/package.json": json.dumps({"name": "tiny-npm", "version": "1.0.0", "main": "index.js"}).encode(),
             "package/index.js": b"exports.hello = 'tiny-npm works';\n"}
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))


SERVER_TEST = '''
import http.server, threading, urllib.request

def test_a_local_server_answers():
    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello from the sandbox")
        def log_message(self, *args):
            pass
    server = http.server.HTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/", timeout=10) as answer:
            assert answer.read() == b"hello from the sandbox"
    finally:
        server.shutdown()
'''


def test_a_day_of_work_under_the_default_sandbox(day, workspace, tmp_path, leftovers):
    session = day()
    status = session.info["sandbox"]
    assert status["active"] and status["mode"] == "auto" and status["kind"] == "landlock"
    assert status["layers"] == ["landlock", "mount_view", "seccomp"] and status["not_enforced"] == []
    cache = Path(status["cache_dir"])
    # A login profile that writes beneath the home directory, read-only in the sandbox: silenced.
    (leftovers.home / ".bash_profile").write_text("mkdir -p ~/.profile-cache && touch ~/.profile-cache/stamp\n")

    make_wheel(tmp_path / "wheels")
    run(session, f"{shlex.quote(sys.executable)} -m venv .venv")
    out = run(session, f".venv/bin/python -m pip install --disable-pip-version-check --no-index "
                       f"--find-links {tmp_path / 'wheels'} tinypkg && .venv/bin/python -c "
                       "'import tinypkg; print(tinypkg.VALUE)'")
    assert out.endswith("tinypkg works\n") and not out.startswith("mkdir"), out

    if shutil.which("npm"):
        make_npm_tarball(tmp_path / "tiny-npm-1.0.0.tgz")
        out = run(session, f"mkdir web && cd web && npm init -y >/dev/null && npm install --no-audit --no-fund "
                           f"--offline {tmp_path / 'tiny-npm-1.0.0.tgz'} && node -e "
                           "\"console.log(require('tiny-npm').hello)\"")
        assert out.strip().endswith("tiny-npm works") and "Unknown env config" not in out, out
        assert (cache / "npm").is_dir()  # npm's cache went where the sandbox can write

    origin = tmp_path / "origin"  # a repository outside the writable paths, made outside the sandbox
    git = "git -c user.name=Agent -c user.email=agent@example.test"
    subprocess.run(f"git init -q -b main {origin} && cd {origin} && echo up > up.txt && git add up.txt && "
                   f"{git} commit -qm upstream", shell=True, check=True)
    run(session, f"git init -q -b main && git remote add origin {origin} && echo hi > a.txt && git add a.txt && "
                 f"{git} commit -qm first")
    # From the next call on, .git/config and .git/hooks are read-only: git's daily work still goes on.
    out = run(session, f"echo more >> a.txt && {git} commit -qam second && git checkout -q -b feature && "
                       f"git fetch -q origin && git log --oneline | wc -l && git log --oneline origin/main | wc -l && "
                       "git status --short -uno | wc -l")
    assert out.split() == ["2", "1", "0"], out
    r = session.call("bash", {"command": "git config core.fsmonitor 'touch /tmp/owned'"})
    # git writes config.lock, then renames it over .git/config: a read-only bind, so EBUSY (or EROFS).
    assert r.value["exit_code"] != 0 and "could not write config file" in r.value["output"], r.value
    assert "fsmonitor" not in (workspace / ".git" / "config").read_text()

    (workspace / "test_server.py").write_text(SERVER_TEST)
    out = run(session, f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider test_server.py")
    assert "1 passed" in out, out

    out = run(session, "for i in $(seq 200); do head -c 10000 /dev/urandom > /dev/null; "
                       "mkdir -p \"$XDG_CACHE_HOME/build\" && echo $i > \"$XDG_CACHE_HOME/build/obj$i.o\"; done; "
                       "ls \"$XDG_CACHE_HOME/build\" | wc -l; echo $PIP_CACHE_DIR $GOCACHE")
    lines = out.split()
    assert lines[0] == "200" and lines[1:] == [str(cache / "pip"), str(cache / "go-build")], out
    assert len(list((cache / "xdg" / "build").iterdir())) == 200
    assert not (leftovers.home / ".profile-cache").exists()
    session.close()
    # The default cache directory is the workspace's, outside it: it outlives the session, and the next
    # session of the workspace finds what this one's package managers put there.
    assert cache.is_dir() and not cache.is_relative_to(workspace.resolve())
    again = day()
    assert again.info["sandbox"]["cache_dir"] == str(cache)
    assert run(again, "ls \"$XDG_CACHE_HOME/build\" | wc -l").split() == ["200"]
    again.close()


def test_a_session_cache_directory_goes_with_its_session(day):
    session = day(caches="session")
    cache = Path(session.info["sandbox"]["cache_dir"])
    assert cache.name == f"peon-cache-{session.session_id}"
    run(session, "mkdir -p \"$XDG_CACHE_HOME/build\" && echo x > \"$XDG_CACHE_HOME/build/obj.o\"")
    assert (cache / "xdg" / "build" / "obj.o").exists()
    session.close()
    assert not cache.exists()  # a session's cache directory goes with it


class HostPeers:
    """Listeners the test runs on the host's loopback, outside the sandbox, that count what reaches them."""

    def __init__(self, directory: Path):
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # a stub resolver that would answer
        self.dns.bind(("127.0.0.1", 0))
        self.unix_path = str(directory / "daemon.sock")
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.unix_path)
        self.unix.listen()
        try:
            self.tcp6: socket.socket | None = socket.create_server(("::1", 0), family=socket.AF_INET6)
        except OSError:
            self.tcp6 = None
        for s in (self.tcp, self.udp, self.dns, self.unix, *([self.tcp6] if self.tcp6 else [])):
            s.setblocking(False)

    def reached(self) -> dict[str, int]:
        """What reached each peer since the last look (drained)."""
        def count(sock: socket.socket | None, stream: bool) -> int:
            n = 0
            while sock is not None:
                try:
                    conn = sock.accept()[0] if stream else None
                    if conn:
                        conn.close()
                    else:
                        sock.recvfrom(512)
                except BlockingIOError:
                    break
                n += 1
            return n

        return {"tcp": count(self.tcp, True), "udp": count(self.udp, False), "dns": count(self.dns, False),
                "unix": count(self.unix, True), "tcp6": count(self.tcp6, True)}

    def actions(self) -> dict[str, list]:
        out = {"tcp": ["tcp", socket.AF_INET, "127.0.0.1", self.tcp.getsockname()[1]],
               "udp": ["udp", "127.0.0.1", self.udp.getsockname()[1], b"escaped".hex()],
               "dns": ["udp", "127.0.0.1", self.dns.getsockname()[1], DNS_QUERY],
               "unix": ["unix", self.unix_path]}
        if self.tcp6 is not None:
            out["tcp6"] = ["tcp", socket.AF_INET6, "::1", self.tcp6.getsockname()[1]]
        return out

    def close(self) -> None:
        for s in (self.tcp, self.udp, self.dns, self.unix, self.tcp6):
            if s is not None:
                s.close()


def test_with_network_false_every_escape_is_refused_and_named(day, workspace, tmp_path):
    outside = tmp_path / "outside"  # beneath no writable path: TMPDIR is tmp_path/tmp
    outside.mkdir()
    (outside / "tool").write_text("#!/bin/sh\n")
    (workspace / "script").write_text("#!/bin/sh\n")
    peers = HostPeers(outside)
    try:
        session = day(network=False)
        status = session.info["sandbox"]
        assert status["layers"] == ["landlock", "mount_view", "network_namespace", "seccomp"], status
        run(session, "git init -q")  # .git/hooks exists from the next call on
        supervisor = session.supervisor_pid
        state = Path(session.state_dir)
        cgroup = session.info.get("containment", {}).get("cgroup")
        actions = {**peers.actions(),
                   "packet_socket": ["packet"],
                   "raw_socket": ["raw"],
                   "chmod_setuid_outside": ["chmod", str(outside / "tool"), 0o4755],
                   "chmod_setuid_inside": ["chmod", str(workspace / "script"), 0o4755],
                   "chmod_outside": ["chmod", str(outside / "tool"), 0o777],
                   "utime_outside": ["utime", str(outside / "tool"), [0, 0]],
                   "git_hook": ["write", str(workspace / ".git" / "hooks" / "pre-commit")],
                   "audit_log": ["read", str(state / "audit.jsonl")],
                   "supervisor_environ": ["read", f"/proc/{supervisor}/environ"],
                   "stop_supervisor": ["kill", supervisor, 19]}
        if cgroup:
            actions["leave_cgroup"] = ["write", str(Path(cgroup).parent / "cgroup.procs")]
        runtime = getattr(session, "_runtime_dir", None)  # the client's run directory (the forkserver's socket)
        peon_sockets = [path for path in Path(runtime).iterdir() if path.is_socket()] if runtime else []
        for index, path in enumerate(peon_sockets):
            actions[f"peon_socket_{index}"] = ["unix", str(path)]
        got = outcomes(session.call("bash", {"command": probe(actions)}))
        expected = {"tcp": "ECONNREFUSED", "udp": "timeout", "dns": "timeout", "unix": "ECONNREFUSED",
                    "packet_socket": "EAFNOSUPPORT", "raw_socket": "EPERM",
                    "chmod_setuid_outside": "EPERM", "chmod_setuid_inside": "EPERM",
                    "chmod_outside": "EROFS", "utime_outside": "EROFS",
                    "git_hook": "EROFS", "audit_log": "ENOENT", "supervisor_environ": "EACCES",
                    "stop_supervisor": "EPERM"}
        if "tcp6" in actions:
            expected["tcp6"] = "ECONNREFUSED"
        if cgroup:
            expected["leave_cgroup"] = "EROFS"
        expected.update({f"peon_socket_{index}": "ENOENT" for index in range(len(peon_sockets))})
        assert got == expected
        assert set(peers.reached().values()) == {0}
        assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
        assert os.stat(outside / "tool").st_mode & 0o4000 == 0 and (state / "audit.jsonl").exists()

        # The controls: outside the sandbox each peer answers and each file can be changed.
        control = unsandboxed({k: actions[k] for k in ("tcp", "unix", "chmod_setuid_outside")})
        assert control == {"tcp": "ok", "unix": "ok", "chmod_setuid_outside": "ok"}
        reached = peers.reached()
        assert reached["tcp"] == reached["unix"] == 1

        # The command's own loopback is private and works, across calls: a server one call starts in the
        # background answers the next.
        r = session.call("bash", {"command": f"{shlex.quote(sys.executable)} -m http.server 8765 --bind 127.0.0.1",
                                  "background": True})
        assert r.ok, r.error
        out = run(session, f"for i in $(seq 100); do {shlex.quote(sys.executable)} -c \"import urllib.request; "
                           "print(urllib.request.urlopen('http://127.0.0.1:8765/').status)\" 2>/dev/null && break; "
                           "sleep 0.1; done")
        assert out.strip() == "200", out
        assert set(peers.reached().values()) == {0}
    finally:
        peers.close()




def test_an_allowlisted_registry_answers_and_another_is_refused_by_name(day):
    allowed, other = text_server("the allowed registry"), text_server("the other registry")
    try:
        a, b = allowed.server_address[1], other.server_address[1]
        session = day(network=[f"localhost:{a}"])
        proxy = session.info["sandbox"]["egress"]["proxy"]
        fetch = (f"{shlex.quote(sys.executable)} -c \"import sys, urllib.request, urllib.error\n"
                 "try: print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())\n"
                 "except urllib.error.HTTPError as e: print(e.code, e.read().decode())\"")
        # NO_PROXY keeps localhost direct (the sandbox's own loopback); these URLs mean the host's.
        r = session.call("bash", {"command": f"echo $HTTP_PROXY; env -u NO_PROXY -u no_proxy {fetch} "
                                             f"http://localhost:{a}/simple/; env -u NO_PROXY -u no_proxy {fetch} "
                                             f"http://localhost:{b}/simple/; {fetch} http://localhost:{b}/simple/ "
                                             "2>&1 | tail -1"})
        assert r.ok, r.error
        out = r.value["output"]
        assert r.value["sandbox"]["refused"] == [f"localhost:{b}"]  # the result names what was refused
        assert "refused" not in run_call(session, "true")["sandbox"]
        lines = out.splitlines()
        assert lines[0] == proxy
        assert lines[1] == "the allowed registry"
        assert lines[2].startswith("403 ") and f"localhost:{b} is not in sandbox.network" in lines[2], out
        assert "Connection refused" in lines[-1], out  # direct, the host's registry is not there at all
    finally:
        allowed.shutdown()
        other.shutdown()


def test_the_allowlist_proxy_refuses_hosts_outside_its_grammar_before_connecting(day):
    """``network = ["*.pythonhosted.org"]``: the NUL-byte ``CONNECT`` a sandboxed command sends to reach the
    host's loopback, and its relatives, are answered 400 naming the rule; a loopback address or name no
    entry names is answered 403; the loopback server they aim at never sees a connection."""
    with CountingServer() as target:
        session = day(network=["*.pythonhosted.org", "localhost:1"])
        heads = [attack_head(template, target.port) for template in ATTACKS]
        heads += [f"CONNECT {host}:{target.port} HTTP/1.1\r\n\r\n".encode() for host in ("127.0.0.1", "localhost")]
        argv = " ".join(shlex.quote(head.hex()) for head in heads)
        r = session.call("bash", {"command": f"{shlex.quote(sys.executable)} -c {shlex.quote(SEND_HEADS)} {argv}"})
        assert r.ok, r.error
        answers = r.value["output"].splitlines()
        assert len(answers) == len(heads), r.value["output"]
        for template, answer in zip(ATTACKS, answers[:len(ATTACKS)], strict=True):
            assert answer.startswith("HTTP/1.1 400 "), (template, answer)
            assert RULE in answer or "userinfo" in answer or "port" in answer, (template, answer)
        assert answers[-2].startswith("HTTP/1.1 403 ") and f"127.0.0.1:{target.port} is not in" in answers[-2]
        assert answers[-1].startswith("HTTP/1.1 403 ") and f"localhost:{target.port} is not in" in answers[-1]
        assert r.value["sandbox"]["refused"] == [f"127.0.0.1:{target.port}", f"localhost:{target.port}"]
        assert target.accepted == 0
