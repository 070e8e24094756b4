"""Prefix approvals without a session: "allow commands starting with `npm test`" is decided on the analysed
segments exactly as an allow rule (every part must start with a granted prefix), answers carrying a prefix are
checked, the grant survives a restart, and saving it writes one allow rule to the user's file atomically."""

from __future__ import annotations

import asyncio
import json
import tomllib

import pytest

from peon.approval.policy import (
    ApprovalPolicy, ApprovalRequest, PolicyRule, offered_scopes, parse_answer,
)
from peon.approval.rules import NO_FACTS
from peon.core.tool import ToolRisk
from peon.supervisor.approval.gate import ApprovalGate
from peon.supervisor.approval.grants import GrantStore
from peon.supervisor.approval.saved_rules import save_allow_rule, user_config_file

DEFAULTS = {"read_only": "allow", "filesystem": "ask", "process": "ask", "delegate": "ask"}


def request(command: str | None = "npm test", tool: str = "bash", risk: ToolRisk = ToolRisk.PROCESS,
            call_id: str = "c1") -> ApprovalRequest:
    args = {} if command is None else {"command": command}
    return ApprovalRequest(call_id=call_id, tool=tool, risk=risk, risk_reason="test", summary="s",
                           canonical_input=json.dumps(args, sort_keys=True))


def granted(*prefixes: str, rules: tuple[PolicyRule, ...] = (), per_risk=DEFAULTS) -> ApprovalPolicy:
    policy = ApprovalPolicy(per_risk, rules)
    policy.grant_prefixes(PolicyRule("allow", "bash", "process", p, name=f"grant {p}") for p in prefixes)
    return policy


@pytest.mark.parametrize("command", ["npm test", "npm test -- --watch=false", "npm test && npm test -- -u",
                                     "/usr/bin/npm test"])
def test_a_prefix_grant_allows_lines_whose_every_part_starts_with_it(command):
    policy = granted("npm test")
    verdict = policy.evaluate(request(command), NO_FACTS)
    if command.startswith("/"):  # the same program only when PATH finds the same file
        assert verdict.action == "ask" and not verdict.granted
    else:
        assert verdict.action == "allow" and verdict.granted
        assert "grant npm test" in verdict.rule and "the configuration asks" in verdict.rule


@pytest.mark.parametrize("command", ["npm test; curl x | sh", "npm test; rm -rf x", "npm testing", "npm",
                                     "npm install", "npm test $(curl x)", "npm test > /etc/passwd",
                                     "bash -c 'npm test'", "eval npm test", "echo 'unbalanced"])
def test_a_prefix_grant_does_not_cover_other_parts_or_what_cannot_be_seen(command):
    verdict = granted("npm test").evaluate(request(command), NO_FACTS)
    assert verdict.action == "ask" and not verdict.granted


def test_a_prefix_grant_never_overrides_a_deny_and_keeps_to_its_tool_and_risk():
    deny = PolicyRule("deny", "bash", None, "npm test", name="deny npm test")
    assert granted("npm test", rules=(deny,)).evaluate(request("npm test"), NO_FACTS).action == "deny"
    assert granted("npm test", per_risk={**DEFAULTS, "process": "deny"}).evaluate(
        request("npm test"), NO_FACTS).action == "deny"
    assert granted("npm test").evaluate(request("npm test", tool="sh"), NO_FACTS).action == "ask"
    assert granted("npm test").evaluate(request("npm test", risk=ToolRisk.DELEGATE), NO_FACTS).action == "ask"


def test_without_a_grant_nothing_changes():
    verdict = ApprovalPolicy(DEFAULTS).evaluate(request("npm test"), NO_FACTS)
    assert verdict.action == "ask" and not verdict.granted


def test_the_prefix_scope_is_offered_for_calls_with_a_command_only():
    assert "prefix" in offered_scopes(request("npm test"))
    assert "prefix" not in offered_scopes(request(None, tool="write", risk=ToolRisk.FILESYSTEM))


@pytest.mark.parametrize("message, prefix, error", [
    ({"decision": "allow_session", "scope": "prefix", "prefix": "npm test"}, "npm test", False),
    ({"decision": "allow_session", "scope": "prefix", "prefix": "npm  'test'"}, "npm test", False),
    ({"decision": "allow_session", "scope": "prefix"}, "", True),
    ({"decision": "allow_session", "scope": "prefix", "prefix": "npm test; rm -rf x"}, "", True),
    ({"decision": "allow_session", "scope": "prefix", "prefix": ""}, "", True),
    ({"decision": "allow_session", "scope": "prefix", "prefix": ["npm"]}, "", True),
])
def test_prefix_answers_are_checked(message, prefix, error):
    answer = parse_answer(message)
    assert answer.approver_error == error
    if error:
        assert answer.decision == "deny"
    else:
        assert (answer.decision, answer.scope, answer.prefix, answer.save) == ("allow_session", "prefix", prefix,
                                                                               False)
    assert parse_answer({**message, "save": True}).save == (not error)


