"""The OS sandbox for commands: Landlock (in the kernel, no privileges needed) or bubblewrap (namespaces).

Promises:

* :func:`probe_landlock` and :func:`probe_bwrap` say what this machine offers and, when it offers
  nothing, why and what is known to fix it; they never raise;
* :func:`session_status` turns the ``[sandbox]`` configuration, the workspace and the session's
  environment into the session's decision, made once when the session starts: off; on, with the
  :class:`~peon.workers.sandbox_plan.SandboxPlan` every sandboxed call of the session gets and the
  configured restrictions this kernel cannot enforce (``not_enforced``); or, with ``mode =
  "required"``, :class:`SandboxUnavailable` (``sandbox_unavailable``) naming the missing feature —
  never a session that silently runs unsandboxed. Paths are decided resolved (``realpath``);
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
* what does not depend on the call is built by a worker's first sandboxed call and kept for its next
  ones, never weaker than a fresh build: the Landlock ruleset (built again when a directory of the plan
  leads to another inode), the compiled seccomp program, and the mount view (checked against the host
  and completed before each call, :mod:`peon.workers.namespaces`); each call still gets its own thread,
  Landlock domain and seccomp filter;
* a :class:`BwrapConfinement` starts ``bwrap`` with the plan's options around the command
  (:func:`~peon.workers.sandbox_plan.bwrap_argv`); the runner's process group, cancel grace, deadline and
  sweep apply to bwrap and everything in its namespaces exactly as to an unsandboxed command;
* a sandboxed command inherits no descriptor of the worker's but the runner's stdin and output pipe.

``PEON_SANDBOX_SIMULATE`` in the session's environment (for tests and diagnosis) makes the probes
report less than the machine has, never more: ``no-landlock``, ``landlock-abi=N``, ``no-bwrap``,
``no-namespaces``, ``no-seccomp``, comma-separated.

Beside Landlock, the landlock kind adds what this machine allows (:mod:`peon.workers.namespaces`,
:mod:`peon.workers.syscall_filter`): a read-only mount view and, with ``network = false``, the
session's private network namespace (root), and a seccomp filter (libseccomp). The session's status
lists what is enforced (``enforced``, ``layers``) and what is not (``not_enforced``).
"""

from __future__ import annotations

import _thread
import contextlib
import copy
import ctypes
import errno
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from peon.core.config_view import SandboxView
from peon.core.environment import split_search_path
from peon.core.errors import ErrorCode, PeonError, ToolError

from peon.workers import landlock as ll
from peon.workers import namespaces, syscall_filter
from peon.workers.sandbox_plan import (DEVICE_FILES, SandboxPlan, bwrap_argv, enforced, hideable, host_socket_paths,
                           kind_limits, landlock_rules, layers, protected_paths, quiet_profile, seccomp_rules,
                           unenforced)

SIMULATE_ENV = "PEON_SANDBOX_SIMULATE"
BWRAP_PROBE_TIMEOUT_SECONDS = 10.0
PROBE_COMMAND = "/bin/true"


class SandboxUnavailable(PeonError):
    """``sandbox.mode = "required"`` and the sandbox (or one configured restriction) cannot be had."""

    def __init__(self, message: str, details: dict[str, Any] | None = None):
        super().__init__(ErrorCode.SANDBOX_UNAVAILABLE, message, details)


# -- what this machine offers ----------------------------------------------------------------------


