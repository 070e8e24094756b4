"""What the OS sandbox allows one command: pure decisions, no I/O (paths arrive already resolved).

Promises:

* a :class:`SandboxPlan` says everything the approver is shown and the worker enforces: the kind
  (``landlock`` or ``bwrap``), the directories and files beneath which the command may write, those
  it may read, whether it may use TCP, whether it is kept from signalling processes and reaching
  abstract unix sockets outside its call, and the Landlock ABI it is enforced with;
  :meth:`SandboxPlan.from_dict` accepts only what :meth:`SandboxPlan.to_dict` produced — anything
  else raises ``ValueError`` (the caller fails closed);
* :func:`unenforced` names, in a sentence each, every configured restriction the kernel (its Landlock
  ABI) cannot enforce; nothing is dropped without being named;
* :func:`landlock_rules` handles every right the ABI knows and grants back only read rights beneath the
  readable paths and every right beneath the writable ones, so what is not granted is denied;
* :func:`bwrap_argv` builds a bubblewrap command line with a read-only view of the readable paths,
  writable binds of the writable ones, a fresh ``/dev`` and ``/proc``, its own pid, IPC and UTS
  namespaces (and network namespace when TCP is refused), and all capabilities dropped;
* the layers beside Landlock are decided here too: the session's private network namespace
  (``netns``), the read-only mount view (``mount_view``: everything outside the writable paths, the
  agent-control paths inside them and the named unix sockets of host daemons), and the seccomp filter
  (:func:`seccomp_rules`); :func:`protected_paths` and :func:`host_socket_paths` pick, from what the
  worker read, exactly which paths those layers cover.

Runs in both processes, touching nothing: the supervisor makes the plan
(:mod:`peon.workers.sandbox.decision`), the worker enforces it (:mod:`peon.workers.sandbox.confine`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import peon.workers.sandbox.landlock as ll

Kind = Literal["landlock", "bwrap"]
KINDS: tuple[Kind, ...] = ("landlock", "bwrap")

# Written to by ordinary programs, harmless to allow: sinks, sources, and the terminal (there is none:
# the command runs in a new session, so opening /dev/tty fails with ENXIO as it would unsandboxed).
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")

MIN_FS_ABI = 3  # truncate(2) is a write; below ABI 3 Landlock does not see it

@dataclass(frozen=True)
class SandboxPlan:
    kind: Kind
    writable: tuple[str, ...]  # resolved absolute paths: the workspace, the temp dir, configured ones
    readable: tuple[str, ...]  # resolved absolute paths; ("/",) means everything
    network: bool  # TCP connect/bind allowed
    isolate_signals: bool
    isolate_abstract_sockets: bool
    abi: int = 0  # the Landlock ABI the plan is enforced with (landlock kind)
    bwrap: str = ""  # the bubblewrap executable (bwrap kind)
    # Relative paths read-only beneath each writable directory (enforced with mount_view or bwrap).
    protected: tuple[str, ...] = ()
    # landlock kind, network = false, namespaces available: the session's network namespace (only its
    # own loopback) as a /proc path, and its inode, which the worker checks before joining it.
    netns: str = ""
    netns_inode: int = 0
    # landlock kind, namespaces available: a mount namespace per call in which everything outside the
    # writable paths is read-only (metadata included), the protected paths too, and (network = false)
    # the named unix sockets bound on the host are covered.
    mount_view: bool = False
    seccomp: bool = False  # the filter of seccomp_rules() is loaded in the confined thread
    hidden: tuple[str, ...] = ()  # Peon's own directories, covered by an empty tmpfs in the mount view
    # landlock kind, an egress allowlist without the network namespace: the egress proxy's port on the
    # host's loopback, the one TCP port a command may connect to (Landlock TCP rules, ABI 4).
    proxy_port: int = 0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["writable"], out["readable"] = list(self.writable), list(self.readable)
        out["protected"], out["hidden"] = list(self.protected), list(self.hidden)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SandboxPlan:
        def paths(key: str) -> tuple[str, ...]:
            value = data.get(key)
            if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) and p.startswith("/") for p in value):
                raise ValueError(f"sandbox.{key} must be a list of absolute paths, got {value!r}")
            return tuple(value)

        def flag(key: str) -> bool:
            value = data.get(key)
            if not isinstance(value, bool):
                raise ValueError(f"sandbox.{key} must be true or false, got {value!r}")
            return value

        kind = data.get("kind")
        if kind not in KINDS:
            raise ValueError(f"sandbox kind must be one of {KINDS}, got {kind!r}")
        abi, bwrap = data.get("abi", 0), data.get("bwrap", "")
        if not isinstance(abi, int) or isinstance(abi, bool) or abi < 0:
            raise ValueError(f"sandbox abi must be a non-negative integer, got {abi!r}")
        if not isinstance(bwrap, str):
            raise ValueError(f"sandbox bwrap must be a path, got {bwrap!r}")
        if kind == "landlock" and abi < 1:
            raise ValueError("a landlock sandbox needs the Landlock ABI it is enforced with")
        if kind == "bwrap" and not bwrap.startswith("/"):
            raise ValueError(f"a bwrap sandbox needs the absolute path of bwrap, got {bwrap!r}")
        protected = data.get("protected", [])
        if not isinstance(protected, (list, tuple)) or not all(
                isinstance(p, str) and relative_path_ok(p) for p in protected):
            raise ValueError(f"sandbox.protected must be a list of relative paths without '..', got {protected!r}")
        netns, netns_inode = data.get("netns", ""), data.get("netns_inode", 0)
        if not isinstance(netns, str) or (netns and not netns.startswith("/proc/")):
            raise ValueError(f"sandbox netns must be a /proc path, got {netns!r}")
        if not isinstance(netns_inode, int) or isinstance(netns_inode, bool) or (netns and netns_inode <= 0):
            raise ValueError(f"sandbox netns_inode must be the namespace's inode, got {netns_inode!r}")
        mount_view, seccomp = data.get("mount_view", False), data.get("seccomp", False)
        if not isinstance(mount_view, bool) or not isinstance(seccomp, bool):
            raise ValueError(f"sandbox mount_view and seccomp must be true or false, got {mount_view!r}, {seccomp!r}")
        proxy_port = data.get("proxy_port", 0)
        if not isinstance(proxy_port, int) or isinstance(proxy_port, bool) or not 0 <= proxy_port < 65536:
            raise ValueError(f"sandbox proxy_port must be a TCP port or 0, got {proxy_port!r}")
        return cls(kind, paths("writable"), paths("readable"), flag("network"), flag("isolate_signals"),
                   flag("isolate_abstract_sockets"), abi, bwrap, tuple(protected), netns, netns_inode,
                   mount_view, seccomp, paths("hidden") if "hidden" in data else (), proxy_port)


def kind_limits(kind: Kind, *, namespaces: bool, network: bool = True) -> list[str]:
    """What this kind cannot do whatever the configuration, one sentence each (listed in ``not_enforced``
    beside :func:`unenforced`, but no reason for ``mode = "required"`` to refuse: no setting asks for it)."""
    if kind == "bwrap":
        # Covering each socket with a bind would make bwrap fail whenever one vanishes before it starts.
        return [] if network else [
            "named unix sockets of host daemons in the bound tree (a read-only bind does not stop connect; narrow "
            "sandbox.readable, or use kind = \"landlock\" as root, whose mount view covers them)"]
    if namespaces:
        return []
    return ["chmod of ordinary mode bits and utimes outside the writable paths (Landlock does not see metadata; "
            f"needs {NAMESPACES_NEED}; setuid/setgid/sticky chmod, chown and xattr changes are refused everywhere "
            "by seccomp)"]


def relative_path_ok(path: str) -> bool:
    """A protected entry: relative, normalized, never leaving its root."""
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and all(p not in ("", ".", "..") for p in parts)


# -- what a kernel can enforce ---------------------------------------------------------------------


NAMESPACES_NEED = "a mount and network namespace per call, which needs root (CAP_SYS_ADMIN) for kind = \"landlock\""


def unenforced(kind: Kind, abi: int, *, network: bool, isolate_signals: bool,
               isolate_abstract_sockets: bool, namespaces: bool = True, protected: bool = False) -> list[str]:
    """The configured restrictions this sandbox cannot enforce, one sentence each. ``namespaces``: the
    landlock kind can add its mount view and network namespace; ``protected``: sandbox.protected is set."""
    if kind == "bwrap":  # its own pid namespace keeps signals in; abstract sockets live in the network namespace
        if isolate_abstract_sockets and network:
            return ["sandbox.isolate_abstract_sockets with sandbox.network = true (bwrap shares the network "
                    "namespace, and abstract unix sockets with it, unless network = false)"]
        return []
    gaps = []
    if not namespaces:
        if protected:
            gaps.append("sandbox.protected inside the writable paths while a command runs: read-only only with "
                        f"{NAMESPACES_NEED}, or kind = \"bwrap\" (what a command leaves there is set aside after it)")
        if not network:
            gaps.append("sandbox.network = false for named unix sockets of host daemons and for the command's own "
                        f"loopback, which is refused rather than private (needs {NAMESPACES_NEED}; "
                        "UDP, raw and other socket families are refused by seccomp)")
    if abi < MIN_FS_ABI:
        gaps.append(f"truncate(2) of files outside the writable paths (needs Landlock ABI {MIN_FS_ABI}, Linux 6.2; "
                    f"this kernel has ABI {abi})")
    if not network and abi < ll.NET_ABI:
        gaps.append(f"sandbox.network = false (TCP rules need Landlock ABI {ll.NET_ABI}, Linux 6.7; this kernel "
                    f"has ABI {abi})")
    if isolate_signals and abi < ll.SCOPE_ABI:
        gaps.append(f"sandbox.isolate_signals (needs Landlock ABI {ll.SCOPE_ABI}, Linux 6.12; this kernel has "
                    f"ABI {abi})")
    if isolate_abstract_sockets and abi < ll.SCOPE_ABI:
        gaps.append(f"sandbox.isolate_abstract_sockets (needs Landlock ABI {ll.SCOPE_ABI}, Linux 6.12; this "
                    f"kernel has ABI {abi})")
    return gaps


# -- Landlock --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LandlockRules:
    handled_fs: int
    handled_net: int
    scoped: int
    grants: tuple[tuple[str, int], ...]  # (path, rights beneath it)
    connect_ports: tuple[int, ...] = ()  # TCP ports a command may connect to while TCP is handled


def landlock_rules(plan: SandboxPlan, directories: frozenset[str] | set[str]) -> LandlockRules:
    """The ruleset for ``plan`` at its ABI; ``directories`` says which of its paths are directories
    (a rule on a file may only carry the rights that apply to files).

    With the mount view, Landlock leaves to it what it enforces alike, since each right Landlock handles
    costs every ``open`` of the command a walk up the file's path: ``truncate(2)`` (the view's read-only
    mounts refuse it outside the writable paths, ``EROFS``) and, when everything is readable, reading and
    executing (a grant of them on ``/`` covers every path of the view)."""
    fs = ll.fs_rights(plan.abi)
    if plan.mount_view:
        fs &= ~ll.FS_TRUNCATE
        if plan.readable == ("/",):
            fs &= ~ll.FS_READ
    # With the session's network namespace the command has only its own loopback: TCP there is its own.
    net = 0 if plan.network or plan.netns or plan.abi < ll.NET_ABI else ll.NET_BIND_TCP | ll.NET_CONNECT_TCP
    scoped = 0
    if plan.abi >= ll.SCOPE_ABI:
        scoped |= ll.SCOPE_SIGNAL if plan.isolate_signals else 0
        scoped |= ll.SCOPE_ABSTRACT_UNIX_SOCKET if plan.isolate_abstract_sockets else 0

    def for_path(path: str, rights: int) -> int:
        return rights if path in directories else rights & ll.FS_FILE_RIGHTS

    grants = [(path, for_path(path, ll.FS_READ & fs)) for path in plan.readable]
    grants += [(path, for_path(path, fs)) for path in plan.writable]
    ports = (plan.proxy_port,) if net and plan.proxy_port else ()
    return LandlockRules(fs, net, scoped, tuple((path, rights) for path, rights in grants if rights), ports)


# -- bubblewrap ------------------------------------------------------------------------------------


def bwrap_argv(plan: SandboxPlan, argv: Sequence[str], cwd: str,
               guard: tuple[Sequence[str], Sequence[str]] | None = None) -> list[str]:
    """``bwrap`` options, then ``--``, then ``argv``. ``guard``: the directories that hold agent-control
    paths, each bound to itself (so renaming or removing one fails ``EBUSY``), and the agent-control paths
    bound read-only (:class:`~peon.workers.sandbox.ledger.Ledger`); without it, the existing protected
    paths are looked up here and no directory is bound to itself.

    Not used, on purpose: ``--die-with-parent`` (bwrap's outer process dies at the first ``SIGTERM`` of
    a cancel, and with it the whole sandbox, before the command could use its grace; the worker, a
    child subreaper, kills everything the call started anyway) and ``--new-session`` (the runner
    already starts bwrap in a new session without a terminal; another one would take the command
    out of the process group the runner signals).
    """
    out = [plan.bwrap]
    for path in plan.readable:
        out += ["--ro-bind", path, path]
    out += ["--dev", "/dev", "--proc", "/proc"]
    for path in plan.writable:
        if path.startswith("/dev/") and path in DEVICE_FILES:
            continue  # the fresh /dev has them
        out += ["--bind", path, path]
    containers, read_only = guard if guard is not None else (
        (), protected_paths(plan.writable, plan.protected, os.path.realpath, os.path.lexists))
    for path in containers:
        out += ["--bind", path, path]
    for path in read_only:
        out += ["--ro-bind", path, path]
    for path in plan.hidden:
        if os.path.isdir(path):
            out += ["--tmpfs", path, "--remount-ro", path]
    out += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not plan.network:
        out.append("--unshare-net")
    out += ["--cap-drop", "ALL", "--chdir", cwd, "--", *argv]
    return out


# -- what the mount view and the seccomp filter cover ----------------------------------------------


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@functools.lru_cache(maxsize=8)  # one plan's, looked up on every call
def protected_candidates(writable: tuple[str, ...],
                         protected: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The writable directories (device files left out), and each protected path beneath each of them."""
    roots = tuple(w for w in writable if not w.startswith("/dev/"))
    return roots, tuple(f"{root.rstrip('/')}/{entry}" for root in roots for entry in protected)


