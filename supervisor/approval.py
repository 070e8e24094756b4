"""The approval hook: the supervisor asks it, for every validated call, whether the call may run.

Promise: a call reaches a worker only after the hook returned a :class:`Decision` with
``allowed=True``; the decision says who made it and under which rule, so it can be audited and shown.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from peon.tool import ToolRisk


@dataclass(frozen=True)
class ApprovalRequest:
    """Exactly what an approver is shown; a session grant is keyed on it."""

    call_id: str
    tool: str
    risk: ToolRisk
    risk_reason: str
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    canonical_input: str = ""  # the canonical JSON of the input that will be executed

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["risk"] = self.risk.value
        return out


@dataclass(frozen=True)
class Decision:
    allowed: bool
    by: str  # "policy", "grant", "approver", "timeout", "no-approver"
    rule: str  # the rule that decided, in words a user can find in their configuration


class ApprovalHook(Protocol):
    async def decide(self, request: ApprovalRequest, cancelled: asyncio.Event) -> Decision: ...


class AllowEverything:
    """The hook used when no approval policy is configured."""

    async def decide(self, request: ApprovalRequest, cancelled: asyncio.Event) -> Decision:
        return Decision(True, "policy", "no approval policy is configured")
