"""What a worker keeps from one sandboxed call to the next — its mount view, Landlock ruleset and compiled
seccomp program — and that nothing a call or the host does in between weakens the next call: a protected
path made, replaced or renamed on the host between calls is read-only again, a host socket bound in
between is covered, a writable directory replaced on the host gets a view built afresh, and a call can
leave neither a mount nor a listener behind; a standby builds its view before its first call. Real
sessions, real processes, real namespaces (root). What is kept, checked without a process, is
tests/unit/test_sandbox_kept_state.py."""

from __future__ import annotations

import os
import socket

import pytest

from helpers import Leftovers
from helpers.sandbox import open_module_session, outcomes, probe_command
from peon.workers.sandbox import landlock as ll
from peon.workers.sandbox import namespaces

ABI = ll.abi_version().abi
NAMESPACES = namespaces.probe()
needs_view = pytest.mark.skipif(ABI < ll.SCOPE_ABI or bool(NAMESPACES),
                                reason=f"the mount view needs Landlock ABI 6+ (this kernel: {ABI}) and namespaces "
                                       f"({NAMESPACES or 'available'}); see `peon doctor`")

# The mount namespace and the worker of the command, then the probe's outcomes: one call's evidence.
WHERE = "readlink /proc/self/ns/mnt; echo $PPID; "


class Box:
    def __init__(self, root, guard: Leftovers):
        self.workspace, self.tmp, self.outside, self.extra = (root / "ws", root / "tmp", root / "outside",
                                                              root / "extra")
        for directory in (self.workspace, self.tmp, self.outside, self.extra):
            directory.mkdir()
        (self.workspace / ".git" / "hooks").mkdir(parents=True)
        (self.workspace / ".git" / "config").write_text("[core]\n")
        self.guard = guard
        self.session = open_module_session(self.workspace, root / "state", guard,
                                           {"mode": "required", "network": False,
                                            "writable": [str(self.extra), "/dev/shm"]},
                                           {"TMPDIR": str(self.tmp)})
        layers = self.session.info["sandbox"]["layers"]
        assert {"mount_view", "network_namespace", "seccomp"} <= set(layers), layers

    def call(self, actions: dict[str, list]) -> tuple[tuple[str, str], dict[str, str]]:
        """Run the probe's ``actions`` in one call: (mount namespace, worker pid), outcomes."""
        r = self.session.call("bash", {"command": WHERE + probe_command(actions)})
        lines = r.value["output"].split("\n") if r.ok else []
        assert r.ok and len(lines) >= 3, r
        return (lines[0], lines[1]), outcomes(r)

    def close(self) -> None:
        self.session.close()


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    if ABI < ll.SCOPE_ABI or NAMESPACES:
        pytest.skip("needs Landlock ABI 6+ and namespaces (root)")
    guard = Leftovers(tmp_path_factory.mktemp("home"))
    box = Box(tmp_path_factory.mktemp("reuse"), guard)
    yield box
    box.close()
    assert guard.kill_all() == [], "processes outlived the sandbox tests"


@needs_view
def test_a_worker_enters_the_same_mount_view_call_after_call(box):
    first, _ = box.call({})
    second, _ = box.call({})
    assert first == second  # same worker, same view
    assert first[0] != os.readlink("/proc/self/ns/mnt")


@needs_view
def test_a_protected_path_made_on_the_host_between_calls_is_read_only(box):
    before, _ = box.call({})
    (box.workspace / ".vscode").mkdir()
    where, got = box.call({"tasks": ["write", str(box.workspace / ".vscode" / "tasks.json")],
                           "beside": ["write", str(box.workspace / "beside.txt")]})
    assert where == before, "the call ran in another view: nothing was reused"
    assert got == {"tasks": "EROFS", "beside": "ok"}
    assert not (box.workspace / ".vscode" / "tasks.json").exists()


@needs_view
def test_protected_paths_replaced_or_renamed_on_the_host_stay_read_only(box):
    git = box.workspace / ".git"
    targets = {"config": ["write", str(git / "config")], "hook": ["write", str(git / "hooks" / "pre-commit")]}
    before, got = box.call(targets)
    assert got == {"config": "EROFS", "hook": "EROFS"}
    # As git (or an editor) does on the host: a new file renamed over the old one, a directory replaced by
    # a new one. The view's read-only binds stay on the old ones (or are detached with them).
    (git / "config.lock").write_text("[core]\n\tbare = false\n")
    os.replace(git / "config.lock", git / "config")
    os.rename(git / "hooks", git / "hooks.old")
    (git / "hooks").mkdir()
    where, got = box.call(targets)
    assert where == before, "the call ran in another view: nothing was reused"
    assert got == {"config": "EROFS", "hook": "EROFS"}
    assert (git / "config").read_text() == "[core]\n\tbare = false\n"
    assert not (git / "hooks" / "pre-commit").exists()


@needs_view
def test_a_host_socket_bound_between_calls_is_covered(box):
    path = str(box.outside / "daemon.sock")
    before, _ = box.call({})
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as daemon:
        daemon.bind(path)
        daemon.listen()
        daemon.settimeout(0.2)
        where, got = box.call({"daemon": ["connect", socket.AF_UNIX, path]})
        assert where == before, "the call ran in another view: nothing was reused"
        assert got == {"daemon": "ECONNREFUSED"}
        with pytest.raises(TimeoutError):
            daemon.accept()
    os.unlink(path)