def protected_paths(writable: Iterable[str], protected: Iterable[str], realpath: Any, exists: Any) -> list[str]:
    """The existing protected paths beneath the writable directories, resolved, that stay inside one of
    them (a link leading elsewhere leads to something read-only already). ``realpath`` and ``exists`` are
    the I/O, passed in."""
    roots, candidates = protected_candidates(tuple(writable), tuple(protected))
    out: list[str] = []
    for candidate in filter(exists, candidates):
        real = realpath(candidate)
        if any(inside(real, r) for r in roots) and real not in out:
            out.append(real)
    return out


def host_socket_paths(proc_net_unix: str) -> list[str]:
    """The absolute paths of the named unix sockets listed in ``/proc/net/unix`` (its text), in order,
    without repeats. Abstract sockets (``@...``) and relative names are not paths a command can open."""
    out: list[str] = []
    for line in proc_net_unix.splitlines()[1:]:
        fields = line.split(None, 7)
        if len(fields) == 8 and fields[7].startswith("/") and fields[7] not in out:
            out.append(fields[7])
    return out


# seccomp: what the filter refuses, as data (the worker turns it into libseccomp rules).
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
SOCK_STREAM, SOCK_TYPE_MASK = 1, 0xF
SPECIAL_MODE_BITS = 0o7000  # setuid, setgid, sticky


