"""The session's sandbox: the decision made once, as the session starts, and what each call is approved with.

Promises:

* :func:`session_status` turns the ``[sandbox]`` configuration, the workspace and the session's
  environment into the session's decision, made once when the session starts: off; on, with the
  :class:`~peon.workers.sandbox.plan.SandboxPlan` every sandboxed call of the session gets and the
  configured restrictions this kernel cannot enforce (``not_enforced``); or, with ``mode =
  "required"``, :class:`SandboxUnavailable` (``sandbox_unavailable``) naming the missing feature —
  never a session that silently runs unsandboxed. Paths are decided resolved (``realpath``);
* beside Landlock, the landlock kind adds what this machine allows (:mod:`peon.workers.sandbox.namespaces`,
  :mod:`peon.workers.sandbox.syscall_filter`): a read-only mount view and, with ``network = false``,
  the session's private network namespace (root), and a seccomp filter (libseccomp). The status lists
  what is enforced (``enforced``, ``layers``) and what is not (``not_enforced``);
* :func:`call_details` is the ``"sandbox"`` object of a call's approval details: exactly what the worker
  will enforce (:mod:`peon.workers.sandbox.confine`), shown to the approver.

Runs in the supervisor: :func:`session_status` as the session opens, :func:`call_details` as a call is
assessed, :func:`remove_session_cache` as the session ends.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from typing import Any

from peon.core import agent_control
from peon.core.config_view import SandboxView
from peon.core.errors import ErrorCode, PeonError

import peon.workers.sandbox.namespaces as namespaces
import peon.workers.sandbox.syscall_filter as syscall_filter
from peon.workers.sandbox.plan import DEVICE_FILES, SandboxPlan, enforced, hideable, kind_limits, layers, unenforced
from peon.workers.sandbox.landlock import NET_ABI
from peon.workers.sandbox.probe import SIMULATE_ENV, Simulation, probe_bwrap, probe_landlock


class SandboxUnavailable(PeonError):
    """``sandbox.mode = "required"`` and the sandbox (or one configured restriction) cannot be had."""

    def __init__(self, message: str, details: dict[str, Any] | None = None):
        super().__init__(ErrorCode.SANDBOX_UNAVAILABLE, message, details)


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


def cache_dir(section: SandboxView, env: Mapping[str, str], session_id: str, workspace: str = "") -> str | None:
    """The sandbox's cache directory (created 0700), or None (``caches = "off"``, or it cannot be).
    ``workspace``: beneath the user's cache directory, one per workspace (named by a hash of its path), so
    a workspace's sessions share what their package managers downloaded; ``user``: one for all of them."""
    caches = section.caches
    if caches == "session":
        path = os.path.join(temp_dir(env), f"peon-cache-{session_id or os.getpid()}")
    elif caches in ("user", "workspace"):
        base = env.get("XDG_CACHE_HOME") or ""
        if not os.path.isabs(base):
            home = env.get("HOME") or ""
            if not os.path.isabs(home):
                return None
            base = os.path.join(home, ".cache")
        path = os.path.join(base, "peon", "sandbox")
        if caches == "workspace":
            digest = hashlib.sha256(os.path.realpath(workspace or ".").encode("utf-8", "surrogateescape"))
            path = os.path.join(path, "workspaces", digest.hexdigest()[:24])
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
    caches = cache_dir(section, env, session_id, workspace)
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
    protected = agent_control.command_paths(section.protected)  # the file tools' list, as commands get it
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
    tcp_proxy = bool(allowlist) and netns is None and landlock.abi >= NET_ABI  # Landlock TCP rules confine TCP
    if allowlist and netns is None and not tcp_proxy:
        notes.append("sandbox.network is an allowlist, but without the session's network namespace or Landlock TCP "
                     f"rules (ABI {NET_ABI}) no proxy can be the only way out: no network at all instead")
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
    if tcp_proxy:
        limits.append("with sandbox.network = [hosts] and no network namespace, TCP is confined to the egress proxy's "
                      "port by Landlock, which names ports, not hosts: that port number of any other host is "
                      "reachable too; run as root for the namespace")
    gaps += limits
    plan = SandboxPlan("landlock", tuple(writable), tuple(readable), abi=landlock.abi, protected=protected,
                       netns=netns.path if netns else "", netns_inode=netns.inode if netns else 0,
                       mount_view=mount_view, seccomp=not seccomp_problem, hidden=hidden_real, **options)
    if allowlist and (netns is not None or tcp_proxy):
        status["egress"] = {"allow": list(allowlist), "deny": list(section.network_deny), "ask": section.network_ask,
                            "netns": netns.path if netns else "", "netns_inode": netns.inode if netns else 0,
                            "confined_by": "network namespace" if netns else f"Landlock TCP rules (ABI {landlock.abi})"}
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