@dataclass(frozen=True)
class Simulation:
    no_landlock: bool = False
    landlock_abi: int | None = None
    no_bwrap: bool = False
    no_namespaces: bool = False
    no_seccomp: bool = False

    @classmethod
    def parse(cls, text: str) -> Simulation:
        flags = {"no-landlock": False, "no-bwrap": False, "no-namespaces": False, "no-seccomp": False}
        abi = None
        for item in filter(None, (part.strip() for part in text.split(","))):
            if item in flags:
                flags[item] = True
            elif item.startswith("landlock-abi=") and item.partition("=")[2].isdigit():
                abi = int(item.partition("=")[2])
            else:
                raise PeonError(ErrorCode.CONFIG_INVALID,
                                f"{SIMULATE_ENV} has an unknown item {item!r}; expected no-landlock, landlock-abi=N, "
                                "no-bwrap, no-namespaces or no-seccomp", {SIMULATE_ENV: text})
        return cls(flags["no-landlock"], abi, flags["no-bwrap"], flags["no-namespaces"], flags["no-seccomp"])


@dataclass(frozen=True)
class LandlockSupport:
    abi: int  # 0: unavailable
    detail: str
    fixes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"available": self.abi > 0, "abi": self.abi, "detail": self.detail, "fixes": list(self.fixes)}


LANDLOCK_FIXES_DISABLED = (
    "enable Landlock at boot: add landlock to the lsm= list on the kernel command line, keeping the modules "
    "already listed in /sys/kernel/security/lsm (e.g. lsm=landlock,lockdown,yama,integrity,apparmor), then reboot",
)
LANDLOCK_FIXES_MISSING = (
    "use a kernel built with CONFIG_SECURITY_LANDLOCK=y: Linux 5.13 or newer (6.7+ for TCP rules, "
    "6.12+ for signal and abstract-socket isolation)",
    'use sandbox.kind = "bwrap" where unprivileged user namespaces work',
)


def probe_landlock(simulate: Simulation = Simulation()) -> LandlockSupport:
    if simulate.no_landlock:
        return LandlockSupport(0, f"Landlock reported unavailable ({SIMULATE_ENV})", LANDLOCK_FIXES_MISSING)
    probe = ll.abi_version()
    if probe.abi > 0:
        abi = probe.abi if simulate.landlock_abi is None else min(probe.abi, simulate.landlock_abi)
        if abi < 1:
            return LandlockSupport(0, f"Landlock reported unavailable ({SIMULATE_ENV})", LANDLOCK_FIXES_MISSING)
        note = f" (the kernel has ABI {probe.abi}; {SIMULATE_ENV} caps it)" if abi != probe.abi else ""
        return LandlockSupport(abi, f"Landlock ABI {abi}{note}")
    if probe.errno == errno.EOPNOTSUPP:
        return LandlockSupport(0, "the kernel has Landlock but it is not enabled at boot", LANDLOCK_FIXES_DISABLED)
    if probe.errno == errno.ENOSYS:
        return LandlockSupport(0, "this kernel has no Landlock system calls", LANDLOCK_FIXES_MISSING)
    return LandlockSupport(0, f"landlock_create_ruleset failed: {os.strerror(probe.errno)} (a seccomp filter?)",
                           ("allow the landlock_* system calls in the seccomp profile around Peon",))


@dataclass(frozen=True)
class BwrapSupport:
    path: str  # "" when not found
    works: bool
    detail: str
    fixes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"available": self.works, "path": self.path or None, "detail": self.detail, "fixes": list(self.fixes)}


BWRAP_FIXES_MISSING = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)",
)
BWRAP_FIXES_USERNS = (
    "enable unprivileged user namespaces: sysctl -w user.max_user_namespaces=15000 "
    "(Debian before 11: sysctl -w kernel.unprivileged_userns_clone=1)",
    "Ubuntu 23.10 and later: AppArmor restricts them; install an AppArmor profile for bwrap or "
    "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
    "inside a container: allow user namespaces (the default seccomp profile of Docker refuses them)",
)


