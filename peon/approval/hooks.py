"""Tool-call hooks, the pure part: which hooks a call wakes, what they are sent, and what their answers mean.

Promises:

* a hook is configured by the user only (``[[hooks]]``; a project file that declares one is refused by the
  configuration loader); :func:`hook_specs` reads the resolved table, :meth:`HookSpec.matches` says whether
  a call wakes it — ``matcher`` is Claude Code's: empty or ``*`` matches every tool, else a regular
  expression matched whole against Peon's tool name or Claude Code's name for it (``Bash``, ``Write``);
* what a hook is sent is Claude Code's hook input (``hook_event_name`` ``PreToolUse`` / ``PostToolUse``,
  ``session_id``, ``cwd``, ``tool_name``, ``tool_input``, ``tool_use_id``, and ``tool_response`` after the
  call; a file tool's input also carries Claude Code's absolute ``file_path``), so a script written for
  Claude Code reads it unchanged, plus a ``peon`` object: the event, the
  tool, its risk and why, the summary, the resolved details (paths, the shell analysis of a ``bash`` line),
  whether it runs sandboxed, the policy's verdict, the session and the workspace;
* a before-hook's answer (:func:`before_outcome`) is read as Claude Code reads it — exit code 2 is a denial
  with stderr as the reason; exit 0 with ``hookSpecificOutput.permissionDecision`` (``allow`` / ``deny`` /
  ``ask``; ``defer`` is ``ask``) or the older ``decision`` (``approve`` / ``block``) — and as Peon's own
  ``{"decision": "allow" | "deny" | "ask", "reason": …}``; exit 0 with nothing or plain text is no
  opinion. Everything else fails closed: another exit code, a failure to run, a timeout, output that
  starts as JSON and is not, or a decision that is not one of those — each is a denial saying so;
* :func:`narrow` applies the answers to the policy's verdict and can only make it stricter (allow < ask <
  deny): a hook's ``allow`` never allows what the policy asks about or denies;
* an after-hook's answer (:func:`after_note`) is a note for the agent (``additionalContext``, a ``block``
  decision's reason, or Peon's ``note``), bounded; its failure is reported, never a reason to lose the
  call's result.

The I/O — running the program or calling the URL, under a deadline — is :mod:`peon.supervisor.hooks`.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from peon.approval.policy import STRICTNESS, ApprovalRequest, Verdict
from peon.core.text import shorten

HookEvent = Literal["before_call", "after_call"]
CLAUDE_EVENTS: dict[str, str] = {"before_call": "PreToolUse", "after_call": "PostToolUse"}
# Claude Code's names for the tools Peon has an equivalent of, so a matcher or a script written for it works.
CLAUDE_TOOL_NAMES: dict[str, str] = {"bash": "Bash", "read": "Read", "write": "Write", "edit": "Edit",
                                     "grep": "Grep", "glob": "Glob", "apply_patch": "Edit"}
# Peon's tools whose Claude Code equivalent names the file ``file_path`` (Read, Write, Edit/MultiEdit).
CLAUDE_FILE_PATH_TOOLS = frozenset({"read", "write", "edit"})
MAX_REASON_CHARS = 1000
MAX_NOTE_CHARS = 4000
MAX_RESPONSE_CHARS = 64 * 1024  # of the call's result, as sent to an after-hook

OutcomeKind = Literal["allow", "ask", "deny", "none"]


@dataclass(frozen=True)
class HookSpec:
    """One ``[[hooks]]`` entry of the user's configuration."""

    event: HookEvent
    matcher: str = ""
    command: tuple[str, ...] = ()
    url: str = ""
    timeout_seconds: float = 10.0
    name: str = "hooks"  # how to find it: "hooks[0]"

    def matches(self, tool: str) -> bool:
        if self.matcher in ("", "*"):
            return True
        try:
            pattern = re.compile(self.matcher)
        except re.error:
            return True  # checked when loaded; a pattern that cannot compile wakes the hook (it then decides)
        return any(pattern.fullmatch(name) for name in (tool, CLAUDE_TOOL_NAMES.get(tool, tool)))

    def describe(self) -> str:
        target = self.url if self.url else " ".join(self.command)
        return f"{self.name} ({self.event}: {shorten(target, 120)})"


