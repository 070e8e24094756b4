"""The approval policy as pure functions: command matching, rule order, floors, answers. No processes
except real bash, used to check that the matcher splits words exactly as bash does."""

from __future__ import annotations

import json
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peon.config import load_config
from peon.tool import ToolRisk
from peon.policy import (
    ApprovalPolicy, ApprovalRequest, PolicyRule, command_words, normalize_workspace_path, parse_answer, path_under,
)

DEFAULTS = {"read_only": "allow", "filesystem": "ask", "process": "ask", "delegate": "ask"}


def request(tool="bash", risk=ToolRisk.PROCESS, **args) -> ApprovalRequest:
    return ApprovalRequest(call_id="c1", tool=tool, risk=risk, risk_reason="test", summary="s",
                           canonical_input=json.dumps(args, sort_keys=True))


def bash_allow(prefix: str) -> ApprovalPolicy:
    return ApprovalPolicy(DEFAULTS, [PolicyRule("allow", tool="bash", command_prefix=prefix, name="r0")])


# -- simple commands -------------------------------------------------------------------------------

SMUGGLED = [
    "git status; rm -rf /", "git status && rm -rf /", "git status || rm", "git status | sh", "git status &",
    "git status `rm -rf /`", "git status $(rm -rf /)", "git status $HOME", "git status\nrm -rf /",
    "git status\rrm", "git status > /etc/passwd", "git status < /etc/shadow", "git status 2>&1",
    "git status # comment", "git status {a,b}", "git status *", "git status ?", "git status [ab]",
    "git status ~", "git status !!", "git status 'unbalanced", 'git status "unbalanced', "git status \\\nrm",
    "git status\x00rm", "git status\u2028rm", "git status\x1b[2Jrm", "git status <(rm)", "(git status)",
    "git status\x0brm", "",
]


@pytest.mark.parametrize("command", SMUGGLED)
def test_commands_that_could_do_more_than_one_thing_match_no_prefix(command):
    assert command_words(command) is None
    assert bash_allow("git status").evaluate(request(command=command)).action == "ask"


@pytest.mark.parametrize("command, matches", [
    ("git status", True),
    ("git status -s --branch", True),
    ("  git   status\t-s ", True),
    ("'git' \"status\"", True),  # bash runs the same words
    ("git statusx", False),  # word boundary
    ("git status-foo", False),
    ("git stat", False),
    ("git", False),
    ("FOO=1 git status", False),  # an assignment changes what runs
    ("sudo git status", False),
    ("git -C /etc status", False),
    ("git 'status; rm'", False),
])
def test_prefix_matches_whole_leading_words(command, matches):
    action = bash_allow("git status").evaluate(request(command=command)).action
    assert action == ("allow" if matches else "ask")


SIMPLE_ALPHABET = st.text(alphabet=st.sampled_from(list("ab-_./:=,+@%'\" \t") + ["é", "1", "\u00a0"]), max_size=24)


@settings(max_examples=150, deadline=None)
@given(SIMPLE_ALPHABET)
def test_accepted_commands_split_into_exactly_the_words_bash_sees(command):
    words = command_words(command)
    if words is None:
        return
    # `set -- <command>` makes bash split and unquote the text exactly as for a simple command.
    script = f'set -- {command}\nprintf "%s\\0" "$@"'
    out = subprocess.run(["/bin/bash", "--norc", "--noprofile", "-c", script], capture_output=True, timeout=10)
    assert out.returncode == 0, out.stderr
    bash_words = out.stdout.decode().split("\0")[:-1]
    assert bash_words == words


# -- paths -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path, under", [
    ("src", True), ("src/a.py", True), ("./src/a.py", True), ("src//b/../a.py", True),
    ("src2/a.py", False), ("srcx", False), ("src/../.env", False), ("../src/a.py", False),
    ("/src/a.py", False), ("", False), ("src/\0", False),
])
def test_path_prefix_compares_whole_components_after_lexical_normalisation(path, under):
    assert path_under(path, "src") is under


def test_normalize_workspace_path():
    assert normalize_workspace_path("a/./b/../c") == "a/c"
    assert normalize_workspace_path(".") == "."
    assert normalize_workspace_path("a/../..") is None


# -- evaluation order ------------------------------------------------------------------------------


