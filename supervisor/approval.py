"""The supervisor's approval hook: what the service asks to decide a call (see :mod:`supervisor.gate`).

Promise: the service depends only on this protocol; the pure policy it applies is :mod:`peon.policy`.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from peon.policy import ApprovalRequest, Decision
from peon.rules import NO_FACTS, ShellFacts


class ApprovalHook(Protocol):
    async def decide(self, request: ApprovalRequest, cancelled: asyncio.Event,
                     facts: ShellFacts = NO_FACTS) -> Decision: ...