@needs_view
def test_a_writable_directory_replaced_on_the_host_gets_a_view_built_afresh(box):
    before, got = box.call({"write": ["write", str(box.extra / "a.txt")]})
    assert got == {"write": "ok"}
    old = box.extra.with_name("extra-old")
    os.rename(box.extra, old)
    box.extra.mkdir()
    where, got = box.call({"write": ["write", str(box.extra / "b.txt")]})
    assert got == {"write": "ok"}
    assert (box.extra / "b.txt").read_text() == "x" and (old / "a.txt").read_text() == "x"
    assert where[1] == before[1] and where[0] != before[0]  # the same worker, a new view


@needs_view
def test_a_call_leaves_neither_a_mount_nor_a_listener_for_the_next(box):
    mounts = "wc -l < /proc/self/mountinfo"
    first = box.session.call("bash", {"command": WHERE + mounts})
    # A mount (no capability: refused) and a user namespace to mount in a copy of the view (refused too:
    # its uid map cannot be written on the view's read-only /proc; a copy would be gone with it anyway).
    tried = box.session.call("bash", {"command": (
        "mount -t tmpfs none /tmp; unshare -rm sh -c 'mount -t tmpfs none /tmp && echo mounted-in-a-copy'")})
    after = box.session.call("bash", {"command": WHERE + mounts})
    assert first.ok and tried.ok and after.ok, (first, tried, after)
    assert "mounted-in-a-copy" not in tried.value["output"], tried.value["output"]
    assert first.value["output"] == after.value["output"]  # the same view, as many mounts
    # A listener left running in the session's network namespace is killed with its call (which retires
    # its worker), so the next call finds nothing there.
    started = box.session.call("bash", {"command": (
        "python3 -c 'import socket, time; s = socket.create_server((\"127.0.0.1\", 47811)); time.sleep(60)' & "
        "sleep 0.5; echo started")})
    assert started.ok and "started" in started.value["output"], started
    _, got = box.call({"listener": ["connect", socket.AF_INET, ["127.0.0.1", 47811]]})
    assert got == {"listener": "ECONNREFUSED"}


@needs_view
def test_what_landlock_leaves_to_the_view_is_refused_by_the_view(box):
    """With the view, Landlock handles neither truncate nor reads (readable = ["/"]): the view refuses
    truncating and writing outside the writable paths, and Landlock still refuses writing to a device."""
    precious = box.outside / "precious"
    precious.write_text("keep me")
    actions = {"truncate_outside": ["truncate", str(precious), 0], "write_outside": ["write", str(precious)],
               "truncate_protected": ["truncate", str(box.workspace / ".git" / "config"), 0],
               "read_outside": ["open", str(precious), os.O_RDONLY], "truncate_inside": ["truncate", "probe.txt", 0]}
    if os.path.exists("/dev/kmsg"):
        actions["write_device"] = ["open", "/dev/kmsg", os.O_WRONLY]
    (box.workspace / "probe.txt").write_text("x")
    _, got = box.call(actions)
    assert got.pop("read_outside") == got.pop("truncate_inside") == "ok"
    assert got.pop("write_device", "EACCES") == "EACCES"
    assert set(got.values()) == {"EROFS"}, got
    assert precious.read_text() == "keep me" and (box.workspace / ".git" / "config").read_text()


@needs_view
def test_a_writable_directory_under_dev_is_writable_in_the_view(box):
    """/dev/shm (a writable directory by default) is bound writable like any other; only device files are
    left to the read-only mount, where they stay writable. multiprocessing's semaphores live there."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    name = f"/dev/shm/peon-sandbox-test-{os.getpid()}"
    r = box.session.call("bash", {"command": (
        f"touch {name} && rm {name} && echo shm-ok; "
        "python3 -c 'import multiprocessing; multiprocessing.Lock(); print(\"lock-ok\")'; echo x > /dev/null")})
    assert r.ok and r.value["exit_code"] == 0, r
    assert r.value["output"].split() == ["shm-ok", "lock-ok"], r.value["output"]


def _standby_below(supervisor: int, timeout: float = 60.0) -> int:
    """The pid of a worker of the session waiting for its first call, once it has prepared."""
    import time

    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process in psutil.Process(supervisor).children(recursive=True):
            try:
                if "peon-worker standby" in " ".join(process.cmdline()):
                    return process.pid
            except psutil.Error:
                continue
        time.sleep(0.02)
    raise AssertionError("no standby worker came up")


@needs_view
def test_a_standby_builds_its_mount_view_before_its_first_call(tmp_path):
    """A new worker's first sandboxed call enters the mount view its standby built while it waited (the
    view's namespace is among the standby's descriptors before any call reaches it)."""
    guard = Leftovers(tmp_path / "home")
    (tmp_path / "ws").mkdir()
    session = open_module_session(tmp_path / "ws", tmp_path / "state", guard, {"mode": "required", "network": False})
    try:
        standby = _standby_below(session.supervisor_pid)
        held = {os.readlink(f"/proc/{standby}/fd/{fd}") for fd in os.listdir(f"/proc/{standby}/fd")}
        result = session.call("bash", {"command": WHERE})
        assert result.ok, result
        namespace, worker = result.value["output"].split("\n")[:2]
        assert int(worker) == standby  # the call ran on that standby
        assert namespace != os.readlink("/proc/self/ns/mnt") and namespace in held, (namespace, held)
    finally:
        session.close()
    assert guard.kill_all() == []
