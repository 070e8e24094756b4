"""How the session's egress proxy, on its own thread, reaches the approval gate and the audit log.

Promises:

* :func:`link` gives the running proxy an asker and an attempt sink that cross to the supervisor's event
  loop: a question about ``host:port`` is settled as an ``ask`` by a gate of its own that waits in the
  session gate's line (one question at a time with the tool calls' questions; same timeout and
  fail-closed answers; the request's ``tool`` is ``network``, its input ``{"host", "port"}``), with
  grants of its own (``network-grants/`` in the state directory): a tool call's grant never lets a host
  through and a network answer never covers a tool call; :func:`answer` hands it the approver's answers;
  every ended attempt is written to the audit as a ``network`` line;
* an answer that allows for the session (``allow_session``, or a grant that covers the request) is
  reported as ``allow_session`` (the proxy remembers it), any other allow as ``allow_once``, everything
  else as ``deny`` with the gate's words;
* nothing here raises into the proxy's thread: a closed loop drops the audit line (reported on stderr)
  and refuses the question.

This module owns the crossing; the decision order is :class:`peon.approval.network_policy.NetworkPolicy`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from peon.approval.policy import ApprovalRequest, Verdict
from peon.core.answers import NETWORK_QUESTION
from peon.core.risk import ToolRisk
from peon.approval.validation import canonical_json
from peon.supervisor.approval.audit import AuditLog, network_entry
from peon.supervisor.approval.gate import ApprovalGate
from peon.supervisor.approval.grants import GrantStore
from peon.supervisor.egress import Asker, Proxy

NETWORK_TOOL = NETWORK_QUESTION  # the tool name an approver sees for a connection question


def network_request(name: str, port: int, text: str) -> ApprovalRequest:
    """The question about ``name:port`` as the gate and the approver see it."""
    return ApprovalRequest(
        call_id=f"network-{uuid.uuid4().hex[:12]}", tool=NETWORK_TOOL, risk=ToolRisk.PROCESS,
        risk_reason="a sandboxed command connects to a host sandbox.network does not name",
        summary=text, details={"host": name, "port": port, "network_ask": True},
        canonical_input=canonical_json({"host": name, "port": port}), sandboxed=True)


async def settle(gate: ApprovalGate, name: str, port: int, text: str) -> tuple[str, str]:
    """The gate's answer to ``text``: allow_session, allow_once or deny, and the gate's words."""
    request = network_request(name, port, text)
    verdict = Verdict("ask", f"sandbox.network_ask = true: {text}")
    decision = await gate.settle(request, verdict, asyncio.Event())
    if not decision.allowed:
        return "deny", decision.rule
    remembered = decision.answer == "allow_session" or decision.by == "grant"
    return ("allow_session" if remembered else "allow_once"), decision.rule


def asker_for(gate: ApprovalGate, loop: asyncio.AbstractEventLoop) -> Asker:
    async def ask(name: str, port: int, text: str) -> tuple[str, str]:
        try:
            future = asyncio.run_coroutine_threadsafe(settle(gate, name, port, text), loop)
        except RuntimeError as exc:  # the supervisor's loop is closed: the session is ending
            return "deny", f"the session is ending ({exc})"
        return await asyncio.wrap_future(future)
    return ask


_network_gate: ApprovalGate | None = None  # the linked proxy's questions (one session per supervisor process)


def network_gate(gate: ApprovalGate, state_dir: Path) -> ApprovalGate:
    """A gate for connection questions: ``gate``'s approver, timeout and line, grants of its own."""
    grants_dir = state_dir / "network-grants"
    with contextlib.suppress(OSError):
        grants_dir.mkdir(mode=0o700, exist_ok=True)
    network = ApprovalGate(gate.policy, GrantStore(grants_dir), gate.send,
                           approver_connected=gate.approver_connected, timeout_seconds=gate.timeout_seconds)
    network.line = gate.line  # one question at a time, the tool calls' and the network's together
    return network


def answer(message: dict[str, Any]) -> None:
    """An ``approval_answer`` from the client, for a connection question (other request ids are ignored)."""
    if _network_gate is not None:
        _network_gate.answer(message)


def link(proxy: Proxy | None, gate: ApprovalGate, audit: AuditLog, session_id: str, state_dir: Path,
         loop: asyncio.AbstractEventLoop) -> None:
    """Connect ``proxy`` (None: no proxy runs) to the approver of ``gate`` and to ``audit``, on ``loop``."""
    global _network_gate
    if proxy is None:
        return
    if proxy.policy.ask:
        _network_gate = network_gate(gate, state_dir)
        proxy.asker = asker_for(_network_gate, loop)

    def record(attempt: dict[str, Any]) -> None:
        entry = network_entry(session_id=session_id, attempt=attempt, now=time.time())
        try:
            loop.call_soon_threadsafe(audit.record, entry)
        except RuntimeError:
            print(f"peon-supervisor: the audit line of a network attempt was dropped: {entry}", file=sys.stderr)

    proxy.on_attempt = record
