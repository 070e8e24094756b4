"""The approval policy as pure functions: command rules against every simple command, what keeps an
allow rule from allowing, rule order, floors, sandboxed calls, answers. No processes."""

from __future__ import annotations

import json

import pytest

from peon.client.config import load_config
from peon.approval.policy import (
    ApprovalPolicy, ApprovalRequest, PolicyRule, Verdict, check_command_prefix, command_words,
    normalize_workspace_path, parse_answer, path_under,
)
from peon.approval.rules import NO_FACTS, GitFacts, Questions, ShellFacts
from peon.core.tool import ToolRisk

DEFAULTS = {"read_only": "allow", "filesystem": "ask", "process": "ask", "delegate": "ask"}


def request(tool="bash", risk=ToolRisk.PROCESS, **args) -> ApprovalRequest:
    return ApprovalRequest(call_id="c1", tool=tool, risk=risk, risk_reason="test", summary="s",
                           canonical_input=json.dumps(args, sort_keys=True))


# -- command rules against every simple command ------------------------------------------------------

CLEAN = ShellFacts(git={".": GitFacts(), "src": GitFacts()})


def policy(*rules: PolicyRule, process: str = "ask") -> ApprovalPolicy:
    return ApprovalPolicy({**DEFAULTS, "process": process}, list(rules))


def allow(prefix: str, name: str | None = None) -> PolicyRule:
    return PolicyRule("allow", tool="bash", command_prefix=prefix, name=name or f"allow {prefix}")


def deny(prefix: str) -> PolicyRule:
    return PolicyRule("deny", tool="bash", command_prefix=prefix, name=f"deny {prefix}")


BYPASSES = ["touch b; true", "true && touch c", "/usr/bin/touch d", "command touch e", "FOO=1 touch f",
            "true || touch g", "echo | touch h", "(touch i)", "{ touch j; }", "echo $(touch k)", "\\touch l",
            "'touch' m", "env nice -n 3 timeout 5 touch n", "xargs touch", "find . -exec touch {} \\;",
            "bash -c 'touch o'", "if true; then touch p; fi", "f() { touch q; }; f", "sudo touch r",
            "exec touch s", "time touch t", "nohup touch u", "eval touch v", "$T w", "t$'ouc'h x",
            "cat <<EOF\n$(touch y)\nEOF", "touch >/dev/null z", "echo 'unbalanced"]


@pytest.mark.parametrize("command", BYPASSES)
def test_a_deny_rule_matches_any_part_and_whatever_cannot_be_seen(command):
    verdict = policy(deny("touch"), process="allow").evaluate(request(command=command))
    assert verdict.action == "deny", (command, verdict)
    assert verdict.rule.startswith("deny touch")


@pytest.mark.parametrize("command", BYPASSES)
def test_an_ask_rule_is_never_passed_by_the_same_tricks(command):
    assert policy(PolicyRule("ask", tool="bash", command_prefix="touch"), process="allow").evaluate(
        request(command=command)).action == "ask"


def test_a_deny_rule_does_not_match_unrelated_commands():
    p = policy(deny("touch"), process="allow")
    for command in ("echo touch", "ls touch", "git status", "echo $(date)", "cat touch.txt"):
        assert p.evaluate(request(command=command)).action == "allow", command


@pytest.mark.parametrize("prefix, command", [
    ("rm -rf", "rm -fr x"), ("rm -rf", "rm -r -f x"), ("rm -rf", "rm -R -f x"), ("rm -rf", "rm --recursive --force x"),
    ("rm -rf", "rm --rec --forc x"), ("rm -rf", "rm x -rf"), ("rm -rf", "rm -vrf x"), ("rm -rf", "rm -f -v -R x"),
    ("rm -rf", "rm --interactive=never -r x"), ("rm -rf /", "rm -rf x /"),
    ("git push", "git -C . push"), ("git push", "git -c user.name=x push"), ("git push", "git --git-dir=.git push"),
    ("git push", "git --work-tree . --no-pager push"), ("git push", "git --namespace=n -P push"),
    ("git push", "git send-pack ../remote.git main"), ("git push", "git http-push url main"),
    ("git push", "git p"), ("git push", "git $SUB"), ("git push", "git -c alias.p=push p"),
    ("git push", "/usr/lib/git-core/git-push origin main"), ("git push", "git-send-pack ../r main"),
    ("git push --force", "git push -f"), ("git push --force", "git push origin --force"),
    ("git branch -D", "git branch --delete --force x"), ("git branch -D", "git branch -df x"),
    ("curl -X POST", "curl -XPOST http://h"), ("curl -X POST", "curl --request=POST http://h"),
    ("curl -X POST", "curl -sX POST http://h"), ("curl http://h", "curl -s --url http://h"),
    ("curl http://h", "curl -o out http://h"), ("git", "git -C . log"), ("git", "git --version"),
])
def test_deny_rules_match_the_meaning_not_the_spelling(prefix, command):
    assert policy(deny(prefix), process="allow").evaluate(request(command=command)).action == "deny", command