@dataclass(frozen=True)
class SeccompRules:
    special_chmod: bool  # chmod/fchmod/fchmodat with setuid, setgid or sticky bits: EPERM
    metadata: bool  # chown family: EPERM; setxattr family: EOPNOTSUPP (no mount view to make them EROFS)
    socket_families: tuple[int, ...]  # socket() of any other family: EAFNOSUPPORT; () allows every family
    inet_stream_only: bool  # AF_INET/AF_INET6 sockets other than SOCK_STREAM: EACCES (no private namespace)
    no_io_uring: bool = True  # io_uring would perform socket and file operations past the filter
    # prlimit64, setpriority/getpriority, sched_set*, ioprio_set, migrate_pages and move_pages on any process
    # but the caller (pid 0, or its own process group), kcmp and process_vm_writev: EPERM. Seccomp sees numbers,
    # not relations: a descendant's pid cannot be told from Peon's, so only "self" is allowed.
    other_processes: bool = True


def seccomp_rules(plan: SandboxPlan) -> SeccompRules:
    offline = not plan.network
    families = (AF_UNIX, AF_INET, AF_INET6, AF_NETLINK) if offline else ()
    return SeccompRules(special_chmod=True, metadata=not plan.mount_view, socket_families=families,
                        inet_stream_only=offline and not plan.netns)