def hook_specs(hooks: Iterable[Any]) -> tuple[HookSpec, ...]:
    """The resolved ``[[hooks]]`` table (the client's model or its plain view) as :class:`HookSpec` s."""
    return tuple(HookSpec(h.event, h.matcher, tuple(h.command), h.url, float(h.timeout_seconds), f"hooks[{i}]")
                 for i, h in enumerate(hooks))


def check_matcher(matcher: str) -> str:
    """A configured matcher; ``ValueError`` when it is not a regular expression."""
    try:
        re.compile(matcher)
    except re.error as exc:
        raise ValueError(f"is not a regular expression: {exc}") from None
    return matcher


# -- what a hook is sent -------------------------------------------------------------------------------


def _input_of(request: ApprovalRequest, workspace: str) -> Any:
    """The call's input, plus Claude Code's name for a file tool's path (``file_path``, absolute: the typed
    path joined to the workspace, not resolved — the resolved one is in ``peon.details``)."""
    try:
        sent = json.loads(request.canonical_input) if request.canonical_input else {}
    except ValueError:
        return {}
    if request.tool in CLAUDE_FILE_PATH_TOOLS and isinstance(sent, dict) and isinstance(sent.get("path"), str):
        sent.setdefault("file_path", posixpath.join(workspace, sent["path"]))
    return sent


