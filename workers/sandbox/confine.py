"""Confining one command: the worker applies the approved sandbox plan to the command it starts.

Promises:

* :func:`confinement_for` gives the process runner what the approved ``"sandbox"`` details say, and
  nothing weaker: when they are malformed, or ``required`` was configured but the call was approved
  without a sandbox, the call fails ``sandbox_unavailable`` and nothing is started;
* a :class:`LandlockConfinement` applies the plan to one dedicated, short-lived thread of the worker
  and starts the command from it: the command and everything it starts are in the Landlock domain
  (domains are inherited and can only get stricter), while the worker's own thread stays outside it
  and keeps every power it needs to watch, signal and kill the call's tree. Before starting, that
  thread drops every capability and sets ``no_new_privs``, so ``execve`` gives none back (not even to
  a command run by root), and the worker makes itself non-dumpable, so nothing in the domain can
  ptrace the worker through the spawning thread during its last microseconds;
* what does not depend on the call is built while the worker waits as a standby (:func:`prepare`, from
  the session's plan), else by its first sandboxed call, and kept for its next ones, never weaker than a
  fresh build: the Landlock ruleset (built again when a directory of the plan leads to another inode),
  the compiled seccomp program (:mod:`peon.workers.sandbox.syscall_filter`), and the mount view (checked
  against the host and completed before each call, :mod:`peon.workers.sandbox.namespaces`); each call
  still gets its own thread, Landlock domain and seccomp filter; a process forked from the worker keeps
  none of them;
* a :class:`BwrapConfinement` starts ``bwrap`` with the plan's options around the command
  (:func:`~peon.workers.sandbox.plan.bwrap_argv`); the runner's process group, cancel grace, deadline
  and sweep apply to bwrap and everything in its namespaces exactly as to an unsandboxed command;
* a sandboxed command inherits no descriptor of the worker's but the runner's stdin and output pipe;
* :func:`result_summary` says in the call's result what it ran in.

Runs in the worker (and the job host), for each command a tool starts; never in the supervisor.
"""

from __future__ import annotations

import _thread
import contextlib
import copy
import ctypes
import errno
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from peon.core.errors import ErrorCode, ToolError

from peon.workers import linux
import peon.workers.sandbox.landlock as ll
import peon.workers.sandbox.namespaces as namespaces
import peon.workers.sandbox.syscall_filter as syscall_filter
from peon.workers.sandbox.ledger import Ledger
from peon.workers.sandbox.plan import (DEVICE_FILES, SandboxPlan, bwrap_argv, host_socket_paths, landlock_rules,
                                       layers, quiet_profile, seccomp_rules)


# -- the approved plan -----------------------------------------------------------------------------

_last_plan: tuple[dict[str, Any], SandboxPlan] | None = None


def plan_of(details: Mapping[str, Any]) -> SandboxPlan:
    """``SandboxPlan.from_dict(details)``, remembered for the last details read: a worker's calls carry the
    same approved plan, and comparing it with a copy of the last one costs less than checking it again."""
    global _last_plan
    if _last_plan is not None and _last_plan[0] == details:
        return _last_plan[1]
    plan = SandboxPlan.from_dict(details)
    _last_plan = (copy.deepcopy(dict(details)), plan)
    return plan


def result_summary(details: Mapping[str, Any] | None, confinement: Confinement | None = None) -> dict[str, Any] | None:
    """What a process result says about its sandbox (None: it ran unsandboxed); with the call's
    ``confinement``, also what its command left at agent-control paths and where that went (``set_aside``:
    :meth:`Confinement.settle`)."""
    if not details or not details.get("active"):
        return None
    try:
        plan = plan_of(details)
    except ValueError:
        plan = None
    out = {"kind": details["kind"], "abi": details.get("abi") or None, "network": details["network"],
           "writable": list(details["writable"]), "layers": layers(plan) if plan else [details["kind"]],
           "not_enforced": list(details.get("not_enforced", ()))}
    set_aside = confinement.settle() if confinement is not None else []
    if set_aside:
        out["set_aside"] = set_aside
    return out


