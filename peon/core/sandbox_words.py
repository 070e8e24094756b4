"""The OS sandbox in words, from the plain data Peon already sends (pure: no I/O).

Promises:

* :func:`call_sandbox_line` turns a call's approved ``details["sandbox"]`` into one line for an
  approver — its kind and layers, where commands may write, what they may read, the network, and how
  many things it does not enforce — instead of the object itself;
* :func:`session_sandbox_sentence` turns a session's sandbox status (``Session.info["sandbox"]``) into
  the sentence a server's instructions tell the model; without a status it says what decides it and
  where each result says it;
* both say only what the data says: an inactive sandbox is "not sandboxed" with its reason, never a
  sandbox it does not have. Paths are listed as given, at most :data:`MAX_PATHS` of them.

Owns the words; the decision is :mod:`peon.workers.sandbox`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_PATHS = 6
DEVICES = frozenset({"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"})


def _layers(plan: Mapping[str, Any], layers: Sequence[str] | None = None) -> str:
    kind = plan.get("kind")
    head = f"landlock ABI {plan['abi']}" if kind == "landlock" and plan.get("abi") else str(kind or "?")
    names = list(layers) if layers else [str(kind)] + [name for name, on in (
        ("mount_view", plan.get("mount_view")), ("network_namespace", plan.get("netns")),
        ("seccomp", plan.get("seccomp"))) if on]
    rest = [name.replace("_", " ") for name in names[1:]]
    return " + ".join([head, *rest])


def _paths(paths: Any) -> str:
    shown = [str(p) for p in paths or () if str(p) not in DEVICES] if isinstance(paths, (list, tuple)) else []
    if not shown:
        return "nothing"
    more = len(shown) - MAX_PATHS
    return ", ".join(shown[:MAX_PATHS]) + (f" and {more} more" if more > 0 else "")


def _network(plan: Mapping[str, Any], egress: Any = None) -> str:
    if plan.get("network"):
        return "on"
    hosts = egress.get("allow") if isinstance(egress, Mapping) else None
    if hosts:
        return "only " + ", ".join(str(h) for h in hosts) + " (through the session's proxy)"
    return "through the session's proxy only" if plan.get("netns") and plan.get("kind") == "landlock" else "off"


def _reads(plan: Mapping[str, Any]) -> str:
    readable = plan.get("readable")
    return "everything" if list(readable or ()) == ["/"] else f"only {_paths(readable)}"


def call_sandbox_line(details: Any) -> str:
    """One line for an approver about the sandbox a call will run in (``details["sandbox"]``)."""
    if not isinstance(details, Mapping):
        return "not sandboxed"
    if not details.get("active"):
        return f"not sandboxed ({details.get('reason') or 'the sandbox is off'})"
    gaps = list(details.get("not_enforced") or ())
    line = (f"{_layers(details)}; writes only {_paths(details.get('writable'))}; reads {_reads(details)}; "
            f"network {_network(details)}")
    return line + (f"; {len(gaps)} thing{'s' if len(gaps) != 1 else ''} not enforced (details)" if gaps else "")


def session_sandbox_sentence(status: Mapping[str, Any] | None) -> str:
    """What a server tells the model about its commands' sandbox, from the session's status (None: not
    known yet, as when ``peon mcp`` answers before its session has started)."""
    if status is None:
        return ("Whether bash commands run in the OS sandbox depends on the session's [sandbox] (on by default "
                "where the kernel allows it): each bash result's `sandbox` says where the command could write and "
                "whether it had network access, and `null` means it was not sandboxed.")
    if not status.get("active"):
        reason = status.get("reason") or "the sandbox is off"
        return f"bash commands are not sandboxed ({reason}): they run with the user's own permissions."
    given = status.get("plan")
    plan: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    gaps = [str(gap) for gap in status.get("not_enforced") or ()]
    sentence = (f"bash commands run in the OS sandbox ({_layers(plan, status.get('layers'))}): they can write only "
                f"beneath {_paths(plan.get('writable'))} (other writes fail with EACCES), read "
                f"{_reads(plan)}, and network access is {_network(plan, status.get('egress'))}.")
    protected = list(plan.get("protected") or ())
    if protected and (plan.get("mount_view") or plan.get("kind") == "bwrap"):
        sentence += f" In the workspace, {_paths(protected)} stay read-only to them."
    return sentence + (f" Not enforced: {'; '.join(gaps)}." if gaps else "")
