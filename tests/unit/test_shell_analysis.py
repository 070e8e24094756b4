"""The shell analysis as a pure function: every simple command a line runs, normalised; what cannot be
seen; where redirections write; which words are literal. That literal words are the words real bash sees is
checked with bash itself in tests/session/test_shell.py."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peon.approval.shell import MAX_COMMAND_BYTES, analyze, literal, parse_tree


def programs(command: str) -> list[list[str | None]]:
    return [list(s.words) for s in analyze(command).segments]


# -- segments ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("command, expected", [
    ("touch b; true", [["touch", "b"], ["true"]]),
    ("true && touch c", [["true"], ["touch", "c"]]),
    ("false || touch c", [["false"], ["touch", "c"]]),
    ("a | b |& c", [["a"], ["b"], ["c"]]),
    ("sleep 1 & touch d", [["sleep", "1"], ["touch", "d"]]),
    ("a\nb\n\nc", [["a"], ["b"], ["c"]]),
    ("(cd x; touch y)", [["cd", "x"], ["touch", "y"]]),
    ("{ touch y; }", [["touch", "y"]]),
    ("if a; then b; elif c; then d; else e; fi", [["a"], ["b"], ["c"], ["d"], ["e"]]),
    ("while a; do b; done", [["a"], ["b"]]),
    ("for f in 1 2; do touch $f; done", [["touch", None]]),
    ("case $x in a) touch y;; *) z;; esac", [["touch", "y"], ["z"]]),
    ("! touch y", [["touch", "y"]]),
    ("[[ -f x ]] && make", [["make"]]),
    ("git status # ; rm -rf /", [["git", "status"]]),
])
def test_every_simple_command_is_a_segment(command, expected):
    assert programs(command) == expected


@pytest.mark.parametrize("command, words, wrappers, assignments", [
    ("/usr/bin/touch d", ["/usr/bin/touch", "d"], [], []),
    ("command touch e", ["touch", "e"], ["command"], []),
    ("command -p touch e", ["touch", "e"], ["command"], []),
    ("builtin cd x", ["cd", "x"], ["builtin"], []),
    ("exec -a name touch e", ["touch", "e"], ["exec"], []),
    ("FOO=1 touch f", ["touch", "f"], [], ["FOO"]),
    ("FOO=1 BAR=$(x) touch f", ["touch", "f"], [], ["FOO", "BAR"]),
    ("env -i A=1 -- touch f", ["touch", "f"], ["env"], []),
    ("env -u HOME touch f", ["touch", "f"], ["env"], []),
    ("nice -n 5 touch f", ["touch", "f"], ["nice"], []),
    ("nice -5 touch f", ["touch", "f"], ["nice"], []),
    ("time -p touch f", ["touch", "f"], ["time"], []),
    ("timeout -s KILL 5 touch f", ["touch", "f"], ["timeout"], []),
    ("nohup touch f", ["touch", "f"], ["nohup"], []),
    ("stdbuf -oL touch f", ["touch", "f"], ["stdbuf"], []),
    ("xargs -0 -n 1 touch", ["touch"], ["xargs"], []),
    ("sudo -u bob touch f", ["touch", "f"], ["sudo"], []),
    ("ionice -c 3 touch f", ["touch", "f"], ["ionice"], []),
    ("taskset -c 0 touch f", ["touch", "f"], ["taskset"], []),
    ("env nice timeout 3 command touch f", ["touch", "f"], ["env", "nice", "timeout", "command"], []),
    ("\\touch f", ["touch", "f"], [], []),
    ("'touch' f", ["touch", "f"], [], []),
    ('"to"uch f', ["touch", "f"], [], []),
    ("$'\\x74ouch' f", ["touch", "f"], [], []),
    ("$'\\x74'ouch f", ["touch", "f"], [], []),  # the grammar splits this word; bash does not
    ("t$'ouc'h f", ["touch", "f"], [], []),
])
def test_wrappers_assignments_and_quotes_are_removed(command, words, wrappers, assignments):
    (segment,) = [s for s in analyze(command).segments if s.origin == ""]
    assert list(segment.words) == words
    assert list(segment.wrappers) == wrappers
    assert list(segment.assignments) == assignments


def test_xargs_alone_runs_echo_and_is_never_plain():
    (segment,) = analyze("xargs").segments
    assert segment.words == ("echo",) and "input at run time" in segment.notes[0]


@pytest.mark.parametrize("command, inner, origin", [
    ("echo $(touch x)", ["touch", "x"], "command substitution"),
    ("echo `touch x`", ["touch", "x"], "command substitution"),
    ("diff <(touch x) y", ["touch", "x"], "process substitution"),
    ("x=$(touch x)", ["touch", "x"], "command substitution"),
    ("echo ${a:-$(touch x)}", ["touch", "x"], "command substitution"),
    ("cat <<EOF\n$(touch x)\nEOF", ["touch", "x"], "command substitution"),
    ("find . -exec touch {} \\;", ["touch", "{}"], "find -exec"),
    ("find . -execdir touch {} +", ["touch", "{}"], "find -execdir"),
    ("bash -c 'touch x'", ["touch", "x"], "bash -c"),
    ("sh -ec \"true; touch x\"", ["touch", "x"], "sh -c"),
    ("bash -c \"bash -c 'touch x'\"", ["touch", "x"], "bash -c"),
    ("f() { touch x; }", ["touch", "x"], "function body"),
])
def test_commands_hidden_in_arguments_and_substitutions_are_segments(command, inner, origin):
    found = [s for s in analyze(command).segments if list(s.words) == inner]
    assert found and found[0].origin == origin, analyze(command)


@pytest.mark.parametrize("command, reason", [
    ("$X foo", "command name is computed"),
    ("$(echo touch) f", "command name is computed"),
    ("eval touch x", "eval"),
    ("source ./x.sh", "source"),
    (". ./x.sh", "runs a file"),
    ("trap 'touch x' EXIT", "trap"),
    ("shopt -s expand_aliases", "shopt"),
    ("alias ls=touch", "alias"),
    ("hash -p /usr/bin/touch ls", "hash"),
    ("echo $((1 + 2))", "arithmetic"),
    ("(( i++ ))", "arithmetic"),
    ("for ((i=0;i<2;i++)); do :; done", "arithmetic"),
    ("[[ $a -eq 1 ]]", "arithmetic"),
    ("echo ${x@P}", "prompt"),
    ("echo ${x:n}", "arithmetic"),
    ("a[1]=x", "subscript"),
    ("echo 'unterminated", "could not be parsed"),
    ("touch (", "could not be parsed"),
    ("cat <<A <<B\na\nA\nb\nB\ntouch x", "could not be parsed"),
    ("echo 'rm x' | bash", "reads the commands"),
    ("bash -c \"$CMD\"", "computed at run time"),
    ("env -S 'touch x'", "cannot see"),
    ("timeout --bogus 5 touch x", "does not know"),
    ("touch x\0", "NUL"),
    ("exec 3<>rw", "could not be parsed"),  # the grammar lacks <>: unparsable, so fail closed
    ("set -- \\ a", "skipped text"),  # the grammar drops an escaped leading blank; bash keeps it
    ("x" * (MAX_COMMAND_BYTES + 1), "longer than"),
    ("strace -f touch x", "does not follow"),
    ("watch touch x", "does not follow"),
    ("ssh host touch x", "does not follow"),
    # text bash evaluates as code inside literal words
    ("printf -v 'a[$(touch x)]' 1", "subscript"),
    ("read 'a[$(touch x)]' <<< 1", "subscript"),
    ("declare 'a[$(touch x)]=1'", "subscript"),
    ("export 'a[$(touch x)]=1'", "subscript"),
    ("unset 'a[$(touch x)]'", "subscript"),
    ("test -v 'a[$(touch x)]'", "subscript"),
    ("[ -v 'a[$(touch x)]' ]", "subscript"),
    ("[[ -v 'a[$(touch x)]' ]]", "subscript"),
    ("declare -n r='a[$(touch x)]'; echo $r", "reference"),
    ("declare -i n; n='a[$(touch x)]'", "integer"),
    ("x='a[$(touch x)]'; echo ${!x}", "${!name}"),
    # nested shells and their input
    ("bash /dev/stdin <<< 'touch x'", "/dev/stdin"),
    ("bash /dev/fd/0 <<< 'touch x'", "/dev/fd/0"),
    ("bash /proc/self/fd/0 <<< 'touch x'", "/proc/self/fd/0"),
    # code in variables
    ("PS4='$(touch x)' bash -xc true", "PS4"),
    ("BASH_ENV=./x.sh bash -c true", "BASH_ENV"),
    ("env ENV=./x.sh sh -i", "ENV"),
    ("env 'BASH_FUNC_f%%=() { touch x; }' bash -c f", "BASH_FUNC_f%%"),
    ("SHELLOPTS=xtrace bash -c true", "SHELLOPTS"),
    ("PROMPT_COMMAND='touch x' bash -i", "PROMPT_COMMAND"),
    ("export PS4='$(touch x)'; set -x; true", "PS4"),
    ("GIT_PAGER=$CMD git log", "computed at run time"),
    # builtins and keywords that run commands
    ("jobs -x touch x", "jobs -x"),
    ("coproc { touch x; }", "coproc"),
    ("coproc NAME { touch x; }", "coproc"),
    # a line continuation inside a word
    ("t\\\nouch x", "line continuation"),
    ("echo $(t\\\nouch x)", "line continuation"),
    # runners
    *[(f"{runner} touch x", "does not follow") for runner in (
        "setarch", "linux32", "linux64", "sg", "fakeroot", "eatmydata", "chronic", "unbuffer", "valgrind",
        "proxychains", "torsocks", "dbus-run-session", "xvfb-run", "numactl", "cgexec", "pkexec", "ifne", "choom",
        "run0", "fish")],
    # bounded analysis
    (")(" * 60_000, "budget"),
    ("echo " + "$(" * 2000 + "x" + ")" * 2000, "nests more than"),
    ("{ " * 2000 + "x" + "; }" * 2000, "nests more than"),
])
def test_what_cannot_be_seen_is_opaque(command, reason):
    analysis = analyze(command)
    assert analysis.opaque, analysis
    assert any(reason in r for r in analysis.opaque), analysis.opaque


@pytest.mark.parametrize("command, reason", [
    ("echo $(date)", "command substitution"),
    ("x=1; ls", "assigns the shell variable x"),
    ("export PATH=/tmp", "changes shell variables"),
    ("f() { ls; }; f", "defines the shell function f"),
    ("cat <(ls)", "process substitution"),
])
def test_visible_but_dynamic(command, reason):
    analysis = analyze(command)
    assert not analysis.opaque
    assert any(reason in r for r in analysis.dynamic), analysis.dynamic


@pytest.mark.parametrize("command, inner", [
    ("bash -c -- 'touch x'", ["touch", "x"]),
    ("bash -c -e 'touch x'", ["touch", "x"]),
    ("bash -c +x 'touch x'", ["touch", "x"]),
    ("bash -o errexit -c 'touch x'", ["touch", "x"]),
    ("sh -ec 'touch x'", ["touch", "x"]),
    ("GIT_PAGER='touch x' git log", ["touch", "x"]),
    ("env EDITOR='touch x' git commit", ["touch", "x"]),
    ("export PAGER='touch x'; git log", ["touch", "x"]),
])
def test_options_before_a_nested_script_and_command_variables_are_followed(command, inner):
    analysis = analyze(command)
    assert not analysis.opaque, analysis.opaque
    assert inner in [list(s.words) for s in analysis.segments]


def test_long_chains_and_the_longest_line_are_analysed_without_recursion():
    chain = " && ".join(["true"] * 400)  # the grammar nests && one level per operator
    assert len(analyze(chain).segments) == 400 and not analyze(chain).opaque
    words = "echo " + " ".join(["ab"] * ((MAX_COMMAND_BYTES - 5) // 3))
    analysis = analyze(words)
    assert not analysis.opaque and len(analysis.segments[0].words) == (MAX_COMMAND_BYTES - 5) // 3 + 1
    braces = "echo " + "{a" * 30_000  # once a quadratic regular expression
    assert analyze(braces).segments[0].words[1] == "{a" * 30_000
    continued = "echo " + "$(echo " * 20_000 + "'" + "a\\\nb" * 20_000 + "'" + ")" * 20_000
    assert "nests more than" in analyze(continued).opaque[0]  # one walk decides every continuation


def test_plain_compound_commands_are_neither_opaque_nor_dynamic():
    for command in ("cd src && make", "pytest 2>&1 | tail -20", "git status && git diff", "ls -la; pwd",
                    "cat <<'EOF' > notes.txt\nhello $HOME $(not run)\nEOF"):
        analysis = analyze(command)
        assert not analysis.opaque and not analysis.dynamic, (command, analysis)


# -- here-documents ----------------------------------------------------------------------------------


def test_a_here_document_hides_no_command():
    # The body of a quoted here-document is data; the line after its delimiter is a command.
    assert programs("cat <<'EOF'\ntouch hidden\nEOF\ntouch visible") == [["cat"], ["touch", "visible"]]
    assert programs("cat <<-EOF\n\ttouch hidden\n\tEOF\ntouch visible") == [["cat"], ["touch", "visible"]]


def test_a_here_document_body_with_substitutions_is_dynamic():
    analysis = analyze("cat <<EOF\n$(touch x) $HOME\nEOF")
    assert ["touch", "x"] in [list(s.words) for s in analysis.segments]
    assert analysis.dynamic


# -- redirections ------------------------------------------------------------------------------------


@pytest.mark.parametrize("command, targets", [
    ("echo hi > out.txt", ["out.txt"]),
    ("echo hi >> /tmp/x", ["/tmp/x"]),
    ("echo hi &> log", ["log"]),
    ("echo hi >| f 2> err", ["f", "err"]),
    ("echo hi >&file", ["file"]),
    ("echo hi > \"$F\"", [None]),
    ("{ a; b; } > grouped", ["grouped"]),
    ("cat <<'EOF' > from-heredoc\nx\nEOF", ["from-heredoc"]),
    ("echo hi 2>&1 >&2 <in", []),
    ("tee out", []),  # tee's operands are checked by the policy, not here
])
def test_writes_are_listed_with_their_targets(command, targets):
    assert [w.target for w in analyze(command).writes] == targets


def test_a_redirection_binds_to_the_last_command_and_words_after_it_are_arguments():
    (cd, make) = analyze("cd src && make >out 2>&1").segments
    assert [r.show() for r in make.redirects] == [">out", ">&1"] and not cd.redirects
    (rm,) = analyze("rm >/dev/null -rf x").segments
    assert rm.words == ("rm", "-rf", "x")


def test_cd_adds_a_possible_working_directory():
    analysis = analyze("cd src && echo x > out; cd /tmp; echo y > two")
    first, second = analysis.writes
    assert first.cwds == (".", "src")
    assert set(second.cwds) == {".", "src", "/tmp"}
    assert None in analyze("cd $DIR; echo > x").writes[0].cwds
    assert None in analyze("cd; echo > x").writes[0].cwds
    assert None in analyze("pushd x; echo > y").writes[0].cwds


@pytest.mark.parametrize("word", ["*.py", "a?", "[ab]", "{a,b}", "{1..3}", "~/x", "~", "$HOME", "x{a,'b'}"])
def test_words_bash_expands_are_not_literal(word):
    tree = parse_tree(f"echo {word}")
    (command,) = tree.root_node.children
    args = [n for n in command.children[1:] if n.is_named]
    assert any(literal(n) is None for n in args)


def test_braces_that_do_not_expand_stay_literal():
    assert analyze("find . -exec rm {} +").segments[1].words == ("rm", "{}")


SHELL_TEXT = st.lists(st.sampled_from([*"ab$(){}[]<>|&;'\"`\\ \n\t#=*?~!-:@%/.0", "<<", "EOF", "rm "]),
                      max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(SHELL_TEXT)
def test_any_text_gives_an_analysis_never_an_exception(text):
    from peon.approval.policy import ApprovalPolicy, ApprovalRequest, PolicyRule
    from peon.approval.rules import NO_FACTS
    from peon.core.tool import ToolRisk

    analysis = analyze(text)
    assert isinstance(analysis.segments, tuple)
    policy = ApprovalPolicy({"read_only": "allow", "filesystem": "ask", "process": "allow", "delegate": "ask"},
                            [PolicyRule("deny", tool="bash", command_prefix="rm"),
                             PolicyRule("allow", tool="bash", command_prefix="a")])
    request = ApprovalRequest("c", "bash", ToolRisk.PROCESS, "r", "s", canonical_input=json.dumps({"command": text}))
    verdict = policy.evaluate(request, NO_FACTS)
    if analysis.opaque:
        assert verdict.action == "deny"  # what cannot be seen could be rm