@pytest.mark.parametrize("prefix, command", [
    ("rm -rf", "rm -r x"), ("rm -rf", "rm -- -rf"), ("rm -rf", "rm -f x"), ("git push", "git log"),
    ("git push", "git commit -m push"), ("git push", "git -C push status"), ("git push --force", "git push origin"),
    ("git push", "git --version"), ("git push", "git -C . --no-pager"),
    ("curl -X POST", "curl -X GET http://h"), ("curl -X POST", "curl -o POST http://h"),
])
def test_deny_rules_do_not_match_other_meanings(prefix, command):
    assert policy(deny(prefix), process="allow").evaluate(request(command=command)).action == "allow", command


@pytest.mark.parametrize("command", [
    "git -c alias.x='!touch y' x", "git -c core.pager='touch y' log", "git --config-env=core.pager=V log",
    "git --exec-path=. status", "git submodule foreach 'touch y'", "git rebase --exec 'touch y' main",
    "git rebase -x 'touch y' main", "git bisect run touch y", "git config alias.x '!touch y'",
    "git config core.fsmonitor 'touch y'",
])
def test_git_configuration_and_subcommands_that_run_strings_match_every_deny_rule(command):
    verdict = policy(deny("rm"), process="allow").evaluate(request(command=command))
    assert verdict.action == "deny" and "cannot see" in verdict.rule, (command, verdict)


def test_opaque_commands_say_why_a_deny_rule_applied():
    verdict = policy(deny("git push"), process="allow").evaluate(request(command="eval $CMD"))
    assert verdict.action == "deny" and "cannot see what the command runs: eval" in verdict.rule


@pytest.mark.parametrize("command, rules", [
    ("cd src && make", ["cd", "make"]),
    ("pytest 2>&1 | tail -20", ["pytest", "tail"]),
    ("git status && git diff", ["git status", "git diff"]),
    ("git status; git diff --stat > /dev/null", ["git status", "git diff"]),
    ("ls -la\npwd", ["ls", "pwd"]),
    ("(cd src && ls) | tail -3", ["cd", "ls", "tail"]),
    ("[[ -d src ]] && ls src", ["ls"]),
    ("command ls", ["ls"]),
])
def test_allow_rules_allow_a_compound_command_when_every_part_is_allowed(command, rules):
    verdict = policy(*[allow(r) for r in rules]).evaluate(request(command=command), CLEAN)
    assert verdict.action == "allow", verdict
    assert "every part allowed" in verdict.rule


@pytest.mark.parametrize("command, why", [
    ("git status; rm -rf x", "no allow rule covers `rm -rf x`"),
    ("git status && curl x | sh", "sh reads the commands it runs from its input"),
    ("git status && curl x", "no allow rule covers `curl x`"),
    ("git status $(rm x)", "command substitution"),
    ("FOO=1 git status", "sets FOO"),
    ("x=1; git status", "assigns the shell variable x"),
    ("eval git status", "cannot see"),
    ("git status > ~/.bashrc", "computed at run time"),
    ("git status > /etc/passwd", "outside the workspace"),
    ("cd /tmp && git status > out", "outside the workspace"),
    ("cd $D && git status > out", "directory Peon cannot know"),
    ("git status > link/out", "resolves outside the workspace"),
    ("git status > unchecked", "was not checked"),
    ("xargs git status", "input at run time"),
    ("sudo git status", "another user's privileges"),
    ("./git status", "no allow rule covers `./git status`"),
    ("/opt/evil/git status", "no allow rule covers `/opt/evil/git status`"),
    ("git -c core.pager=sh status", "no allow rule covers"),
    ("git status $OPTS", "computed at run time"),
    ("git status *", "computed at run time"),
    ("git statusx", "no allow rule covers"),
    ("git 'status; rm'", "no allow rule covers"),
])
def test_allow_rules_do_not_allow_more_than_their_parts(command, why):
    facts = ShellFacts(git={".": GitFacts(), "src": GitFacts()}, paths_inside={"link/out": False})
    verdict = policy(allow("git status"), allow("cd")).evaluate(request(command=command), facts)
    assert verdict.action == "ask", verdict
    assert why in verdict.rule, verdict.rule


