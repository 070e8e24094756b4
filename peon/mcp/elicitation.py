"""Approval through MCP elicitation, sans I/O: the form a client shows, the decision it returns, and the
signed ``requestState`` of the stateless revision.

Promises:

* the form shows the whole approval request with control and bidirectional characters made visible
  (a command cannot repaint or reorder what the user reads) and every part bounded;
* any answer that is not an explicit, well-formed acceptance — decline, cancel, an error, a malformed
  form — is a denial with a reason that says which;
* a ``requestState`` token verifies only if this server process issued it, unaltered.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import Any

from peon.approvers import request_facts, visible
from peon.core.answers import suggested_prefix

from peon.mcp.jsonrpc import shown
from peon.mcp.revisions import at_least

MAX_REASON_CHARS = 500  # what the form accepts; the reason is quoted, escaped and bounded when kept

APPROVAL_KEY = "approval"  # the inputRequests/inputResponses key of an approval (stateless revision)
APPROVAL_META_KEY = "peon/approval"  # the structured approval request, for programs (peon.RemoteSession)
DECISIONS = (("allow_once", "Allow once"), ("allow_session", "Allow for this session"), ("deny", "Deny"))
SCOPES = {"call": "this exact call", "prefix": "commands starting with the words shown",
          "tool": "every call of this tool", "risk": "every call of this risk"}


def can_elicit_form(capabilities: Any) -> bool:
    """Whether declared client capabilities include form elicitation (``{}`` means form)."""
    if not isinstance(capabilities, Mapping):
        return False
    elicitation = capabilities.get("elicitation")
    if not isinstance(elicitation, Mapping):
        return False
    return "form" in elicitation or "url" not in elicitation


def _enum_property(title: str, options: Iterable[tuple[str, str]], default: str, version: str) -> dict[str, Any]:
    options = list(options)
    prop: dict[str, Any] = {"type": "string", "title": title, "default": default}
    if at_least(version, "2025-11-25"):
        prop["oneOf"] = [{"const": value, "title": label} for value, label in options]
    else:  # the enum + enumNames shape of earlier revisions
        prop["enum"] = [value for value, _ in options]
        prop["enumNames"] = [label for _, label in options]
    return prop


def approval_message(request: Mapping[str, Any]) -> str:
    """The request as text: the same facts the terminal shows (:func:`peon.approvers.request_facts`),
    with control and bidirectional characters made visible (a command cannot repaint or reorder what the
    user reads) and every part bounded."""
    return "\n".join(["Peon asks for approval", *request_facts(request)])


def approval_elicitation(request: Mapping[str, Any], version: str) -> dict[str, Any]:
    """``elicitation/create`` params that show an approval request and offer the three decisions."""
    properties: dict[str, Any] = {"decision": _enum_property("Decision", DECISIONS, "deny", version)}
    prefix = suggested_prefix(request)
    scopes = [s for s in request.get("scopes") or () if s in SCOPES and s != "prefix"]
    if prefix is not None:
        scopes.insert(1 if scopes else 0, "prefix")
    labels = {**SCOPES, "prefix": f"commands starting with `{visible(prefix or '')}`"}
    if scopes:
        properties["scope"] = _enum_property(
            "Remember the session grant for", [(s, labels[s]) for s in scopes], scopes[0], version)
    if prefix is not None and "prefix" in scopes:
        properties["save"] = {"type": "boolean", "title": "Always (save the prefix to my configuration)",
                              "default": False,
                              "description": "With 'commands starting with': keep it as an allow rule in the "
                                             "user's Peon configuration for later sessions."}
    properties["reason"] = {"type": "string", "title": "Reason (optional)", "maxLength": MAX_REASON_CHARS,
                            "description": "Why, in a few words: kept with the decision in the audit log."}
    params: dict[str, Any] = {
        "message": approval_message(request),
        "requestedSchema": {"type": "object", "properties": properties, "required": ["decision"]},
    }
    if at_least(version, "2025-11-25"):
        params["mode"] = "form"
    return params


def decision_from_elicitation(result: Any, error: Any = None, scopes: Iterable[str] = (),
                              prefix: str | None = None) -> dict[str, Any]:
    """Turn the client's answer (an ``ElicitResult`` or an error) into an approver answer; ``prefix``: the
    one the form offered (:func:`peon.core.answers.suggested_prefix`), None when it offered none."""
    if error is not None or not isinstance(result, Mapping):
        message = error.get("message") if isinstance(error, Mapping) else "no usable answer"
        return {"decision": "deny", "reason": f"the client could not ask the user: {message}"}
    action = result.get("action")
    if action != "accept":
        verb = {"decline": "declined", "cancel": "dismissed"}.get(str(action), f"answered {shown(action)} to")
        return {"decision": "deny", "reason": f"the user {verb} the approval request"}
    content = result.get("content")
    if not isinstance(content, Mapping):
        content = {}
    decision = content.get("decision")
    if decision not in {value for value, _ in DECISIONS}:
        return {"decision": "deny", "reason": f"the approval form came back with decision {shown(decision)}"}
    answer: dict[str, Any] = {"decision": decision, "reason": "answered by the user through the MCP client"}
    said = content.get("reason")
    if isinstance(said, str) and said.strip():
        answer["reason"] += f": {shown(said, MAX_REASON_CHARS)}"
    scope = content.get("scope")
    if decision == "allow_session":
        offered = [s for s in scopes if s != "prefix"] + (["prefix"] if prefix is not None else [])
        answer["scope"] = scope if scope in offered else (offered[0] if offered else "call")
        if answer["scope"] == "prefix":
            answer["prefix"] = prefix
            answer["save"] = content.get("save") is True
    return answer


def decision_from_retry(input_responses: Mapping[str, Any] | None, key: str,
                        scopes: Iterable[str] = (), prefix: str | None = None) -> dict[str, Any]:
    """The approver answer a retried call carries under ``inputResponses[key]`` (stateless revision);
    a retry without one is a denial."""
    response = (input_responses or {}).get(key)
    if response is None:
        return {"decision": "deny", "reason": "the retry carried no answer to the approval request"}
    return decision_from_elicitation(response, None, scopes, prefix)


class RequestStateSigner:
    """Opaque ``requestState`` tokens that only this server process can have issued."""

    def __init__(self, key: bytes):
        self._key = key

    def sign(self, ref: str) -> str:
        return f"{ref}.{self._mac(ref)}"

    def verify(self, token: Any) -> str | None:
        """The reference inside a token this signer issued, or ``None`` for anything else (any string,
        including one that is not valid Unicode)."""
        if not isinstance(token, str) or "." not in token:
            return None
        ref, _, mac = token.rpartition(".")
        expected = self._mac(ref).encode()
        return ref if hmac.compare_digest(mac.encode("utf-8", "surrogatepass"), expected) else None

    def _mac(self, ref: str) -> str:
        return hmac.new(self._key, ref.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def input_required(key: str, elicitation: dict[str, Any], state: str) -> dict[str, Any]:
    """The 2026-07-28 answer that asks the client for input: retry with ``requestState`` and the answer."""
    return {
        "resultType": "input_required",
        "inputRequests": {key: {"method": "elicitation/create", "params": elicitation}},
        "requestState": state,
    }