def layers(plan: SandboxPlan) -> list[str]:
    """The mechanisms enforcing ``plan``, for results and ``peon doctor``."""
    out: list[str] = [plan.kind]
    out += ["mount_view"] if plan.mount_view else []
    out += ["network_namespace"] if plan.netns or (plan.kind == "bwrap" and not plan.network) else []
    out += ["seccomp"] if plan.seccomp else []
    return out


def enforced(plan: SandboxPlan) -> list[str]:
    """What ``plan`` enforces, one sentence each (what it cannot is :func:`unenforced`)."""
    out = ["writes outside the writable paths are refused"]
    if plan.mount_view or plan.kind == "bwrap":
        out.append("metadata changes (chmod, chown, utimes, xattrs) outside the writable paths are refused "
                   "(read-only mounts)")
    if plan.protected:
        out += agent_control_enforced(plan)
    if plan.hidden and (plan.mount_view or plan.kind == "bwrap"):
        out.append("Peon's own state and runtime directories are hidden")
    if plan.seccomp:
        out.append("setuid, setgid and sticky chmod are refused everywhere; io_uring is refused")
        out.append("the limits, priority, scheduling and I/O priority of any process but the command's own are left "
                   "alone (prlimit, setpriority, sched_set*, ioprio_set with another pid: EPERM)")
    elif plan.kind == "bwrap":
        out.append("Peon's processes and every other process outside the call are invisible (its own pid namespace)")
    if not plan.network:
        if plan.netns or plan.kind == "bwrap":
            out.append("no network: a private network namespace with only its own loopback (TCP, UDP, DNS, raw, IPv6)")
        elif plan.seccomp:
            out.append("no TCP (Landlock); UDP, raw and other socket families refused (seccomp)")
        if plan.mount_view:
            out.append("named unix sockets bound on the host when the call starts are covered")
    if plan.readable != ("/",):
        out.append("reads outside the readable paths are refused")
    return out