@pytest.mark.parametrize("command, why", [
    ("git diff --output=/any/path", "--output"),
    ("git diff --outp=/any/path", "--outp"),
    ("git log --output=x", "--output"),
    ("git diff --ext-diff", "--ext-diff"),
    ("git grep -Ovim x", "-Ovim"),
    ("git rebase --exec 'rm x'", "--exec"),
    ("git rebase -x 'rm x'", "-x"),
    ("git difftool", "runs a diff tool"),
    ("git bisect run ./evil", "runs a command"),
    ("git submodule foreach rm", "runs a command"),
    ("git format-patch -o /tmp", "-o"),
    ("git -c core.pager=sh status", "before the subcommand"),
    ("git -C /elsewhere status", "before the subcommand"),
    ("git --git-dir=/elsewhere status", "before the subcommand"),
    ("git --exec-path=/tmp status", "before the subcommand"),
    ("git help log", "manual viewer"),
    ("git help -w log", "manual viewer"),
    ("git --help", "manual viewer"),
    ("git log --help", "manual viewer"),
    ("git log --hel", "manual viewer"),
])
def test_git_arguments_that_write_or_run_programs_are_not_allowed(command, why):
    verdict = policy(allow("git")).evaluate(request(command=command), CLEAN)
    assert verdict.action == "ask" and why in verdict.rule, verdict


def test_git_output_indicator_options_are_not_output():
    assert policy(allow("git diff")).evaluate(request(command="git diff --output-indicator-new=+"),
                                              CLEAN).action == "allow"


@pytest.mark.parametrize("command, why", [
    ("find . -name '*.py' -delete", "-delete"),
    ("find . -exec rm {} +", "-exec"),
    ("find . -fprint /tmp/x", "-fprint"),
    ("sed -i s/a/b/ f", "-i"),
    ("sed -ni p f", "-ni"),
    ("sed --in-place s/a/b/ f", "--in-place"),
    ("sed 's/a/b/w /tmp/x' f", "s///w"),
    ("sed '1e rm x' f", "runs a command"),
    ("sort -o /tmp/x f", "-o"),
    ("sort --out=/tmp/x f", "--out"),
    ("rg --pre ./evil x", "--pre"),
    ("awk 'BEGIN{system(\"rm x\")}'", "awk"),
    ("tee /tmp/out", "outside the workspace"),
    # option values are skipped before the script, which is then checked
    ("sed -l 5 's/a/b/w /tmp/x' f", "s///w"),
    ("sed --line-length 5 's/a/b/w /tmp/x' f", "s///w"),
    ("sed -n -l5 '1e rm x' f", "runs a command"),
    ("awk -F : 'BEGIN{system(\"rm x\")}' f", "awk"),
    ("awk -v x=1 'BEGIN{system(\"rm x\")}' f", "awk"),
    ("awk --assign x=1 'BEGIN{system(\"rm x\")}' f", "awk"),
    ("awk -F: 'BEGIN{system(\"rm x\")}' f", "awk"),
    ("awk -o/tmp/x '{print}' f", "-o/tmp/x"),
    ("awk --dump-variables=/tmp/x '{print}' f", "--dump-variables"),
    # sed labels end at a blank: `b end w FILE` writes
    ("sed 'b end w /tmp/x' f", "writes a file"),
    ("sed ':a w /tmp/x' f", "writes a file"),
    # programs that write their operands or options' values
    ("uniq in /tmp/out", "outside the workspace"),
    ("xxd -r dump /tmp/out", "outside the workspace"),
    ("xxd -c 16 in /tmp/out", "outside the workspace"),
    ("tree -o /tmp/out", "-o"),
    ("shuf -o /tmp/out f", "-o"),
    ("shuf --output=/tmp/out f", "--output"),
    ("split f part", "writes files"),
    ("csplit f /x/", "writes files"),
    ("date -s 2020-01-01", "clock"),
    ("date --set=2020-01-01", "clock"),
    ("iconv -o /tmp/out f", "-o"),
    ("less -o /tmp/out f", "-o"),
    ("dd if=f of=/tmp/out", "of="),
])
def test_safe_programs_with_unsafe_arguments_are_not_allowed(command, why):
    program = command.split()[0]
    verdict = policy(allow(program)).evaluate(request(command=command), CLEAN)
    assert verdict.action == "ask" and why in verdict.rule, verdict


