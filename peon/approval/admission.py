"""The pre-approval pipeline of one call, as one function: validate → prepare → request → verdict.

Promise: :func:`admit` turns a call as received (tool name, raw input) into an :class:`Admission`:
either a stable error (``unknown_tool``, ``invalid_input``, or what the tool's ``prepare`` refused) or the
validated input, the :class:`~peon.approval.policy.ApprovalRequest` an approver would be shown and the
policy's :class:`~peon.approval.policy.Verdict` — with no I/O of its own. The tool is asked once
(:meth:`~peon.core.tool.Tool.prepare`), and what it computed — a ``bash`` line's analysis included — is
what the policy judges: nothing is resolved or parsed twice. The only facts from outside come through the
``facts`` function it is given, and only for the questions the policy asks (most calls ask none), so
the whole decision is unit-testable without a supervisor. Asking an approver, auditing and running
the call are the supervisor's I/O (:mod:`peon.supervisor.calls`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from peon.core.errors import ErrorCode, PeonError, ToolError
from peon.approval.policy import ApprovalPolicy, ApprovalRequest, Verdict
from peon.approval.rules import NO_FACTS, Questions, ShellFacts
from peon.core.tool import SessionView, Tool
from peon.approval.validation import canonical_json, validate_input

FactsSource = Callable[[Questions], ShellFacts]


@dataclass(frozen=True)
class Admission:
    """What the pipeline made of a call: ``error`` set, or everything else set."""

    error: PeonError | None = None
    tool: Tool | None = None
    args: Mapping[str, Any] = field(default_factory=dict)
    request: ApprovalRequest | None = None
    verdict: Verdict | None = None
    timeout_seconds: float = 0.0


def admit(*, call_id: str, tool_name: str, raw_args: Any, tools: Mapping[str, Tool],
          schemas: Mapping[str, Mapping[str, Any]], view: SessionView, policy: ApprovalPolicy,
          facts: FactsSource = lambda questions: NO_FACTS) -> Admission:
    tool = tools.get(tool_name)
    if tool is None:
        return Admission(ToolError(ErrorCode.UNKNOWN_TOOL,
                                   f"no tool named {tool_name!r}; available: {', '.join(tools)}"))
    try:
        args = validate_input(tool.name, schemas[tool.name], raw_args)
        try:
            canonical = canonical_json(args)
        except ValueError as exc:
            raise ToolError(ErrorCode.INVALID_INPUT, f"input for {tool.name} is not valid JSON: {exc}") from None
        prepared = tool.prepare(args, view)
        request = ApprovalRequest(
            call_id=call_id, tool=tool.name, risk=prepared.risk, risk_reason=prepared.risk_reason,
            summary=prepared.summary, details=prepared.details, canonical_input=canonical,
            sandboxed=bool(prepared.sandboxed),
        )
        analysis = prepared.command_analysis
        asked = policy.questions(request, analysis)
        verdict = policy.evaluate(request, facts(asked) if asked else NO_FACTS, analysis)
        maximum = float(view.config.limits.max_timeout_seconds)
        ceiling = maximum
        if tool.keeps_output and isinstance(args, dict) and args.get("background"):
            ceiling = float(view.config.jobs.max_lifetime_seconds)  # a background job's deadline is its lifetime
        wanted = maximum if prepared.timeout_seconds is None else float(prepared.timeout_seconds)
        timeout = min(wanted, ceiling)
    except PeonError as exc:
        return Admission(exc, tool)
    return Admission(None, tool, args, request, verdict, timeout)