def test_per_risk_defaults():
    policy = ApprovalPolicy(DEFAULTS)
    assert policy.evaluate(request("read", ToolRisk.READ_ONLY, path="a")).action == "allow"
    for risk in (ToolRisk.FILESYSTEM, ToolRisk.PROCESS, ToolRisk.DELEGATE):
        verdict = policy.evaluate(request("t", risk))
        assert verdict.action == "ask"
        assert verdict.rule == f'approval.{risk.value} = "ask"'


def test_strictest_matching_trusted_rule_replaces_the_per_risk_policy():
    rules = [PolicyRule("allow", tool="bash", command_prefix="git", name="r0"),
             PolicyRule("deny", tool="bash", command_prefix="git push", name="r1")]
    policy = ApprovalPolicy(DEFAULTS, rules)
    assert policy.evaluate(request(command="git log")).action == "allow"
    verdict = policy.evaluate(request(command="git push origin"))
    assert verdict.action == "deny" and verdict.rule.startswith("r1 ")
    assert policy.evaluate(request(command="ls")).action == "ask"


def test_tighten_only_rules_never_loosen_and_always_tighten():
    loosen = ApprovalPolicy(DEFAULTS, [PolicyRule("allow", tool="bash", tighten_only=True, name="p0")])
    assert loosen.evaluate(request(command="ls")).action == "ask"
    floor = ApprovalPolicy({**DEFAULTS, "process": "allow"},
                           [PolicyRule("allow", tool="bash", command_prefix="git", name="u0"),
                            PolicyRule("ask", tool="bash", tighten_only=True, name="p0")])
    verdict = floor.evaluate(request(command="git status"))
    assert verdict.action == "ask" and verdict.rule.startswith("p0 ")
    deny = ApprovalPolicy(DEFAULTS, [PolicyRule("deny", risk="process", tighten_only=True, name="p1")])
    assert deny.evaluate(request(command="ls")).action == "deny"


def test_rule_restricted_to_a_risk_does_not_cover_elevated_calls():
    policy = ApprovalPolicy(DEFAULTS, [PolicyRule("allow", tool="read", risk="filesystem", path_prefix="docs", name="r")])
    assert policy.evaluate(request("read", ToolRisk.FILESYSTEM, path="docs/.env")).action == "allow"
    assert policy.evaluate(request("read", ToolRisk.FILESYSTEM, path=".env")).action == "ask"
    narrow = ApprovalPolicy(DEFAULTS, [PolicyRule("allow", tool="read", risk="read_only", name="r")])
    assert narrow.evaluate(request("read", ToolRisk.FILESYSTEM, path=".env")).action == "ask"


def test_policy_from_loaded_configuration_names_files(tmp_path):
    user = tmp_path / "user.toml"
    user.write_text('[[approval.rules]]\ntool = "bash"\ncommand_prefix = "make test"\ndecision = "allow"\n')
    loaded = load_config(env={"PEON_CONFIG": str(user)})
    policy = ApprovalPolicy.from_loaded(loaded)
    verdict = policy.evaluate(request(command="make test -j4"))
    assert verdict.action == "allow"
    assert verdict.rule == f'approval.rules[0] in {user} (tool = "bash", command_prefix = "make test") says \'allow\''
    assert policy.evaluate(request(command="make install")).rule == 'approval.process = "ask" in defaults'


# -- answers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("message, decision, scope, error", [
    ({"decision": "allow_once"}, "allow_once", "call", False),
    ({"decision": "allow_session"}, "allow_session", "call", False),
    ({"decision": "allow_session", "scope": "tool"}, "allow_session", "tool", False),
    ({"decision": "allow_session", "scope": "risk", "reason": "ok"}, "allow_session", "risk", False),
    ({"decision": "deny", "reason": "no"}, "deny", "call", False),
    ({"decision": "yes"}, "deny", "call", True),
    ({}, "deny", "call", True),
    ({"decision": "allow_session", "scope": "everything"}, "deny", "call", True),
    ({"decision": "deny", "approver_error": True}, "deny", "call", True),
])
def test_answers_are_parsed_and_nonsense_is_a_denial(message, decision, scope, error):
    answer = parse_answer(message)
    assert (answer.decision, answer.scope, answer.approver_error) == (decision, scope, error)


def test_long_reasons_are_bounded():
    assert len(parse_answer({"decision": "deny", "reason": "x" * 10_000}).reason) == 500