# -- applying a plan in the worker -----------------------------------------------------------------

# Starts (argv, executable) with the runner's file actions and returns the pid; ``executable`` is what
# to execute when it is not argv[0] (an agent's pinned binary, "/proc/self/fd/N").
Start = Callable[[Sequence[str], "str | None"], int]


class Confinement:
    """The runner's hook: start the command inside the sandbox (see ``ProcessSpec.sandbox``); and, once the
    call's processes have ended, :meth:`settle` what the command left at agent-control paths."""

    plan: SandboxPlan
    ledger: Ledger | None = None  # what the agent-control paths were as the command started
    state_dir: str | os.PathLike[str] | None = None  # where settle() moves what may not stay
    call_id: str = "call"

    def spawn(self, start: Start, argv: Sequence[str], executable: str | None = None) -> int:
        raise NotImplementedError

    def take_ledger(self, *, deep: bool) -> Ledger | None:
        """Record the agent-control paths right before the command starts (nothing to record without them)."""
        plan = self.plan
        self.ledger = Ledger.take(plan.writable, plan.protected, deep=deep, resolve=resolve) if plan.protected else None
        return self.ledger

    def settle(self) -> list[dict[str, str]]:
        """Once every process of the call has ended: what the command created (or, without read-only binds,
        replaced or changed) at agent-control paths is moved into the session's state directory unless it
        runs nothing (:class:`~peon.workers.sandbox.ledger.Ledger`); what was done, once (later calls return
        the same list)."""
        return self.ledger.settle(self.state_dir, self.call_id) if self.ledger is not None else []


def _unavailable(message: str) -> ToolError:
    return ToolError(ErrorCode.SANDBOX_UNAVAILABLE, f"{message}; nothing was started")


def confinement_for(ctx: Any, *, enabled: bool = True) -> Confinement | None:
    """The sandbox the approved call must run in, or None for an unsandboxed call."""
    approved = ctx.approved.get("sandbox") if isinstance(ctx.approved, Mapping) else None
    if isinstance(approved, Mapping) and approved.get("active") is True:
        try:
            plan = plan_of(approved)
        except ValueError as exc:
            raise _unavailable(f"the approved sandbox cannot be applied: {exc}") from None
        confinement: Confinement = (LandlockConfinement(plan) if plan.kind == "landlock"
                                    else BwrapConfinement(plan, str(ctx.workspace)))
        confinement.state_dir = getattr(ctx.session, "spill_dir", None)
        confinement.call_id = str(getattr(ctx, "call_id", "") or "call")
        return confinement
    if enabled and ctx.session.config.sandbox.mode == "required":
        raise _unavailable('sandbox.mode is "required" but this call was approved without the sandbox')
    return None


class BwrapConfinement(Confinement):
    def __init__(self, plan: SandboxPlan, cwd: str):
        self.plan, self.cwd = plan, cwd

    def spawn(self, start: Start, argv: Sequence[str], executable: str | None = None) -> int:
        close_descriptors_on_exec()
        inner = list(argv)
        if executable is not None:
            # A pinned binary is executed through its descriptor inside the sandbox too: bwrap hands the
            # descriptor on, and /proc/self/fd/N in the sandbox's own /proc names the same open file.
            fd = _pinned_descriptor(executable)
            if fd is None:
                raise _unavailable(f"bwrap starts a pinned executable only through /proc/self/fd/N, not {executable}")
            os.set_inheritable(fd, True)
            inner[0] = executable
        ledger = self.take_ledger(deep=False)  # bwrap binds the existing ones read-only, and their containers
        guard = (ledger.containers(), ledger.read_only()) if ledger is not None else ((), ())
        return start(bwrap_argv(self.plan, quiet_profile(inner), self.cwd, guard), None)


