"""Hooks without processes: which calls wake a hook, what it is sent (Claude Code's PreToolUse/PostToolUse
input), how its answer is read (exit 2 denies with stderr, permissionDecision, Peon's own form), that anything
else fails closed, and that a hook can only narrow the policy's verdict."""

from __future__ import annotations

import json

import pytest

from peon.approval.hooks import HookSpec, after_note, before_outcome, check_matcher, hook_input, narrow
from peon.approval.policy import ApprovalRequest, Verdict
from peon.core.tool import ToolRisk

HOOK = HookSpec("before_call", "Bash", ("guard.sh",), name="hooks[0]")


def request(command: str = "rm -rf build") -> ApprovalRequest:
    return ApprovalRequest(call_id="c1", tool="bash", risk=ToolRisk.PROCESS, risk_reason="runs a command",
                           summary=command, details={"segments": [{"words": command.split()}]},
                           canonical_input=json.dumps({"command": command}))


@pytest.mark.parametrize("matcher, tool, wakes", [
    ("", "bash", True), ("*", "write", True), ("Bash", "bash", True), ("bash", "bash", True),
    ("Edit|Write", "write", True), ("Edit|Write", "bash", False), ("Bas", "bash", False), ("mcp__.*", "read", False),
])
def test_a_matcher_wakes_the_hook_for_the_tools_it_names(matcher, tool, wakes):
    assert HookSpec("before_call", matcher).matches(tool) is wakes


def test_a_matcher_that_is_not_a_regular_expression_is_refused():
    with pytest.raises(ValueError):
        check_matcher("Bash(")


def test_a_before_hook_is_sent_claude_codes_pretooluse_input_and_peons_facts():
    sent = hook_input("before_call", request(), session_id="s1", workspace="/w",
                      verdict=Verdict("ask", "approval.process"))
    assert (sent["hook_event_name"], sent["tool_name"], sent["tool_input"], sent["tool_use_id"], sent["cwd"],
            sent["session_id"]) == ("PreToolUse", "Bash", {"command": "rm -rf build"}, "c1", "/w", "s1")
    peon = sent["peon"]
    assert (peon["tool"], peon["risk"], peon["workspace"], peon["policy"]["decision"]) == ("bash", "process", "/w",
                                                                                         "ask")
    assert peon["shell"] == [{"words": ["rm", "-rf", "build"]}]
    json.dumps(sent)


def test_a_file_tools_input_also_names_the_file_as_claude_code_does():
    write = ApprovalRequest(call_id="c2", tool="write", risk=ToolRisk.FILESYSTEM, risk_reason="writes",
                            summary="write src/a.py", details={}, canonical_input=json.dumps({"path": "src/a.py",
                                                                                              "content": "x"}))
    sent = hook_input("before_call", write, session_id="s", workspace="/w", verdict=Verdict("ask", "x"))
    assert sent["tool_name"] == "Write"
    assert sent["tool_input"] == {"path": "src/a.py", "content": "x", "file_path": "/w/src/a.py"}
    assert "file_path" not in hook_input("before_call", request(), session_id="s", workspace="/w")["tool_input"]


def test_an_after_hook_is_sent_the_result_bounded():
    sent = hook_input("after_call", request("ls"), session_id="s", workspace="/w",
                      reply={"ok": True, "value": {"stdout": "x" * 100_000}})
    assert sent["hook_event_name"] == "PostToolUse" and sent["tool_response"]["truncated"] is True
    failed = hook_input("after_call", request("ls"), session_id="s", workspace="/w",
                        reply={"ok": False, "error": {"code": "timeout"}})
    assert failed["tool_response"] == {"error": {"code": "timeout"}}