def probe_bwrap(env: Mapping[str, str], simulate: Simulation = Simulation(), *, network: bool = True) -> BwrapSupport:
    """Whether ``bwrap`` is installed and can build the sandbox Peon would ask of it (one real run)."""
    # Only absolute PATH entries: a workspace cannot plant a bwrap through a relative one.
    absolute = os.pathsep.join(split_search_path(env.get("PATH") or os.defpath)[0])
    found = None if simulate.no_bwrap or not absolute else shutil.which("bwrap", path=absolute)
    if found is None:
        why = f"reported missing ({SIMULATE_ENV})" if simulate.no_bwrap else "not found in the session's PATH"
        return BwrapSupport("", False, f"bwrap is {why}", BWRAP_FIXES_MISSING)
    path = os.path.realpath(found)
    plan = SandboxPlan("bwrap", (), ("/",), network, True, True, 0, path)
    try:
        run = subprocess.run(bwrap_argv(plan, [PROBE_COMMAND], "/"), stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(env),
                             timeout=BWRAP_PROBE_TIMEOUT_SECONDS, start_new_session=True)
    except subprocess.TimeoutExpired:
        return BwrapSupport(path, False, f"{path} did not finish a trial run within {BWRAP_PROBE_TIMEOUT_SECONDS:g} s")
    except OSError as exc:
        return BwrapSupport(path, False, f"{path} cannot be started: {exc.strerror}", BWRAP_FIXES_MISSING)
    if run.returncode != 0:
        said = run.stderr.decode("utf-8", "replace").strip().splitlines()
        why = said[-1][:300] if said else f"exit status {run.returncode}"
        return BwrapSupport(path, False, f"{path} cannot create its namespaces here: {why}", BWRAP_FIXES_USERNS)
    return BwrapSupport(path, True, f"{path} creates pid, IPC, UTS{'' if network else ', network'} namespaces")


# -- the session's decision -------------------------------------------------------------------------


def temp_dir(env: Mapping[str, str]) -> str:
    """The system temp directory as the session's processes see it: TMPDIR when it is an absolute
    directory, else /tmp."""
    candidate = env.get("TMPDIR") or ""
    return candidate if os.path.isabs(candidate) and os.path.isdir(candidate) else "/tmp"


def expand(path: str, env: Mapping[str, str]) -> str | None:
    """A configured path made absolute (``~/`` is the session's HOME); None when it cannot be."""
    if path == "~" or path.startswith("~/"):
        home = env.get("HOME") or ""
        if not os.path.isabs(home):
            return None
        path = home + path[1:]
    return path if os.path.isabs(path) else None


def _resolve_paths(entries: Sequence[str], env: Mapping[str, str], skipped: list[str]) -> list[str]:
    out: list[str] = []
    for entry in entries:
        path = expand(entry, env)
        real = os.path.realpath(path) if path else None
        if real is None or not os.path.exists(real):
            skipped.append(f"{entry} (does not exist)" if path else f"{entry} (no absolute HOME to expand it)")
        elif real not in out:
            out.append(real)
    return out


def _namespaces(simulate: Simulation, network: bool,
                notes: list[str]) -> tuple[bool, namespaces.NetworkNamespace | None]:
    """Whether the landlock kind gets its mount view, and the session's network namespace (network = false)."""
    why = f"reported unavailable ({SIMULATE_ENV})" if simulate.no_namespaces else namespaces.probe()
    if why:
        notes.append(f"no mount view or private network namespace: {why}")
        return False, None
    if network:
        return True, None
    try:
        return True, namespaces.session_network()
    except OSError as exc:
        notes.append(f"no private network namespace: {exc}")
        return False, None


def cache_dir(section: SandboxView, env: Mapping[str, str], session_id: str) -> str | None:
    """The sandbox's cache directory (created 0700), or None (``caches = "off"``, or it cannot be)."""
    caches = section.caches
    if caches == "session":
        path = os.path.join(temp_dir(env), f"peon-cache-{session_id or os.getpid()}")
    elif caches == "user":
        base = env.get("XDG_CACHE_HOME") or ""
        if not os.path.isabs(base):
            home = env.get("HOME") or ""
            if not os.path.isabs(home):
                return None
            base = os.path.join(home, ".cache")
        path = os.path.join(base, "peon", "sandbox")
    else:
        return None
    try:
        if caches == "session":  # in a shared temp dir: made here, or already ours (a directory, not a link)
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                info = os.lstat(path)
                if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                    return None
        else:
            os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return os.path.realpath(path)