def agent_control_enforced(plan: SandboxPlan) -> list[str]:
    """What ``plan`` enforces at the agent-control paths (sandbox.protected) inside the writable roots."""
    names = ", ".join(plan.protected)
    git = any(p == ".git" or p.startswith(".git/") for p in plan.protected)
    redirections = (" and git's own (the repository's .git, commondir, info/, config.worktree, "
                    "objects/info/alternates, worktrees/, and each submodule's under .git/modules)") if git else ""
    set_aside = ("moved into the session's state directory once the call's processes have ended (listed in the "
                 "result under sandbox.set_aside), unless it runs nothing (a repository git init made, a config of "
                 "plain keys, git's sample hooks)")
    if plan.mount_view or plan.kind == "bwrap":
        return [f"the agent-control paths inside the writable roots that exist when a command starts are read-only: "
                f"{names}{redirections}; the directories holding them, and a repository's .git, cannot be renamed, "
                "removed or replaced while it runs (each bound to itself: EBUSY)",
                f"what a command creates at an agent-control path that did not exist is {set_aside}"]
    return [f"what a command creates, replaces or changes at an agent-control path ({names}{redirections}) is "
            f"{set_aside}; while the command runs they are writable (Landlock alone)"]


def hideable(candidates: Iterable[str], keep: Iterable[str]) -> tuple[str, ...]:
    """The candidates (Peon's directories) that can be covered without covering a path in ``keep`` (the
    workspace, the writable and readable roots): none that is ``/``, or holds or is one of them."""
    kept = list(keep)
    out: list[str] = []
    for path in candidates:
        if path != "/" and not any(inside(k, path) for k in kept) and path not in out:
            out.append(path)
    return tuple(out)