class LandlockConfinement(Confinement):
    def __init__(self, plan: SandboxPlan):
        self.plan = plan

    def spawn(self, start: Start, argv: Sequence[str], executable: str | None = None) -> int:
        worker = _worker.mine()
        if not worker.undumpable:
            linux.set_dumpable(False)  # for the rest of this worker's life
            worker.undumpable = True
        close_descriptors_on_exec()
        plan = self.plan
        try:
            # The agent-control paths as they are now: read-only in the mount view, their directories bound to
            # themselves; without it, Landlock cannot stop writes there, so settle() judges changes too.
            built = _Materials.build(plan, self.take_ledger(deep=not plan.mount_view))
        except (OSError, ValueError, RuntimeError) as exc:
            raise _unavailable(f"the Landlock sandbox could not be built: {exc}") from None
        ruleset, syscalls = built.ruleset, built.syscalls
        outcome: list[Any] = []
        done = _thread.allocate_lock()
        done.acquire()

        def confined() -> None:  # on the dedicated thread: only it, and what it starts, enters the domain
            try:
                try:
                    built.enter_view(worker)
                    drop_capabilities()
                    ruleset.restrict_current_thread()
                    if syscalls is not None:
                        syscalls.load()
                except OSError as exc:
                    outcome.append(_unavailable(f"the Landlock sandbox could not be applied: {exc}"))
                    return
                outcome.append(start(quiet_profile(argv), executable))
            except BaseException as exc:  # handed to the worker's thread, which raises it
                outcome.append(exc)
            finally:
                done.release()

        # A bare thread and one lock: threading.Thread's start-up handshake and join would add wake-ups
        # of each thread per call, which a loaded machine makes cost milliseconds (bench/studies/bench_sandbox.py).
        _thread.start_new_thread(confined, ())
        done.acquire()
        result = outcome[0] if outcome else _unavailable("the sandboxed start ended without a result")
        if isinstance(result, BaseException):
            raise result
        return int(result)


class _Materials:
    """What one sandboxed start needs besides its thread, built (or taken from what this worker keeps,
    checked as :func:`prepared_ruleset` checks it) on the worker's own thread."""

    def __init__(self, plan: SandboxPlan, ruleset: ll.Ruleset, identities: Identities, sockets: list[str],
                 protected: list[str], containers: list[str], syscalls: syscall_filter.Filter | None,
                 host_mounts: int):
        self.plan, self.ruleset, self.identities, self.sockets = plan, ruleset, identities, sockets
        self.protected, self.containers, self.syscalls, self.host_mounts = protected, containers, syscalls, host_mounts

    @classmethod
    def build(cls, plan: SandboxPlan, ledger: Ledger | None) -> _Materials:
        """``ledger``: the agent-control paths as a call found them (None in a standby: it binds none; each
        call's own are bound when it enters the view)."""
        ruleset, identities = prepared_ruleset(plan)
        # Read before the thread joins the session's network: the host's sockets, not the session's.
        sockets = host_socket_paths(namespaces.host_sockets_text()) if plan.mount_view and not plan.network else []
        protected = ledger.read_only() if ledger is not None and plan.mount_view else []
        containers = ledger.containers() if ledger is not None and plan.mount_view else []
        syscalls = syscall_filter.build(seccomp_rules(plan)) if plan.seccomp else None
        host_mounts = namespaces.host_mount_namespace() if plan.mount_view else -1
        return cls(plan, ruleset, identities, sockets, protected, containers, syscalls, host_mounts)

    def enter_view(self, worker: _WorkerSandbox) -> None:
        """On the calling thread (never the worker's own): the session's network and the mount view, the
        one this worker keeps when it still holds (else a new one, kept for the next calls)."""
        plan = self.plan
        if not (plan.mount_view or plan.netns):
            return
        kept = worker.views.get(plan)
        view = namespaces.enter(netns=plan.netns, netns_inode=plan.netns_inode, mount_view=plan.mount_view,
                                writable=plan.writable, protected=self.protected, hidden=plan.hidden,
                                sockets=self.sockets, view=kept, host_mounts=self.host_mounts, host=self.identities,
                                containers=self.containers)
        if view is not None and view is not kept:
            worker.keep_view(plan, view)