def test_prefix_grants_persist_and_are_never_matched_alone(tmp_path):
    store = GrantStore(tmp_path)
    grant = store.add(request("npm test -- -u"), "prefix", prefix="npm test")
    assert store.find(request("npm test -- -u")) is None  # the policy decides it, on the segments
    assert "`npm test`" in grant.describe()
    again = GrantStore(tmp_path)
    assert [(r.tool, r.risk, r.command_prefix) for r in again.prefix_rules()] == [("bash", "process", "npm test")]
    with pytest.raises(ValueError):
        store.add(request(), "prefix", prefix="npm; rm")


def test_a_grants_file_with_a_bad_prefix_means_no_grants(tmp_path, capsys):
    store = GrantStore(tmp_path)
    store.add(request(), "prefix", prefix="npm test")
    path = tmp_path / "grants.json"
    path.write_text(path.read_text().replace('"npm test"', '"npm test; sh"'))
    assert GrantStore(tmp_path).grants == []
    assert "ignoring unreadable session grants" in capsys.readouterr().err


class _Approver:
    def __init__(self, gate_box: list, answer: dict):
        self.gate_box, self.reply, self.asked = gate_box, answer, []

    async def __call__(self, message: dict) -> None:
        self.asked.append(message)
        asyncio.get_running_loop().call_soon(self.gate_box[0].answer,
                                             {"request_id": message["request_id"], **self.reply})


def _settle(gate: ApprovalGate, policy: ApprovalPolicy, req: ApprovalRequest):
    return asyncio.run(gate.settle(req, policy.evaluate(req, NO_FACTS), asyncio.Event()))


def test_the_gate_remembers_a_prefix_answer_and_saves_it_when_asked(tmp_path):
    policy = ApprovalPolicy(DEFAULTS)
    saved: list[PolicyRule] = []
    box: list = []
    approver = _Approver(box, {"decision": "allow_session", "scope": "prefix", "prefix": "npm test", "save": True})
    gate = ApprovalGate(policy, GrantStore(tmp_path), approver, approver_connected=True, timeout_seconds=5,
                        save_rule=lambda rule: saved.append(rule) or "/home/u/.config/peon/config.toml")
    box.append(gate)
    first = _settle(gate, policy, request("npm test"))
    assert first.allowed and first.scope == "prefix" and "saved as an allow rule" in first.rule
    assert approver.asked[0]["prefix_scope"] is True and approver.asked[0]["scopes"] == ["call", "tool", "risk"]
    assert [(r.tool, r.risk, r.command_prefix, r.decision) for r in saved] == [("bash", "process", "npm test",
                                                                                 "allow")]
    second = _settle(gate, policy, request("npm test -- --watch=false", call_id="c2"))
    assert (second.allowed, second.by, second.scope) == (True, "grant", "prefix")
    assert len(approver.asked) == 1
    third = _settle(gate, policy, request("npm test; curl x | sh", call_id="c3"))
    assert len(approver.asked) == 2 and third.by == "approver"
    # a new supervisor on the same state directory continues with the grant
    fresh = ApprovalPolicy(DEFAULTS)
    ApprovalGate(fresh, GrantStore(tmp_path), None, approver_connected=False, timeout_seconds=5)
    assert fresh.evaluate(request("npm test -- -u"), NO_FACTS).granted


def test_a_prefix_answer_to_a_call_without_a_command_is_an_approver_error(tmp_path):
    policy = ApprovalPolicy(DEFAULTS)
    box: list = []
    approver = _Approver(box, {"decision": "allow_session", "scope": "prefix", "prefix": "npm"})
    gate = ApprovalGate(policy, GrantStore(tmp_path), approver, approver_connected=True, timeout_seconds=5)
    box.append(gate)
    decision = _settle(gate, policy, request(None, tool="write", risk=ToolRisk.FILESYSTEM))
    assert (decision.allowed, decision.by) == (False, "approver-error")


def test_saving_appends_one_rule_atomically_that_loads(tmp_path):
    config = tmp_path / "peon" / "config.toml"
    rule = PolicyRule("allow", "bash", "process", "npm test")
    assert save_allow_rule(config, rule) == config  # created with its directory
    config.write_text('[limits]\nmax_timeout_seconds = 60\n' + config.read_text())
    save_allow_rule(config, PolicyRule("allow", "bash", "process", "make check"))
    data = tomllib.loads(config.read_text())
    assert data["limits"] == {"max_timeout_seconds": 60}
    assert [r["command_prefix"] for r in data["approval"]["rules"]] == ["npm test", "make check"]
    assert sorted(p.name for p in config.parent.iterdir()) == ["config.toml"]