@pytest.mark.parametrize("code, stdout, stderr, kind, reason", [
    (2, b"", b"rm -rf is not allowed here\n", "deny", "rm -rf is not allowed here"),
    (0, b"", b"", "none", ""),
    (0, b"checked\n", b"", "none", ""),
    (0, b'{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", '
        b'"permissionDecisionReason": "no"}}', b"", "deny", "no"),
    (0, b'{"hookSpecificOutput": {"permissionDecision": "allow"}}', b"", "allow", ""),
    (0, b'{"hookSpecificOutput": {"permissionDecision": "defer"}}', b"", "ask", ""),
    (0, b'{"hookSpecificOutput": {"permissionDecision": "ask", "permissionDecisionReason": "look"}}', b"", "ask",
     "look"),
    (0, b'{"decision": "block", "reason": "legacy"}', b"", "deny", "legacy"),
    (0, b'{"decision": "approve"}', b"", "allow", ""),
    (0, b'{"decision": "deny", "reason": "peon form"}', b"", "deny", "peon form"),
    (0, b'{"continue": false, "stopReason": "stop"}', b"", "deny", "stop"),
    (0, b'{"suppressOutput": true}', b"", "none", ""),
])
def test_answers_are_read_as_claude_code_reads_them(code, stdout, stderr, kind, reason):
    outcome = before_outcome(HOOK, code, stdout, stderr)
    assert (outcome.kind, outcome.reason) == (kind, reason)


@pytest.mark.parametrize("code, stdout, why", [
    (1, b"", "exited with status 1"), (127, b"", "status 127"), (-9, b"", "status -9"),
    (0, b'{"hookSpecificOutput": {"permissionDecision": "maybe"}}', "is not allow, deny or ask"),
    (0, b'{"decision": 3}', "is not allow, deny or ask"),
    (0, b'{"hookSpecificOutput": "deny"}', "not an object"),
    (0, b'{"decision": "allow"', "starts as JSON and is not"),
])
def test_a_hook_that_fails_or_answers_nonsense_denies(code, stdout, why):
    outcome = before_outcome(HOOK, code, stdout, b"boom")
    assert outcome.kind == "deny" and why in outcome.reason and "hooks[0]" in outcome.hook


@pytest.mark.parametrize("policy, answers, result", [
    ("allow", ["deny"], "deny"), ("allow", ["ask"], "ask"), ("ask", ["allow"], "ask"), ("deny", ["allow"], "deny"),
    ("allow", ["allow", "none"], "allow"), ("ask", ["ask", "deny", "allow"], "deny"),
])
def test_hooks_only_narrow_the_policys_verdict(policy, answers, result):
    from peon.approval.hooks import Outcome
    verdict, decided = narrow(Verdict(policy, "approval.process"), [Outcome(a, "why", "hooks[0]") for a in answers])
    assert verdict.action == result
    assert (decided is not None) == (result != policy)
    if decided is not None:
        assert "hooks[0]" in verdict.rule and "approval.process" in verdict.rule


@pytest.mark.parametrize("code, stdout, stderr, note, problem", [
    (0, b'{"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "lint: 2 warnings"}}', b"",
     "lint: 2 warnings", ""),
    (0, b'{"decision": "block", "reason": "tests failed"}', b"", "tests failed", ""),
    (0, b'{"note": "peon note"}', b"", "peon note", ""),
    (2, b"", b"from stderr", "from stderr", ""),
    (0, b"plain", b"", "", ""),
    (1, b"", b"crash", "", "exited with status 1: crash"),
    (0, b"{broken", b"", "", "starts as JSON"),
])
def test_an_after_hook_gives_a_note_or_a_problem(code, stdout, stderr, note, problem):
    got_note, got_problem = after_note(code, stdout, stderr)
    assert got_note == note and problem in got_problem and bool(got_problem) == bool(problem)


def test_notes_reach_the_agent_through_the_result_and_mcp():
    from peon.client.result import ToolResult
    from peon.mcp.tools import call_result

    result = ToolResult.from_message("c1", "bash", {"ok": True, "value": {"output": "x"}, "notes": ["hooks[0]: n"]})
    assert result.notes == ("hooks[0]: n",) and result.to_dict()["notes"] == ["hooks[0]: n"]
    out = call_result(result, "2025-06-18")
    assert out["content"][-1] == {"type": "text", "text": "Note from a hook: hooks[0]: n"}
    assert out["structuredContent"] == {"output": "x"}
    plain = ToolResult.from_message("c1", "bash", {"ok": True, "value": {}})
    assert plain.notes == () and "notes" not in plain.to_dict()
    assert len(call_result(plain, "2025-06-18")["content"]) == 1