def remove_session_cache(status: Mapping[str, Any]) -> None:
    """Remove a ``caches = "session"`` directory when its session ends (a per-user one stays)."""
    path = status.get("cache_dir")
    if status.get("caches") == "session" and isinstance(path, str) and os.path.basename(path).startswith("peon-cache-"):
        shutil.rmtree(path, ignore_errors=True)


def session_status(section: SandboxView, workspace: str, env: Mapping[str, str],
                   hidden: Sequence[str] = (), session_id: str = "") -> dict[str, Any]:
    """The session's sandbox decision as plain data (``Session.info["sandbox"]``); ``env`` is the
    environment commands run with (:func:`peon.core.environment.command_environment`); ``hidden`` are Peon's
    own directories (state, runtime), kept from commands where the kind can."""
    mode = section.mode
    if mode == "off":
        return {"mode": "off", "active": False, "reason": 'sandbox.mode is "off"'}
    simulate = Simulation.parse(env.get(SIMULATE_ENV, ""))
    landlock = probe_landlock(simulate)
    status: dict[str, Any] = {"mode": mode, "active": False, "configured_kind": section.kind,
                              "landlock": landlock.to_dict()}
    skipped: list[str] = []
    caches = cache_dir(section, env, session_id)
    extra = [caches] if caches else []
    writable = _resolve_paths([workspace, temp_dir(env), *DEVICE_FILES, *section.writable, *extra], env, skipped)
    readable = _resolve_paths(section.readable, env, skipped)
    hidden_real = hideable((os.path.realpath(p) for p in hidden if os.path.isabs(p)), [*writable, *readable])
    status["cache_dir"], status["caches"] = caches, section.caches
    allowlist = tuple(section.network) if isinstance(section.network, (tuple, list)) else ()
    network = section.network is True  # an allowlist is no network but through the session's egress proxy
    options: dict[str, Any] = {"network": network, "isolate_signals": section.isolate_signals,
                               "isolate_abstract_sockets": section.isolate_abstract_sockets}
    notes = [f"skipped writable or readable path {entry}" for entry in skipped]
    protected = tuple(section.protected)
    seccomp_problem = f"reported unavailable ({SIMULATE_ENV})" if simulate.no_seccomp else syscall_filter.available()
    kind = section.kind
    if kind == "bwrap":
        bwrap = probe_bwrap(env, simulate, network=network)
        status["bwrap"] = bwrap.to_dict()
        gaps = unenforced("bwrap", 0, **options)
        limits = kind_limits("bwrap", namespaces=True, network=network)
        if allowlist:
            gaps.append("sandbox.network as an allowlist (its proxy is reachable only from the landlock kind's "
                        "network namespace); no network at all instead")
        if bwrap.works and gaps and mode == "required":
            raise SandboxUnavailable('sandbox.mode is "required" but bwrap cannot enforce: ' + "; ".join(gaps),
                                     {"feature": "bwrap", "not_enforced": gaps})
        if bwrap.works:
            plan = SandboxPlan("bwrap", tuple(writable), tuple(readable), bwrap=bwrap.path, protected=protected,
                               hidden=hidden_real, **options)
            return {**status, "active": True, "kind": "bwrap", "plan": plan.to_dict(), "not_enforced": gaps + limits,
                    "enforced": enforced(plan), "layers": layers(plan), "notes": notes}
        if mode == "required":
            raise SandboxUnavailable(
                f'sandbox.mode is "required" with sandbox.kind = "bwrap", but {bwrap.detail}; fix: '
                + "; or ".join(bwrap.fixes), {"feature": "bwrap", "fixes": list(bwrap.fixes)})
        notes.append(f"bwrap unavailable ({bwrap.detail}); using Landlock instead")
        kind = "landlock"
    if landlock.abi == 0:
        if mode == "required":
            raise SandboxUnavailable(
                f'sandbox.mode is "required" but Landlock is unavailable: {landlock.detail}; fix: '
                + "; or ".join(landlock.fixes), {"feature": "landlock", "fixes": list(landlock.fixes)})
        reason = f"Landlock is unavailable: {landlock.detail}; commands run unsandboxed"
        return {**status, "reason": reason, "fixes": list(landlock.fixes), "notes": notes,
                "not_enforced": ["everything: commands run unsandboxed"]}
    mount_view, netns = _namespaces(simulate, network, notes)
    layered = mount_view and (network or bool(netns))
    if allowlist and netns is None:
        notes.append("sandbox.network is an allowlist, but without the session's network namespace no proxy can be "
                      "the only way out: no network at all instead")
    gaps = unenforced("landlock", landlock.abi, **options, namespaces=layered, protected=bool(protected))
    limits = kind_limits("landlock", namespaces=layered)
    if seccomp_problem:
        notes.append(f"no seccomp filter: {seccomp_problem}")
        limits.append(f"setuid/setgid/sticky chmod and io_uring (seccomp: {seccomp_problem})")
        if not network and netns is None:
            gaps.append(f"sandbox.network = false for UDP, raw and non-IP sockets (seccomp: {seccomp_problem})")
    if hidden_real and not mount_view and readable == ["/"]:
        limits.append("Peon's state and runtime directories stay readable by commands (hiding them needs the mount "
                      "view, i.e. root, or kind = \"bwrap\")")
    if gaps and mode == "required":
        raise SandboxUnavailable(
            'sandbox.mode is "required" but this kernel cannot enforce: ' + "; ".join(gaps)
            + ' (turn those settings off, or use mode = "auto" to run with what the kernel enforces)',
            {"feature": "landlock", "abi": landlock.abi, "not_enforced": gaps})
    gaps += limits
    plan = SandboxPlan("landlock", tuple(writable), tuple(readable), abi=landlock.abi, protected=protected,
                       netns=netns.path if netns else "", netns_inode=netns.inode if netns else 0,
                       mount_view=mount_view, seccomp=not seccomp_problem, hidden=hidden_real, **options)
    if allowlist and netns is not None:
        status["egress"] = {"allow": list(allowlist), "netns": netns.path, "netns_inode": netns.inode}
    return {**status, "active": True, "kind": "landlock", "plan": plan.to_dict(), "not_enforced": gaps,
            "enforced": enforced(plan), "layers": layers(plan), "notes": notes}


