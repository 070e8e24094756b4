"""The approval gate: how the supervisor settles a call the policy judged, joining the policy, the
session's grants and the approver.

Promises:

* per call, in order: the policy's ``deny`` or ``allow`` (its :class:`~peon.approval.policy.Verdict`) stands;
  an ``ask`` is answered by a matching session grant, else by the session's approver; a prefix grant
  ("allow commands starting with ``npm test``") is decided by the policy itself, on the command's
  segments (:meth:`~peon.approval.policy.ApprovalPolicy.grant_prefixes`), and settles as ``grant``;
* a prefix answer the approver asked to save is written to the user's configuration as an allow rule
  (``save_rule``, never a project file); a failure to save is reported and the session grant still holds;
* the approver is asked one question at a time, in the order the calls reached :meth:`ApprovalGate.settle`
  (the approval line, a :class:`~peon.supervisor.turns.Turns` of one, joined before the first ``await``:
  calls settled in arrival order are asked in arrival order); the next question is sent only once the
  one before it was answered, timed out or withdrawn. A call at the head of the line looks for a grant
  again before it is asked (an ``allow_session`` answered meanwhile may cover it; a prefix grant by
  judging the call again without the file system's facts, where a missing fact is never a yes). An ask
  that came from a hook (``grants=False``) is put to the approver whatever the grants. Only calls that need
  a question wait in the line: the policy's verdict, or a grant, settles a call at once, whatever is
  being asked meanwhile;
* the gate fails closed: no approver connected, the request cannot be sent, no answer within
  ``limits.approval_timeout_seconds``, or a malformed answer — each is a denial saying so
  (``by`` = ``no-approver``, ``timeout``, ``approver-error``), never a hang;
* cancelling the call ends the wait at once (``by`` = ``cancelled``), in the line too: it leaves the
  line, and the call behind it moves up;
* an answer that arrives after its request was given up on is ignored: it cannot allow or grant
  anything, and the next request is unaffected.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Any
from collections.abc import Awaitable, Callable

from peon.approval.policy import (
    SCOPES, ApprovalPolicy, ApprovalRequest, DecidedBy, Decision, PolicyRule, Verdict, offered_scopes, parse_answer,
)
from peon.approval.rules import NO_FACTS, ShellFacts
from peon.supervisor.approval.grants import GrantStore
from peon.supervisor.turns import Turns

Send = Callable[[dict], Awaitable[Any]]
SaveRule = Callable[[PolicyRule], str]  # saves an allow rule to the user's configuration; says where


class ApprovalGate:
    def __init__(self, policy: ApprovalPolicy, grants: GrantStore, send: Send | None, *,
                 approver_connected: bool, timeout_seconds: float, save_rule: SaveRule | None = None):
        self.policy = policy
        self.grants = grants
        self.save_rule = save_rule
        policy.grant_prefixes(grants.prefix_rules())
        self.send = send
        self.approver_connected = approver_connected
        self.timeout_seconds = timeout_seconds
        self._pending: dict[str, asyncio.Future] = {}
        self.line = Turns(1)  # one question out at a time, first come first asked
        # What the approver is shown of a request: the session's redaction (the call runs as it was given).
        self.shown: Callable[[dict[str, Any]], Any] = lambda request: request

    async def decide(self, request: ApprovalRequest, cancelled: asyncio.Event,
                     facts: ShellFacts = NO_FACTS) -> Decision:
        return await self.settle(request, self.policy.evaluate(request, facts), cancelled)

    async def settle(self, request: ApprovalRequest, verdict: Verdict, cancelled: asyncio.Event, *,
                     grants: bool = True) -> Decision:
        """The decision for a call the policy already judged: its allow or deny stands; an ask is
        answered by a grant or the approver (by the approver only, without ``grants``: a hook asked)."""
        if verdict.granted:
            return Decision(True, "grant", verdict.rule, scope="prefix")
        if verdict.action != "ask":
            return Decision(verdict.action == "allow", "policy", verdict.rule)
        grant = self.grants.find(request) if grants else None
        if grant is not None:
            return Decision(True, "grant", f"{grant.describe()}; the policy asks: {verdict.rule}", scope=grant.scope)
        if not self.approver_connected or self.send is None:
            return Decision(False, "no-approver", f"{verdict.rule}, and this session has no approver")
        turn = self.line.join()  # before the first await: the line keeps the order calls came here in
        try:
            if not await turn.wait(cancelled):
                return Decision(False, "cancelled", f"{verdict.rule}; the call was cancelled while waiting "
                                                    "to be put to the approver")
            if grants:  # an answer given while this call waited may cover it
                grant = self.grants.find(request)
                if grant is not None:
                    return Decision(True, "grant", f"{grant.describe()}; the policy asks: {verdict.rule}",
                                    scope=grant.scope)
                if self.policy.prefix_grants:  # judged again without facts: a missing fact is never a yes
                    again = self.policy.evaluate(request, NO_FACTS)
                    if again.granted:
                        return Decision(True, "grant", again.rule, scope="prefix")
            return await self._ask(self.send, request, verdict.rule, cancelled)
        finally:
            turn.release()

    async def _ask(self, send: Send, request: ApprovalRequest, rule: str, cancelled: asyncio.Event) -> Decision:
        request_id = uuid.uuid4().hex
        answered = asyncio.get_running_loop().create_future()
        self._pending[request_id] = answered
        waiter = asyncio.create_task(cancelled.wait())
        try:
            try:
                await send({"op": "approval_request", "request_id": request_id, **self.shown(request.to_dict()),
                            "scopes": list(SCOPES), "timeout_seconds": self.timeout_seconds,
                            **({"prefix_scope": True} if "prefix" in offered_scopes(request) else {})})
            except OSError as exc:
                return Decision(False, "no-approver", f"{rule}, and the approver cannot be reached ({exc})")
            await asyncio.wait({answered, waiter}, timeout=self.timeout_seconds, return_when=asyncio.FIRST_COMPLETED)
            if cancelled.is_set():
                return Decision(False, "cancelled", f"{rule}; the call was cancelled while waiting for the approver")
            if not answered.done():
                return Decision(False, "timeout", f"{rule}, and the approver did not answer within "
                                f"limits.approval_timeout_seconds = {self.timeout_seconds:g}")
            answer = answered.result()
        finally:
            waiter.cancel()
            self._pending.pop(request_id, None)
        said = f"; the approver said {answer.reason!r}" if answer.reason else ""
        if answer.decision == "deny":
            by: DecidedBy = "approver-error" if answer.approver_error else "approver"
            return Decision(False, by, f"{rule}; the approver answered deny{said}", answer="deny")
        if answer.decision == "allow_session" and answer.scope not in offered_scopes(request):
            return Decision(False, "approver-error", f"{rule}; the approver answered with scope {answer.scope!r}, "
                            f"which this call was not offered", answer="deny")
        if answer.decision == "allow_session" and answer.scope == "prefix":
            grant = self.grants.add(request, "prefix", answer.reason, answer.prefix)
            self.policy.grant_prefixes(self.grants.prefix_rules())
            saved = self._save(request, answer.prefix) if answer.save else ""
            return Decision(True, "approver", f"{rule}; the approver answered allow_session: "
                            f"{grant.describe()}{saved}{said}", answer="allow_session", scope="prefix")
        if answer.decision == "allow_session":
            grant = self.grants.add(request, answer.scope, answer.reason)
            return Decision(True, "approver", f"{rule}; the approver answered allow_session: {grant.describe()}{said}",
                            answer="allow_session", scope=answer.scope)
        return Decision(True, "approver", f"{rule}; the approver answered allow_once{said}", answer="allow_once")

    def _save(self, request: ApprovalRequest, prefix: str) -> str:
        """Save a prefix answer as an allow rule in the user's configuration; what to tell of it."""
        if self.save_rule is None:
            return "; not saved: this session has no user configuration to save it to"
        rule = PolicyRule("allow", request.tool, request.risk.value, prefix)
        try:
            return f"; saved as an allow rule in {self.save_rule(rule)}"
        except (OSError, ValueError) as exc:
            print(f"peon-supervisor: cannot save the allow rule for {prefix!r}: {exc}", file=sys.stderr)
            return f"; not saved ({exc})"

    def answer(self, message: dict) -> None:
        """An ``approval_answer`` from the client; unknown or stale request ids are ignored."""
        answered = self._pending.get(str(message.get("request_id")))
        if answered is not None and not answered.done():
            answered.set_result(parse_answer(message))