# A login shell's profile runs with stderr to /dev/null inside the sandbox: profiles that write beneath
# the home directory (pyenv rehash, nvm, completions caches) fail there, and their complaints would head
# every result. The files bash -l reads are sourced, in its order, by the same shell with only their stderr
# silenced (a second shell to redirect around `bash -l` costs 1.1 ms of CPU per call).
QUIET_PROFILE = ("{ if [ -r /etc/profile ]; then . /etc/profile; fi; "
                 "if [ -r ~/.bash_profile ]; then . ~/.bash_profile; elif [ -r ~/.bash_login ]; then . ~/.bash_login; "
                 "elif [ -r ~/.profile ]; then . ~/.profile; fi; } 2>/dev/null\n")
# The command follows on the next line of the -c string, and is run from there by eval (the text after the
# profile's line, cut at its known length: a pattern such as ${BASH_EXECUTION_STRING#*[[:cntrl:]]} costs
# bash time quadratic in the command's length, 8 ms of CPU for a short line): bash numbers its lines from 1,
# as `bash -lc` would (a one-line command's error never says "line 2"), and parses it after the profile
# ran, as a login shell does. $0 and the positional parameters stay bash -c's. The line is ASCII, so its
# length in characters, which bash counts, is its length in bytes in any locale.
PROFILE_LINE = QUIET_PROFILE.removesuffix("\n")


def _run_next_line() -> str:
    """``; eval -- "${BASH_EXECUTION_STRING:N}"; exit`` and a newline, N the length of the whole first line."""
    offset = 0
    while True:
        line = f'; eval -- "${{BASH_EXECUTION_STRING:{offset}}}"; exit\n'
        if len(PROFILE_LINE) + len(line) == offset:
            return line
        offset = len(PROFILE_LINE) + len(line)


RUN_NEXT_LINE = _run_next_line()


def quiet_profile(argv: Sequence[str]) -> list[str]:
    """``[bash, -lc, command]`` as a shell that reads the login profile silently, then runs ``command``;
    any other argv unchanged."""
    if len(argv) == 3 and argv[1] == "-lc" and os.path.basename(argv[0]) == "bash":
        return [argv[0], "-c", PROFILE_LINE + RUN_NEXT_LINE + argv[2]]
    return list(argv)
