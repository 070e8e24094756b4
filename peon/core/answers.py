"""An approver's answers and the scopes of a session grant: the closed sets every approval answer is made of.

Kept in the contract (beside :mod:`peon.core.risk`) because the answer crosses the client<->supervisor
channel (:mod:`peon.core.wire`) and every approver speaks it; the policy that judges with them is
:mod:`peon.approval.policy`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

Scope = Literal["call", "prefix", "tool", "risk"]
AnswerName = Literal["allow_once", "allow_session", "deny"]
SCOPES: tuple[Scope, ...] = ("call", "tool", "risk")  # listed in every approval request, narrowest first
# What "allow for this session" may cover, narrowest first. "prefix": every command line of the tool whose
# simple commands all start with the words the approver gave; offered, for calls with a command, by
# ``"prefix_scope": true`` in the request (its ``scopes`` list stays the three above).
GRANT_SCOPES: tuple[Scope, ...] = ("call", "prefix", "tool", "risk")
ANSWERS: tuple[AnswerName, ...] = ("allow_once", "allow_session", "deny")

# The characters of a word an approver is offered as part of a prefix without quoting.
_PLAIN = frozenset("-_./:=,+@%")


def suggested_prefix(request: Mapping[str, Any]) -> str | None:
    """The prefix an approver is offered for a ``request`` with a command (scope ``prefix`` offered): the
    program of its first simple command and, when it is a plain word, its first argument
    (``npm test -- --watch=false`` offers ``npm test``); None when there is none to offer."""
    if request.get("prefix_scope") is not True:
        return None
    details = request.get("details")
    segments = details.get("segments") if isinstance(details, Mapping) else None
    first = segments[0] if isinstance(segments, list) and segments else None
    words = first.get("words") if isinstance(first, Mapping) else None
    if not isinstance(words, list) or not words:
        return None
    plain = [w for w in words[:2] if isinstance(w, str) and w and all(c.isalnum() or c in _PLAIN for c in w)]
    if not plain or plain[0] != words[0]:
        return None
    if len(plain) == 2 and (plain[1] != words[1] or plain[1].startswith("-")):
        plain = plain[:1]
    return " ".join(plain)

# The tool name of an approval question about a sandboxed command's connection (``sandbox.network_ask``):
# not a tool call, so its answers cover that host and port only.
NETWORK_QUESTION = "network"
