"""What a project's own file (``<workspace>/.peon/config.toml``) may set: only tightenings.

Promises:

* a project file can only tighten what the layers below it resolved to: it may lower limits, make
  approval stricter (allow < ask < deny), strengthen containment and the sandbox, and add rules that
  ask or deny; anything else it sets — raising a limit, loosening approval, an ``allow`` rule, agent
  adapters, tools, the audit log, the environment, or any key not listed as tightenable — is refused
  (:func:`project_refusals` names every refused key with the reason), so a key added later is refused
  until it is listed here;
* a project's approval settings are floors: :func:`project_floors` turns them into ``tighten_only``
  rules that no later layer can loosen.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from peon.approval.policy import STRICTNESS
from peon.client.config.model import PeonConfig, Sandbox
from peon.client.config.tables import dotted_keys
from peon.core.risk import RISK_NAMES


CONTAINMENT_STRENGTH = {"process-tree": 0, "auto": 1, "cgroup": 2}


def project_refusals(data: Mapping[str, Any], user: PeonConfig) -> list[tuple[str, str]]:
    """(dotted key, why) for everything a project table sets that is not a tightening of ``user``.

    Anything not explicitly tightenable is refused, so a key added later is safe by default.
    """
    refused = []
    section = data.get("approval")
    approval: Mapping[str, Any] = section if isinstance(section, Mapping) else {}
    for index, rule in enumerate(approval.get("rules") or ()):
        key = f"approval.rules[{index}]"
        if rule.get("decision") == "allow":
            refused.append((key, 'decision = "allow": a project rule may only "ask" or "deny"'))
        if rule.get("tighten_only") is False:
            refused.append((f"{key}.tighten_only", "every project rule is tighten_only"))
    for key in dotted_keys(data):
        if key.startswith("approval.rules["):
            continue
        section, _, name = key.partition(".")
        value = _lookup(data, key)
        if section in ("limits", "skills", "jobs") and "." not in name:
            current = getattr(getattr(user, section), name)
            if value > current:
                refused.append((key, f"{value!r} is above the user's {current!r}: a project may only lower limits"))
        elif section == "approval" and name in RISK_NAMES:
            current = getattr(user.approval, name)
            if STRICTNESS[value] < STRICTNESS[current]:
                refused.append((key, f"{value!r} is looser than the user's {current!r}: a project may only make "
                                     "approval stricter (allow < ask < deny)"))
        elif key == "runtime.containment":
            current = user.runtime.containment
            if CONTAINMENT_STRENGTH[value] < CONTAINMENT_STRENGTH[current]:
                refused.append((key, f"{value!r} is weaker than the user's {current!r}: a project may only "
                                     "strengthen containment (process-tree < auto < cgroup)"))
        elif section == "sandbox":
            why = _sandbox_refusal(name, value, user.sandbox)
            if why:
                refused.append((key, why))
        elif key == "tools.entry_points":
            if value and not user.tools.entry_points:
                refused.append((key, "a project cannot enable tools the user disabled"))
        elif section == "agents":
            refused.append((key, "only the user configures agent adapters (executables, argument vectors, "
                                 "what the approver is shown)"))
        elif key == "tools.extra":
            refused.append((key, "a project cannot add tools"))
        elif section == "audit":
            refused.append((key, "only the user configures the audit log"))
        elif section == "redaction":
            if key != "redaction.enabled" or value is not True:
                refused.append((key, "a project may only turn redaction on; only the user allows values"))
        elif section == "environment":
            refused.append((key, "only the user configures the environment commands and agents run with"))
        else:
            refused.append((key, "not a setting a project may change"))
    return refused


SANDBOX_STRENGTH = {"off": 0, "auto": 1, "required": 2}


def _sandbox_refusal(name: str, value: Any, user: Sandbox) -> str | None:
    """Why a project may not set ``sandbox.<name>`` to ``value``, or None: it may only make the sandbox
    stronger (mode up, network off, isolation on)."""
    if name == "mode":
        if SANDBOX_STRENGTH[value] < SANDBOX_STRENGTH[user.mode]:
            return (f"{value!r} is weaker than the user's {user.mode!r}: a project may only strengthen the "
                    "sandbox (off < auto < required)")
        return None
    if name == "network":
        if value is False or user.network is True:
            return None
        if isinstance(value, (list, tuple)) and isinstance(user.network, tuple) and set(value) <= set(user.network):
            return None
        return "a project may only turn the network off or narrow the user's allowlist"
    if name == "network_deny":
        dropped = [item for item in user.network_deny if item not in value]
        return None if not dropped else f"a project may only add network_deny entries, not remove {dropped}"
    if name == "network_ask":
        return None if value is False or user.network_ask else "a project may only turn network_ask off"
    if name in ("isolate_signals", "isolate_abstract_sockets"):
        return None if value is True or getattr(user, name) is False else "a project may only turn isolation on"
    if name == "protected":
        missing = [item for item in user.protected if item not in value]
        return None if not missing else f"a project may only add protected paths, not remove {missing}"
    return "only the user chooses the sandbox's kind, its writable and readable paths and its caches"


def _lookup(data: Mapping[str, Any], key: str) -> Any:
    for part in key.split("."):
        data = data[part]
    return data


def project_floors(data: Mapping[str, Any], source: str) -> tuple[list[dict[str, Any]], list[str]]:
    """A project's rules and per-risk settings as tighten_only rules, with their sources."""
    section = data.get("approval")
    approval: Mapping[str, Any] = section if isinstance(section, Mapping) else {}
    rules, sources = [], []
    for index, rule in enumerate(approval.get("rules") or ()):
        rules.append({**rule, "tighten_only": True})
        sources.append(f"approval.rules[{index}] in {source}")
    for risk in RISK_NAMES:
        value = approval.get(risk)
        if value in ("ask", "deny"):
            rules.append({"risk": risk, "decision": value, "tighten_only": True})
            sources.append(f"approval.{risk} in {source}")
    return rules, sources
