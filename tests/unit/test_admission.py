"""The pre-approval pipeline as one pure function: validate → rate → request → verdict, without a
supervisor or any process; the only facts from outside come through the function it is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from peon.approval.admission import admit
from peon.client.config import load_config
from peon.core.config_view import ResolvedConfig
from peon.approval.policy import ApprovalPolicy, ApprovalRequest
from peon.approval.rules import NO_FACTS, GitFacts, Questions, ShellFacts
from peon.core.tool import RiskAssessment, SessionView, Tool, ToolRisk
from peon.tools import BUILTIN_TOOLS


class SandboxedTool(Tool):
    name = "boxed"
    description = "a sandboxed process call"
    risk = ToolRisk.PROCESS
    input_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def assess_risk(self, args, session):
        return RiskAssessment(ToolRisk.PROCESS, "in the sandbox", sandboxed=True)

    def approval_summary(self, args):
        return "boxed"

    async def execute(self, args, ctx):
        return {}


def pipeline(tmp_path: Path, config: dict):
    loaded = load_config(config, env={"XDG_CONFIG_HOME": str(tmp_path / "none")})
    resolved = ResolvedConfig(loaded.to_wire())
    view = SessionView(workspace=tmp_path, config=resolved.config, env={"PATH": "/usr/bin:/bin"})
    tools = {tool.name: tool for tool in (*(cls() for cls in BUILTIN_TOOLS), SandboxedTool())}
    schemas = {name: tool.schema_for(view) for name, tool in tools.items()}
    policy = ApprovalPolicy.from_loaded(resolved)
    asked: list[Questions] = []

    def run(tool_name, raw_args, facts=NO_FACTS):
        def source(questions):
            asked.append(questions)
            return facts

        return admit(call_id="c1", tool_name=tool_name, raw_args=raw_args, tools=tools, schemas=schemas, view=view,
                     policy=policy, facts=source)

    return run, asked


def test_unknown_tools_and_invalid_input_are_stable_errors(tmp_path):
    run, asked = pipeline(tmp_path, {})
    unknown = run("nope", {})
    assert unknown.error.code.value == "unknown_tool"
    assert "available: bash, read, write, read_skill" in unknown.error.message
    invalid = run("bash", {"command": 5})
    assert invalid.error.code.value == "invalid_input" and invalid.request is None
    assert run("bash", ["ls"]).error.code.value == "invalid_input"
    assert asked == []


def test_a_call_becomes_a_request_and_a_verdict(tmp_path):
    run, asked = pipeline(tmp_path, {"limits": {"max_timeout_seconds": 30.0}})
    admission = run("bash", {"command": "ls; rm -rf x", "timeout_seconds": 99})
    assert admission.error is None and admission.tool.name == "bash"
    request = admission.request
    assert request.canonical_input == '{"command":"ls; rm -rf x","timeout_seconds":99}'
    assert [s["words"] for s in request.details["segments"]] == [["ls"], ["rm", "-rf", "x"]]
    assert admission.verdict.action == "ask" and admission.verdict.rule == 'approval.process = "ask" in defaults'
    assert admission.timeout_seconds == 30.0
    assert asked == []  # no allow rule for commands: nothing to look up


def test_facts_are_asked_only_for_what_an_allow_rule_needs(tmp_path):
    rules = [{"tool": "bash", "command_prefix": "git status", "decision": "allow"}]
    run, asked = pipeline(tmp_path, {"approval": {"rules": rules}})
    clean = ShellFacts(git={".": GitFacts()})
    assert run("bash", {"command": "git status"}, clean).verdict.action == "allow"
    assert asked == [Questions(git_cwds=frozenset({"."}))]
    flagged = ShellFacts(git={".": GitFacts(program_keys=("core.fsmonitor in .git/config",))})
    verdict = run("bash", {"command": "git status"}, flagged).verdict
    assert verdict.action == "ask" and "core.fsmonitor" in verdict.rule
    (tmp_path / "x").write_text("x")  # read rates the file its path resolves to
    assert run("read", {"path": "x"}).error is None
    assert len(asked) == 2  # a read asks nothing


def test_sandboxed_calls_carry_the_flag_to_the_request_and_the_policy(tmp_path):
    run, _ = pipeline(tmp_path, {"approval": {"process_sandboxed": "allow"}})
    admission = run("boxed", {})
    assert admission.request.sandboxed is True
    assert admission.verdict.action == "allow" and admission.verdict.rule.startswith("approval.process_sandboxed")
    assert run("bash", {"command": "true"}).request.sandboxed is False


@pytest.mark.parametrize("risk_setting, expected", [("deny", "deny"), ("allow", "allow")])
def test_per_risk_settings_decide_reads_of_secret_like_paths(tmp_path, risk_setting, expected):
    run, _ = pipeline(tmp_path, {"approval": {"filesystem": risk_setting}})
    (tmp_path / ".env").write_text("TOKEN=1\n")  # read rates the file its path resolves to
    admission = run("read", {"path": ".env"})
    assert admission.request.risk is ToolRisk.FILESYSTEM and admission.verdict.action == expected


def test_a_bash_line_is_parsed_once_per_call(tmp_path, monkeypatch):
    """The analysis the tool's prepare makes is the one the approver is shown and the one the policy's
    questions and verdict judge (allow, ask and deny rules for commands all apply here)."""
    from peon.approval.shell import walk

    parsed: list[str] = []
    parse_tree = walk.parse_tree
    monkeypatch.setattr(walk, "parse_tree", lambda command: parsed.append(command) or parse_tree(command))
    rules = [{"tool": "bash", "command_prefix": "git status", "decision": "allow"},
             {"tool": "bash", "command_prefix": "make", "decision": "allow"},
             {"tool": "bash", "command_prefix": "git push", "decision": "deny"},
             {"tool": "bash", "command_prefix": "rm", "decision": "ask"}]
    run, asked = pipeline(tmp_path, {"approval": {"rules": rules}})
    command = "git status && make test > out.txt"
    clean = ShellFacts(git={".": GitFacts()}, paths_inside={"out.txt": True})
    admission = run("bash", {"command": command}, clean)
    assert parsed == [command]
    assert asked == [Questions(paths=frozenset({"out.txt"}), git_cwds=frozenset({"."}))]
    assert admission.verdict.action == "allow", admission.verdict
    assert [s["words"] for s in admission.request.details["segments"]] == [["git", "status"], ["make", "test"]]


def test_the_policy_analyses_a_line_itself_when_no_analysis_of_it_is_carried(tmp_path, monkeypatch):
    """A tool with a ``command`` input that made no analysis, or one of another line, is judged on the
    policy's own analysis of the line: a carried analysis never stands in for another command."""
    from peon.approval.shell import analyze, walk

    policy = ApprovalPolicy.from_loaded(ResolvedConfig(load_config(
        {"approval": {"rules": [{"tool": "bash", "command_prefix": "rm", "decision": "deny"}]}},
        env={"XDG_CONFIG_HOME": str(tmp_path / "none")}).to_wire()))
    request = ApprovalRequest(call_id="c1", tool="bash", risk=ToolRisk.PROCESS, risk_reason="r", summary="s",
                              canonical_input='{"command":"rm -rf x"}')
    parsed: list[str] = []
    parse_tree = walk.parse_tree
    monkeypatch.setattr(walk, "parse_tree", lambda command: parsed.append(command) or parse_tree(command))
    assert policy.evaluate(request, NO_FACTS, analyze("ls")).action == "deny"
    assert parsed == ["ls", "rm -rf x"]
    assert policy.evaluate(request, NO_FACTS, analyze("rm -rf x")).action == "deny"
    assert parsed == ["ls", "rm -rf x", "rm -rf x"]