def prepare(details: Mapping[str, Any] | None) -> None:
    """In a standby, before its first call: build what a sandboxed start of the session's plan
    (``details``: a call's ``"sandbox"`` approval details) needs and this worker keeps between calls —
    the Landlock ruleset, the seccomp program, the mount view (entered on a throwaway thread, which ends
    without confining anything) — so that a worker's first sandboxed call costs what its later ones
    do. Nothing is weaker for it: a call uses each piece only as it uses one kept from an earlier call,
    after the same checks. A failure here costs speed only (the call builds again, and reports)."""
    if not isinstance(details, Mapping) or details.get("active") is not True or details.get("kind") != "landlock":
        return
    try:
        built = _Materials.build(plan_of(details), None)
    except (OSError, ValueError, RuntimeError):
        return
    worker = _worker.mine()
    done = _thread.allocate_lock()
    done.acquire()

    def view() -> None:
        try:
            built.enter_view(worker)
        except Exception:  # a failure costs speed only: the call builds again, and reports
            pass
        finally:
            done.release()

    _thread.start_new_thread(view, ())
    done.acquire()


class _WorkerSandbox:
    """What this worker keeps from one sandboxed call to the next: each plan's Landlock ruleset (with the
    inodes its rules were made on) and mount view. A forked child starts without them (``pid``)."""

    MAX_KEPT = 4  # of each: a session has one plan, two with an agent adapter's

    def __init__(self) -> None:
        self.pid = 0
        self.undumpable = False
        self.rulesets: dict[SandboxPlan, tuple[ll.Ruleset, tuple[tuple[int, int], ...]]] = {}
        # Per plan, not per set of writable paths: a view carries its plan's protected binds and socket
        # covers, which another plan's call must not get either.
        self.views: dict[SandboxPlan, namespaces.MountView] = {}

    def mine(self) -> _WorkerSandbox:
        if self.pid != os.getpid():  # inherited through fork: the parent's descriptors are not ours to use
            self.pid, self.rulesets, self.views, self.undumpable = os.getpid(), {}, {}, False
        return self

    def keep_view(self, key: SandboxPlan, view: namespaces.MountView) -> None:
        """Keep ``view`` for ``key``, closing the one it replaces (or the oldest, beyond MAX_KEPT)."""
        old = self.views.pop(key, None)
        if old is not None:
            old.close()
        while len(self.views) >= self.MAX_KEPT:
            self.views.pop(next(iter(self.views))).close()
        self.views[key] = view


_worker = _WorkerSandbox()


