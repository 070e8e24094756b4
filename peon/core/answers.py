"""An approver's answers and the scopes of a session grant: the closed sets every approval answer is made of.

Kept in the contract (beside :mod:`peon.core.risk`) because the answer crosses the client<->supervisor
channel (:mod:`peon.core.wire`) and every approver speaks it; the policy that judges with them is
:mod:`peon.approval.policy`.
"""

from __future__ import annotations

from typing import Literal

Scope = Literal["call", "tool", "risk"]
AnswerName = Literal["allow_once", "allow_session", "deny"]
SCOPES: tuple[Scope, ...] = ("call", "tool", "risk")  # what "allow for this session" may cover, narrowest first
ANSWERS: tuple[AnswerName, ...] = ("allow_once", "allow_session", "deny")
