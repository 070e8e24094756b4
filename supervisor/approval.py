"""The supervisor's approval hook: what the service asks to decide a call (see :mod:`peon.supervisor.gate`).

Promise: the service depends only on this protocol; the pure policy it applies is :mod:`peon.approval.policy`.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from peon.approval.policy import ApprovalRequest, Decision, Verdict


class ApprovalHook(Protocol):
    async def settle(self, request: ApprovalRequest, verdict: Verdict, cancelled: asyncio.Event) -> Decision:
        """The decision for a call the policy judged ``verdict``: allow and deny stand, ask is asked."""
        ...