def call_details(status: Mapping[str, Any], *, enabled: bool = True, why_not: str = "") -> dict[str, Any] | None:
    """The ``"sandbox"`` object of a process call's approval details: exactly what the worker enforces.
    None when ``sandbox.mode`` is ``"off"`` (the details stay as they always were)."""
    mode = status.get("mode", "off")
    if mode == "off":
        return None
    if not status.get("active"):
        return {"active": False, "mode": mode, "reason": status.get("reason", 'sandbox.mode is "off"')}
    if not enabled:
        return {"active": False, "mode": mode, "reason": why_not}
    return {"active": True, "mode": mode, **status["plan"], "not_enforced": list(status.get("not_enforced", ()))}


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


def result_summary(details: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a process result says about its sandbox (None: it ran unsandboxed)."""
    if not details or not details.get("active"):
        return None
    try:
        plan = plan_of(details)
    except ValueError:
        plan = None
    return {"kind": details["kind"], "abi": details.get("abi") or None, "network": details["network"],
            "writable": list(details["writable"]), "layers": layers(plan) if plan else [details["kind"]],
            "not_enforced": list(details.get("not_enforced", ()))}


# -- applying a plan in the worker -----------------------------------------------------------------

# Starts (argv, executable) with the runner's file actions and returns the pid; ``executable`` is what
# to execute when it is not argv[0] (an agent's pinned binary, "/proc/self/fd/N").
Start = Callable[[Sequence[str], "str | None"], int]


class Confinement:
    """The runner's hook: start the command inside the sandbox (see ``ProcessSpec.sandbox``)."""

    plan: SandboxPlan

    def spawn(self, start: Start, argv: Sequence[str], executable: str | None = None) -> int:
        raise NotImplementedError


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
        return LandlockConfinement(plan) if plan.kind == "landlock" else BwrapConfinement(plan, str(ctx.workspace))
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
        return start(bwrap_argv(self.plan, quiet_profile(inner), self.cwd), None)


class LandlockConfinement(Confinement):
    def __init__(self, plan: SandboxPlan):
        self.plan = plan

    def spawn(self, start: Start, argv: Sequence[str], executable: str | None = None) -> int:
        worker = _worker.mine()
        if not worker.undumpable:
            set_dumpable(False)  # for the rest of this worker's life
            worker.undumpable = True
        close_descriptors_on_exec()
        plan = self.plan
        try:
            ruleset, identities = prepared_ruleset(plan)
            # Read before the thread joins the session's network: the host's sockets, not the session's.
            sockets = (host_socket_paths(namespaces.host_sockets_text())
                       if plan.mount_view and not plan.network else [])
            protected = (protected_paths(plan.writable, plan.protected, resolve, exists)
                         if plan.mount_view else [])
            syscalls = syscall_filter.build(seccomp_rules(plan)) if plan.seccomp else None
            host_mounts = namespaces.host_mount_namespace() if plan.mount_view else -1
        except (OSError, ValueError, RuntimeError) as exc:
            raise _unavailable(f"the Landlock sandbox could not be built: {exc}") from None
        outcome: list[Any] = []
        done = _thread.allocate_lock()
        done.acquire()

        def confined() -> None:  # on the dedicated thread: only it, and what it starts, enters the domain
            try:
                try:
                    if plan.mount_view or plan.netns:
                        kept = worker.views.get(plan)
                        view = namespaces.enter(netns=plan.netns, netns_inode=plan.netns_inode,
                                                mount_view=plan.mount_view, writable=plan.writable,
                                                protected=protected, hidden=plan.hidden, sockets=sockets,
                                                view=kept, host_mounts=host_mounts, host=identities)
                        if view is not None and view is not kept:
                            worker.keep_view(plan, view)
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
        # of each thread per call, which a loaded machine makes cost milliseconds (bench/bench_sandbox.py).
        _thread.start_new_thread(confined, ())
        done.acquire()
        result = outcome[0] if outcome else _unavailable("the sandboxed start ended without a result")
        if isinstance(result, BaseException):
            raise result
        return int(result)


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


def exists(path: str) -> bool:
    """Whether ``path`` names anything, a dangling link included (``os.path.lexists`` without raising and
    catching an exception for each missing path)."""
    return os.access(path, os.F_OK, follow_symlinks=False)


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
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.prctl.restype = ctypes.c_int
_capset = _libc.capset  # looked up once, in the forkserver, not in every worker
PR_SET_DUMPABLE = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_CAP_HEADER = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)  # pid 0: the calling thread
_NO_CAPABILITIES = (_CapData * 2)()


def _prctl(option: int, arg2: int = 0, arg3: int = 0) -> None:
    if _libc.prctl(option, arg2, arg3, 0, 0) < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def set_dumpable(value: bool) -> None:
    _prctl(PR_SET_DUMPABLE, int(value))


def drop_capabilities() -> None:
    """Leave the calling thread without any capability. With ``no_new_privs`` (set next), ``execve``
    never grants more than the thread had, not even to root, so the command starts with none. (For an
    ordinary user's thread, which has none, this changes nothing.)"""
    if _capset(ctypes.byref(_CAP_HEADER), _NO_CAPABILITIES) < 0:  # the ambient set empties with the others
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")