def resolve(path: str) -> str:
    """``os.path.realpath`` of an existing path by the kernel: the path of an ``O_PATH`` descriptor of it
    (one lookup instead of an ``lstat`` per component); ``os.path.realpath`` where that cannot say."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return os.path.realpath(path)
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        real = ""
    finally:
        os.close(fd)
    return real if real.startswith("/") and not real.endswith(" (deleted)") else os.path.realpath(path)


def _identities(paths: Sequence[str]) -> tuple[tuple[int, int], ...]:
    return tuple((info.st_dev, info.st_ino) for info in map(os.stat, paths))


Identities = dict[str, tuple[int, int]]  # path -> (device, inode)


def prepared_ruleset(plan: SandboxPlan) -> tuple[ll.Ruleset, Identities]:
    """The plan's ruleset, built once per worker and used again while every directory of the plan still
    leads to the inode its rule was made on (a rule is on an inode: the same inodes, the same
    confinement); when one does not, it is built again (:func:`build_ruleset`, which fails if a path was
    replaced by a link). The device files Peon allows are not looked at again: one replaced since would only be
    unwritable (its rule is on the old inode), never a way around the rules. Also returns what each
    directory leads to now (the mount view checks its binds against it)."""
    worker = _worker.mine()
    paths = tuple(dict.fromkeys((*plan.readable, *plan.writable)))
    checked = [p for p in paths if p not in DEVICE_FILES]
    cached = worker.rulesets.get(plan)
    if cached is not None:
        try:
            now = _identities(checked)
            if now == cached[1]:
                return cached[0], dict(zip(checked, now, strict=True))
        except OSError:
            pass
        cached[0].close()
        del worker.rulesets[plan]
    ruleset, identities = _build_ruleset(plan, paths)
    while len(worker.rulesets) >= _WorkerSandbox.MAX_KEPT:
        worker.rulesets.pop(next(iter(worker.rulesets)))[0].close()
    worker.rulesets[plan] = (ruleset, identities)
    return ruleset, dict(zip(checked, identities, strict=True))


def build_ruleset(plan: SandboxPlan) -> ll.Ruleset:
    """The plan's ruleset, each rule on the very path that was approved: the paths were resolved when the
    session started, so one that now leads elsewhere was replaced since, and building fails."""
    return _build_ruleset(plan, tuple(dict.fromkeys((*plan.readable, *plan.writable))))[0]


def _build_ruleset(plan: SandboxPlan, paths: Sequence[str]) -> tuple[ll.Ruleset, tuple[tuple[int, int], ...]]:
    opened = {path: open_exactly(path) for path in paths}
    try:
        infos = {path: os.fstat(fd) for path, fd in opened.items()}
        directories = {path for path, info in infos.items() if stat.S_ISDIR(info.st_mode)}
        rules = landlock_rules(plan, directories)
        ruleset = ll.Ruleset(plan.abi, rules.handled_fs, rules.handled_net, rules.scoped)
        try:
            for path, rights in rules.grants:
                ruleset.allow_fd(opened[path], rights, path)
            for port in rules.connect_ports:  # the egress proxy on the host's loopback
                ruleset.allow_port(port, ll.NET_CONNECT_TCP)
        except OSError:
            ruleset.close()
            raise
        return ruleset, tuple((infos[p].st_dev, infos[p].st_ino) for p in paths if p not in DEVICE_FILES)
    finally:
        for fd in opened.values():
            os.close(fd)


SYS_CLOSE_RANGE = 436  # the same on every architecture
CLOSE_RANGE_CLOEXEC = 1 << 2


def close_descriptors_on_exec() -> None:
    """Mark every descriptor of the worker above stderr close-on-exec: a sandboxed command gets only
    what the runner hands it (stdin, the output pipe), never a channel of Peon's it could speak through."""
    if _libc.syscall(ctypes.c_long(SYS_CLOSE_RANGE), ctypes.c_uint(3), ctypes.c_uint(0xFFFFFFFF),
                     ctypes.c_uint(CLOSE_RANGE_CLOEXEC)) == 0:
        return
    for name in os.listdir("/proc/self/fd"):  # before Linux 5.11
        fd = int(name)
        if fd > 2:
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
                os.set_inheritable(fd, False)


def _pinned_descriptor(executable: str) -> int | None:
    prefix = "/proc/self/fd/"
    number = executable[len(prefix):] if executable.startswith(prefix) else ""
    return int(number) if number.isdigit() else None


def open_exactly(path: str) -> int:
    """An ``O_PATH`` descriptor of the resolved ``path``; ``OSError`` if the path now leads elsewhere (a
    component was replaced by a symlink since the session started): the descriptor's own path, read
    back from ``/proc``, must be ``path`` itself. (Cheaper in a freshly forked worker than ``openat2``
    through ``ctypes``, and as strict: it names the file actually opened, however it was reached.)"""
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        now = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        os.close(fd)
        raise
    if now != path:
        os.close(fd)
        raise OSError(errno.ELOOP, f"{path} now leads to {now} (a symlink replaced part of the approved path)")
    return fd


# -- thread credentials ----------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_capset = _libc.capset  # looked up once, in the forkserver, not in every worker
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_CAP_HEADER = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)  # pid 0: the calling thread
_NO_CAPABILITIES = (_CapData * 2)()


def drop_capabilities() -> None:
    """Leave the calling thread without any capability. With ``no_new_privs`` (set next), ``execve``
    never grants more than the thread had, not even to root, so the command starts with none. (For an
    ordinary user's thread, which has none, this changes nothing.)"""
    if _capset(ctypes.byref(_CAP_HEADER), _NO_CAPABILITIES) < 0:  # the ambient set empties with the others
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")
