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
  namespaces (and network namespace when TCP is refused), and all capabilities dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from . import landlock as ll

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

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["writable"], out["readable"] = list(self.writable), list(self.readable)
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
        return cls(kind, paths("writable"), paths("readable"), flag("network"), flag("isolate_signals"),
                   flag("isolate_abstract_sockets"), abi, bwrap)


# -- what a kernel can enforce ---------------------------------------------------------------------


def unenforced(kind: Kind, abi: int, *, network: bool, isolate_signals: bool,
               isolate_abstract_sockets: bool) -> list[str]:
    """The configured restrictions this sandbox cannot enforce, one sentence each."""
    if kind == "bwrap":  # its own pid namespace keeps signals in; abstract sockets live in the network namespace
        if isolate_abstract_sockets and network:
            return ["sandbox.isolate_abstract_sockets with sandbox.network = true (bwrap shares the network "
                    "namespace, and abstract unix sockets with it, unless network = false)"]
        return []
    gaps = []
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


def landlock_rules(plan: SandboxPlan, directories: frozenset[str] | set[str]) -> LandlockRules:
    """The ruleset for ``plan`` at its ABI; ``directories`` says which of its paths are directories
    (a rule on a file may only carry the rights that apply to files)."""
    fs = ll.fs_rights(plan.abi)
    net = 0 if plan.network or plan.abi < ll.NET_ABI else ll.NET_BIND_TCP | ll.NET_CONNECT_TCP
    scoped = 0
    if plan.abi >= ll.SCOPE_ABI:
        scoped |= ll.SCOPE_SIGNAL if plan.isolate_signals else 0
        scoped |= ll.SCOPE_ABSTRACT_UNIX_SOCKET if plan.isolate_abstract_sockets else 0

    def for_path(path: str, rights: int) -> int:
        return rights if path in directories else rights & ll.FS_FILE_RIGHTS

    grants = [(path, for_path(path, ll.FS_READ & fs)) for path in plan.readable]
    grants += [(path, for_path(path, fs)) for path in plan.writable]
    return LandlockRules(fs, net, scoped, tuple(grants))


# -- bubblewrap ------------------------------------------------------------------------------------


def bwrap_argv(plan: SandboxPlan, argv: Sequence[str], cwd: str) -> list[str]:
    """``bwrap`` options, then ``--``, then ``argv``.

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
    out += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not plan.network:
        out.append("--unshare-net")
    out += ["--cap-drop", "ALL", "--chdir", cwd, "--", *argv]
    return out