def hook_input(event: HookEvent, request: ApprovalRequest, *, session_id: str, workspace: str,
               verdict: Verdict | None = None, reply: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a hook of ``event`` is sent about ``request`` (see the module's promise)."""
    details = request.details if isinstance(request.details, Mapping) else {}
    peon: dict[str, Any] = {
        "event": event, "tool": request.tool, "risk": request.risk.value, "risk_reason": request.risk_reason,
        "summary": request.summary, "details": dict(details), "shell": details.get("segments"),
        "sandboxed": request.sandboxed, "session_id": session_id, "workspace": workspace,
    }
    if verdict is not None:
        peon["policy"] = {"decision": verdict.action, "rule": verdict.rule}
    sent: dict[str, Any] = {
        "hook_event_name": CLAUDE_EVENTS[event], "session_id": session_id, "cwd": workspace,
        "permission_mode": "default", "tool_name": CLAUDE_TOOL_NAMES.get(request.tool, request.tool),
        "tool_input": _input_of(request, workspace), "tool_use_id": request.call_id, "peon": peon,
    }
    if reply is not None:
        response = reply.get("value") if reply.get("ok") else {"error": reply.get("error")}
        text = json.dumps(response, ensure_ascii=False, default=str)
        sent["tool_response"] = response if len(text) <= MAX_RESPONSE_CHARS else {
            "truncated": True, "text": text[:MAX_RESPONSE_CHARS]}
    return sent


# -- what a hook answered --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """A before-hook's answer: ``none`` is no opinion (the policy's verdict stands)."""

    kind: OutcomeKind
    reason: str = ""
    hook: str = ""  # HookSpec.describe() of the hook that gave it


def failed(hook: HookSpec, why: str) -> Outcome:
    """A before-hook that could not answer: a denial (fail closed)."""
    return Outcome("deny", f"the hook failed, so the call is denied: {shorten(why, MAX_REASON_CHARS)}",
                   hook.describe())


_PERMISSIONS: dict[str, OutcomeKind] = {"allow": "allow", "deny": "deny", "ask": "ask", "defer": "ask"}
_DECISIONS: dict[str, OutcomeKind] = {"allow": "allow", "approve": "allow", "deny": "deny", "block": "deny",
                                      "ask": "ask"}


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace").strip()


def _json_object(stdout: str) -> tuple[dict[str, Any] | None, str | None]:
    """The JSON object a hook printed, None for plain text or nothing; the second: why it is broken."""
    if not stdout.startswith("{"):
        return None, None
    try:
        value = json.loads(stdout)
    except (ValueError, RecursionError) as exc:
        return None, f"its output starts as JSON and is not ({exc})"
    return (value, None) if isinstance(value, dict) else (None, "its output is not a JSON object")


def before_outcome(hook: HookSpec, exit_code: int, stdout: bytes, stderr: bytes) -> Outcome:
    """A before-hook's answer from how its program ended (or an HTTP hook's, as exit 0 and its body)."""
    name = hook.describe()
    err = shorten(_text(stderr), MAX_REASON_CHARS)
    if exit_code == 2:
        return Outcome("deny", err or "the hook exited with status 2", name)
    if exit_code != 0:
        return failed(hook, f"it exited with status {exit_code}" + (f": {err}" if err else ""))
    data, broken = _json_object(_text(stdout))
    if broken is not None:
        return failed(hook, broken)
    if data is None:
        return Outcome("none", "", name)
    specific = data.get("hookSpecificOutput")
    if specific is not None and not isinstance(specific, dict):
        return failed(hook, "hookSpecificOutput is not an object")
    specific = specific or {}
    if "permissionDecision" in specific:
        kind = _PERMISSIONS.get(specific["permissionDecision"]) if isinstance(specific["permissionDecision"],
                                                                               str) else None
        reason = specific.get("permissionDecisionReason")
    elif "decision" in data:
        kind = _DECISIONS.get(data["decision"]) if isinstance(data["decision"], str) else None
        reason = data.get("reason")
    elif data.get("continue") is False:
        kind, reason = "deny", data.get("stopReason") or "the hook answered continue = false"
    else:
        return Outcome("none", "", name)
    if kind is None:
        given = json.dumps(specific.get("permissionDecision", data.get("decision")))
        return failed(hook, f"its decision {shorten(given, 80)} is not allow, deny or ask")
    said = shorten(str(reason), MAX_REASON_CHARS) if reason is not None else ""
    return Outcome(kind, said or (err if kind == "deny" else ""), name)


def after_note(exit_code: int, stdout: bytes, stderr: bytes) -> tuple[str, str]:
    """(note for the agent, problem to log) from an after-hook; either may be empty."""
    err = shorten(_text(stderr), MAX_REASON_CHARS)
    if exit_code == 2:  # Claude Code shows a PostToolUse hook's stderr to the model
        return shorten(err, MAX_NOTE_CHARS), ""
    if exit_code != 0:
        return "", f"it exited with status {exit_code}" + (f": {err}" if err else "")
    data, broken = _json_object(_text(stdout))
    if broken is not None:
        return "", broken
    if data is None:
        return "", ""
    specific = data.get("hookSpecificOutput")
    parts = []
    if isinstance(specific, dict) and isinstance(specific.get("additionalContext"), str):
        parts.append(specific["additionalContext"])
    if data.get("decision") == "block" and isinstance(data.get("reason"), str):
        parts.append(data["reason"])
    if isinstance(data.get("note"), str):
        parts.append(data["note"])
    return shorten("\n".join(p for p in parts if p.strip()), MAX_NOTE_CHARS), ""


def narrow(verdict: Verdict, outcomes: Iterable[Outcome]) -> tuple[Verdict, Outcome | None]:
    """The verdict after the before-hooks: the strictest of the policy's and theirs, never looser; and the
    outcome that decided, when a hook made it stricter."""
    decided: Outcome | None = None
    for outcome in outcomes:
        if outcome.kind == "none" or STRICTNESS[outcome.kind] <= STRICTNESS[verdict.action]:
            continue
        said = f": {outcome.reason}" if outcome.reason else ""
        verdict = Verdict(outcome.kind, f"the hook {outcome.hook} answered {outcome.kind}{said}; before it, "
                                        f"{verdict.rule}")
        decided = outcome
    return verdict, decided