@pytest.mark.parametrize("command", ["find . -name '*.py'", "sed -n 10,20p f", "sed 's/a/b/g' f", "sort -k2 f",
                                     "rg -n pattern", "awk '{print $1}' f", "tee out.txt", "sed -l 5 p f",
                                     "sed 'b end; p' f", "awk -F: '{print $1}' f", "uniq in", "uniq in out.txt",
                                     "xxd f", "tree -L 2", "shuf -n 3 f", "date +%s", "dd if=f"])
def test_the_same_programs_with_harmless_arguments_are_allowed(command):
    program = command.split()[0]
    facts = ShellFacts(paths_inside={"out.txt": True})
    assert policy(allow(program)).evaluate(request(command=command), facts).action == "allow"


def test_git_with_a_repository_configured_program_is_not_allowed():
    for facts, why in (
        (ShellFacts(git={".": GitFacts(program_keys=("core.fsmonitor in .git/config",))}), "core.fsmonitor"),
        (ShellFacts(git={".": GitFacts(problem="cannot read")}), "cannot be checked"),
        (ShellFacts(git={".": GitFacts(aliases=("status",))}), "alias"),
        (NO_FACTS, "not checked"),
    ):
        verdict = policy(allow("git status")).evaluate(request(command="git status"), facts)
        assert verdict.action == "ask" and why in verdict.rule, verdict


def test_hooks_block_only_git_commands_that_run_them():
    facts = ShellFacts(git={".": GitFacts(hooks=("pre-commit",))})
    p = policy(allow("git"))
    assert p.evaluate(request(command="git status"), facts).action == "allow"
    verdict = p.evaluate(request(command="git commit -m x"), facts)
    assert verdict.action == "ask" and "hooks (pre-commit)" in verdict.rule


def test_an_absolute_path_is_the_program_only_when_path_finds_the_same_file():
    p = policy(allow("touch"))
    same = ShellFacts(same_program={"/usr/bin/touch": True})
    assert p.evaluate(request(command="/usr/bin/touch x"), same).action == "allow"
    assert p.evaluate(request(command="/usr/bin/touch x"), NO_FACTS).action == "ask"


def test_questions_are_asked_only_when_an_allow_rule_for_commands_applies():
    p = policy(allow("git status"))
    asked = p.questions(request(command="cd src && git status > out && /bin/ls"))
    assert asked.git_cwds == {".", "src"} and asked.paths == {"out", "src/out"} and asked.programs == {"/bin/ls"}
    assert not policy(deny("git push")).questions(request(command="git status > out"))
    assert not p.questions(request("read", ToolRisk.READ_ONLY, path="x"))


def test_a_sandboxed_call_asks_for_facts_only_where_its_command_may_read():
    sandbox = {"active": True, "kind": "bwrap", "readable": ["/usr", "/etc"], "writable": ["/ws", "/tmp"]}
    sandboxed = ApprovalRequest("c", "bash", ToolRisk.PROCESS, "r", "s", details={"sandbox": sandbox},
                                canonical_input=json.dumps({"command": "git status"}), sandboxed=True)
    assert policy(allow("git status")).questions(sandboxed).readable == ("/usr", "/etc", "/ws", "/tmp")
    assert policy(allow("git status")).questions(request(command="git status")).readable is None


def test_facts_are_asked_for_the_directory_the_call_runs_in():
    details = {"cwd": "/ws/vendor", "cwd_path": "vendor"}
    inside = ApprovalRequest("c", "bash", ToolRisk.PROCESS, "r", "s", details=details,
                             canonical_input=json.dumps({"command": "git status > out.txt; cd .. && git log",
                                                         "cwd": "vendor"}))
    asked = policy(allow("git"), allow("cd")).questions(inside)
    assert asked.git_cwds == {"vendor", "."} and asked.paths == {"vendor/out.txt"}
    facts = ShellFacts(git={".": GitFacts(), "vendor": GitFacts(program_keys=("core.fsmonitor in x",))},
                       paths_inside={"vendor/out.txt": True})
    verdict = policy(allow("git"), allow("cd")).evaluate(inside, facts)
    assert verdict.action == "ask" and "core.fsmonitor" in verdict.rule


def test_a_floor_with_a_command_prefix_applies_to_any_part():
    floor = PolicyRule("deny", tool="bash", command_prefix="git push", tighten_only=True, name="p0")
    p = ApprovalPolicy({**DEFAULTS, "process": "allow"}, [floor])
    assert p.evaluate(request(command="git status && git push")).action == "deny"
    assert p.evaluate(request(command="git status")).action == "allow"
    assert p.evaluate(request(command="$GIT push")).action == "deny"


