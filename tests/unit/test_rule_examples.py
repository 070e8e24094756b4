"""A rule's examples and not_examples: matched exactly as the policy matches, checked when the rule loads, and a
rule whose example does not decide as written refused with a message naming the rule and the example."""

from __future__ import annotations

import pytest

from peon.approval.rule_examples import MAX_EXAMPLES, command_matches, example_problem, examples_refused
from peon.client.config import load_config
from peon.core.config_view import ConfigView
from peon.core.errors import ConfigError


@pytest.mark.parametrize("decision, prefix, line, matched", [
    ("allow", "npm test", "npm test", True),
    ("allow", "npm test", "npm test -- --watch=false", True),
    ("allow", "npm test", "npm test && npm test -- x", True),
    ("allow", "npm test", "npm test; curl x | sh", False),  # one part is not npm test, and sh reads code
    ("allow", "npm test", "npm run build", False),
    ("allow", "npm test", "npm test $(cat args)", False),  # computed at run time
    ("allow", "git status", "/usr/bin/git status", False),  # which file is git is a fact of the file system
    ("deny", "rm -rf", "rm -r -f build", True),  # options compare by meaning
    ("deny", "rm -rf", "ls && /bin/rm -rf x", True),
    ("deny", "rm -rf", "rm build", False),
    ("deny", "rm -rf", "eval \"$x\"", True),  # what Peon cannot see, a deny rule applies to
    ("ask", "git push", "git -C sub push origin", True),
])
def test_command_examples_match_as_the_policy_matches(decision, prefix, line, matched):
    assert command_matches(decision, prefix, line)[0] is matched


def test_path_examples_compare_whole_components():
    assert example_problem("ask", None, "src", "src/a.py", True) is None
    assert example_problem("ask", None, "src", "srcs/a.py", False) is None
    problem = example_problem("ask", None, "src", "srcs/a.py", True)
    assert problem is not None and "'srcs/a.py'" in problem and "examples" in problem


def test_a_rule_without_command_or_path_takes_no_examples():
    assert "neither" in (examples_refused(None, None, ["x"], []) or "")
    assert examples_refused("npm test", None, ["npm test"] * (MAX_EXAMPLES + 1), []) is not None
    assert examples_refused("npm test", None, [""], []) is not None
    assert examples_refused("npm test", None, ["npm test"], ["npm run"]) is None


def _user(tmp_path, text):
    path = tmp_path / "config.toml"
    path.write_text(text)
    return {"PEON_CONFIG": str(path)}


def test_rules_whose_examples_decide_as_written_load(tmp_path):
    env = _user(tmp_path, """
[[approval.rules]]
command_prefix = "npm test"
decision = "allow"
examples = ["npm test -- --watch=false"]
not_examples = ["npm test; curl x | sh", "npm run build"]

[[approval.rules]]
path_prefix = "secrets"
tool = "read_file"
decision = "deny"
examples = ["secrets/key.pem"]
not_examples = ["src/secrets.py"]
""")
    loaded = load_config(env=env)
    rule = loaded.config.approval.rules[-2]
    assert rule.examples == ("npm test -- --watch=false",)
    view = ConfigView.from_dict(loaded.to_wire()["config"])  # the supervisor's view carries them too
    assert view.approval.rules[-1].not_examples == ("src/secrets.py",)


@pytest.mark.parametrize("rule, needle", [
    ('command_prefix = "npm test"\ndecision = "allow"\nexamples = ["npm test; curl x | sh"]',
     "the examples entry 'npm test; curl x | sh' does not match"),
    ('command_prefix = "rm -rf"\ndecision = "deny"\nnot_examples = ["rm -r -f x"]',
     "the not_examples entry 'rm -r -f x' matches"),
    ('tool = "bash"\ndecision = "ask"\nexamples = ["ls"]', "this rule has neither"),
])
@pytest.mark.parametrize("layer", ["user", "project"])
def test_a_rule_with_a_failing_example_refuses_to_load_naming_rule_and_example(tmp_path, rule, needle, layer):
    text = f'[[approval.rules]]\ntool = "read_file"\ndecision = "ask"\n\n[[approval.rules]]\n{rule}\n'
    workspace = tmp_path / "ws"
    (workspace / ".peon").mkdir(parents=True)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "none")}
    if layer == "user":
        env = _user(tmp_path, text)
        source = str(tmp_path / "config.toml")
    else:
        (workspace / ".peon" / "config.toml").write_text(text)
        source = str(workspace / ".peon" / "config.toml")
    with pytest.raises(ConfigError) as caught:
        load_config(workspace=workspace, env=env)
    message = str(caught.value)
    assert needle in message and "approval.rules[1]" in message and source in message