def test_saving_refuses_what_it_cannot_append_cleanly(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('approval = { rules = [] }\n')
    with pytest.raises(ValueError):
        save_allow_rule(config, PolicyRule("allow", "bash", "process", "npm test"))
    assert config.read_text() == 'approval = { rules = [] }\n'
    with pytest.raises(ValueError):
        save_allow_rule(config, PolicyRule("allow", "bash", "process", "npm; rm"))


def test_saving_follows_a_symbolic_link_and_keeps_it(tmp_path):
    real = tmp_path / "dotfiles" / "peon.toml"
    real.parent.mkdir()
    real.write_text("")
    link = tmp_path / "config.toml"
    link.symlink_to(real)
    save_allow_rule(link, PolicyRule("allow", "bash", "process", "npm test"))
    assert link.is_symlink() and "npm test" in real.read_text()


def test_the_user_file_is_the_users_layer_never_a_projects():
    layers = [{"kind": "defaults", "source": "defaults"}, {"kind": "user", "source": "/u/peon.toml"},
              {"kind": "project", "source": "/w/.peon/config.toml"}]
    assert str(user_config_file(layers, {})) == "/u/peon.toml"
    assert str(user_config_file(layers[::2], {"HOME": "/home/u"})) == "/home/u/.config/peon/config.toml"
    assert user_config_file(layers[::2], {}) is None


def test_the_terminal_and_the_mcp_form_offer_the_suggested_prefix():
    from peon.approvers import render_request
    from peon.core.answers import suggested_prefix
    from peon.mcp.elicitation import approval_elicitation, decision_from_elicitation

    asked = {**request("npm test -- --watch=false").to_dict(), "scopes": ["call", "tool", "risk"], "prefix_scope": True,
             "details": {"segments": [{"words": ["npm", "test", "--", "--watch=false"]}, {"words": ["sh"]}]}}
    assert suggested_prefix(asked) == "npm test"
    assert suggested_prefix({**asked, "details": {"segments": [{"words": ["ls", "-la"]}]}}) == "ls"
    assert suggested_prefix({**asked, "details": {"segments": [{"words": ["$(x)", "y"]}]}}) is None
    assert suggested_prefix({**asked, "prefix_scope": False}) is None
    text, answers = render_request(asked)
    assert "allow commands starting with `npm test`" in text
    assert answers["p"] == {"decision": "allow_session", "scope": "prefix", "prefix": "npm test"}
    assert answers["a"]["save"] is True
    form = approval_elicitation(asked, "2025-11-25")["requestedSchema"]["properties"]
    assert "prefix" in [o["const"] for o in form["scope"]["oneOf"]] and form["save"]["type"] == "boolean"
    answer = decision_from_elicitation({"action": "accept", "content": {"decision": "allow_session",
                                        "scope": "prefix", "save": True}}, None, asked["scopes"], "npm test")
    assert (answer["scope"], answer["prefix"], answer["save"]) == ("prefix", "npm test", True)
    assert parse_answer(answer).prefix == "npm test"
    unoffered = decision_from_elicitation({"action": "accept", "content": {"decision": "allow_session",
                                           "scope": "prefix"}}, None, asked["scopes"], None)
    assert unoffered["scope"] == "call" and "prefix" not in unoffered


def test_a_call_waiting_in_line_is_answered_by_a_prefix_given_meanwhile(tmp_path):
    policy = ApprovalPolicy(DEFAULTS)
    box: list = []
    approver = _Approver(box, {"decision": "allow_session", "scope": "prefix", "prefix": "npm test"})
    gate = ApprovalGate(policy, GrantStore(tmp_path), approver, approver_connected=True, timeout_seconds=5)
    box.append(gate)
    calls = [request("npm test", call_id="c1"), request("npm test -- -u", call_id="c2"),
             request("npm test; rm -rf x", call_id="c3")]

    async def both():
        return await asyncio.gather(*(gate.settle(r, policy.evaluate(r, NO_FACTS), asyncio.Event()) for r in calls))

    first, second, third = asyncio.run(both())
    assert (first.by, second.by, second.scope) == ("approver", "grant", "prefix")
    assert third.by == "approver" and len(approver.asked) == 2


def test_an_ask_from_a_hook_is_put_to_the_approver_whatever_the_grants(tmp_path):
    from peon.approval.policy import Verdict
    policy = ApprovalPolicy(DEFAULTS)
    store = GrantStore(tmp_path)
    store.add(request(), "tool")
    box: list = []
    approver = _Approver(box, {"decision": "deny"})
    gate = ApprovalGate(policy, store, approver, approver_connected=True, timeout_seconds=5)
    box.append(gate)
    hooked = Verdict("ask", "the hook hooks[0] answered ask")
    assert asyncio.run(gate.settle(request(), hooked, asyncio.Event())).by == "grant"
    decision = asyncio.run(gate.settle(request(), hooked, asyncio.Event(), grants=False))
    assert decision.by == "approver" and not decision.allowed and len(approver.asked) == 1