def test_configured_prefixes_must_be_plain_words():
    assert command_words("git status") == ["git", "status"]
    for prefix in ("git status; rm", "git $(x)", "a\nb", "'unbalanced", ""):
        assert command_words(prefix) is None
    with pytest.raises(ValueError, match="must be a simple command"):
        check_command_prefix("rm -rf *")


# -- sandboxed calls ---------------------------------------------------------------------------------


def test_process_sandboxed_applies_to_sandboxed_process_calls_only():
    p = ApprovalPolicy({**DEFAULTS, "process_sandboxed": "allow"}, risk_sources={"process_sandboxed": "user.toml"})
    sandboxed = ApprovalRequest("c", "bash", ToolRisk.PROCESS, "r", "s", canonical_input='{"command":"x"}',
                                sandboxed=True)
    verdict = p.evaluate(sandboxed)
    assert verdict == Verdict("allow", 'approval.process_sandboxed = "allow" in user.toml')
    assert p.evaluate(request(command="x")).action == "ask"  # not sandboxed: approval.process
    assert ApprovalPolicy(DEFAULTS).evaluate(sandboxed).rule == 'approval.process = "ask"'  # unset: process
    floor = PolicyRule("ask", risk="process", tighten_only=True, name="project floor")
    assert ApprovalPolicy({**DEFAULTS, "process_sandboxed": "allow"}, [floor]).evaluate(sandboxed).action == "ask"


# -- paths -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path, under", [
    ("src", True), ("src/a.py", True), ("./src/a.py", True), ("src//b/../a.py", True),
    ("src2/a.py", False), ("srcx", False), ("src/../.env", False), ("../src/a.py", False),
    ("/src/a.py", False), ("", False), ("src/\0", False),
])
def test_path_prefix_compares_whole_components_after_lexical_normalisation(path, under):
    assert path_under(path, "src") is under


def test_path_prefix_matches_the_resolved_path_the_tool_reports():
    rule = PolicyRule("allow", tool="write", path_prefix="docs", name="r")
    p = ApprovalPolicy(DEFAULTS, [rule])
    typed = ApprovalRequest("c", "write", ToolRisk.FILESYSTEM, "r", "s", canonical_input='{"path":"docs/notes.md"}')
    assert p.evaluate(typed).action == "allow"
    resolved = ApprovalRequest("c", "write", ToolRisk.FILESYSTEM, "r", "s",
                               details={"path": ".git/hooks/pre-commit", "typed_path": "docs/notes.md"},
                               canonical_input='{"path":"docs/notes.md"}')
    assert p.evaluate(resolved).action == "ask"


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
    assert policy.evaluate(request(command="git log"), CLEAN).action == "allow"
    verdict = policy.evaluate(request(command="git push origin"), CLEAN)
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
    policy = ApprovalPolicy(DEFAULTS, [PolicyRule("allow", tool="read", risk="filesystem", path_prefix="docs",
                                                  name="r")])
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
    assert verdict.rule == (f'approval.rules[0] in {user} (tool = "bash", command_prefix = "make test") says \'allow\' '
                            '(every part allowed: `make test -j4`)')
    assert policy.evaluate(request(command="make install")).rule == (
        'approval.process = "ask" in defaults (no allow rule covers `make install`)')


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


# -- a line typed into a shell (job_write's typed_command) --------------------------------------------

def typed(line: str) -> ApprovalRequest:
    return ApprovalRequest(call_id="c1", tool="job_write", risk=ToolRisk.PROCESS, risk_reason="test", summary="s",
                           details={"typed_command": line}, canonical_input=json.dumps({"job_id": "job-1"}))


def test_a_bash_deny_or_ask_rule_judges_a_line_typed_into_a_shell():
    assert policy(deny("rm -rf"), process="allow").evaluate(typed("rm -rf target")).action == "deny"
    assert policy(deny("rm -rf"), process="allow").evaluate(typed("ls")).action == "allow"
    asking = PolicyRule("ask", tool="bash", command_prefix="touch", name="ask touch")
    assert policy(asking, process="allow").evaluate(typed("cd x && touch y")).action == "ask"


def test_allow_rules_never_allow_a_typed_line_the_shells_state_decides_what_it_runs():
    assert policy(allow("ls")).evaluate(request(command="ls"), CLEAN).action == "allow"
    assert policy(allow("ls")).evaluate(typed("ls"), CLEAN).action == "ask"
    assert policy(allow("ls")).questions(typed("ls")) == Questions()  # no facts: nothing an allow rule needs
