"""What this machine offers the OS sandbox: Landlock and its ABI, a working bubblewrap.

Promise: :func:`probe_landlock` and :func:`probe_bwrap` say what this machine offers and, when it offers
nothing, why and what is known to fix it; they never raise. ``PEON_SANDBOX_SIMULATE``
(:data:`SIMULATE_ENV`, in the session's environment, for tests and diagnosis; :class:`Simulation`)
makes them report less than the machine has, never more: ``no-landlock``, ``landlock-abi=N``,
``no-bwrap``, ``no-namespaces``, ``no-seccomp``, comma-separated.

Runs in the supervisor, as the session starts (:mod:`peon.workers.sandbox.decision`), and in ``peon``'s
diagnosis of the machine; never in a worker.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from peon.core.environment import split_search_path
from peon.core.errors import ErrorCode, PeonError

import peon.workers.sandbox.landlock as ll
from peon.workers.sandbox.plan import SandboxPlan, bwrap_argv

SIMULATE_ENV = "PEON_SANDBOX_SIMULATE"
BWRAP_PROBE_TIMEOUT_SECONDS = 10.0
PROBE_COMMAND = "/bin/true"


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

