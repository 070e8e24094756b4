"""What a write to a running job runs: keys as tokens and bytes, a shell's line editing followed, the
programs whose input is a shell's (peon.core.keys, peon.approval.typed_input)."""

from __future__ import annotations

import pytest

from peon.approval.shell import analyze
from peon.approval.typed_input import (
    MAX_CARRY_CHARS,
    LineState,
    reads_shell_input,
    shell_input_note_cleared,
    type_into_shell,
)
from peon.core.keys import Token, encode, tokens_of


def typed(text=None, keys=None, state=None, *, terminal=True, eof=False):
    return type_into_shell(state or LineState(), tokens_of(text, keys), terminal=terminal, eof=eof)


def test_text_and_keys_are_one_sequence_of_tokens_text_first():
    tokens = tokens_of("ab\n", ["Escape", ":wq", "Enter", "C-c"])
    assert tokens == [Token("a"), Token("b"), Token(key="Enter"), Token(key="Escape"), Token(":"), Token("w"),
                      Token("q"), Token(key="Enter"), Token(key="C-c")]
    assert encode(tokens, terminal=True) == b"ab\r\x1b:wq\r\x03"
    assert encode(tokens, terminal=False) == b"ab\n\x1b:wq\n\x03"


def test_control_characters_of_text_are_named_as_the_keys_they_are():
    assert [t.key for t in tokens_of("\r\n\t\x7f\x15\x03\x04\x1b", None)] == [
        "Enter", "Enter", "Tab", "Backspace", "C-u", "C-c", "C-d", "Escape"]
    assert tokens_of("\x85", None) == [Token(key="U+0085")]


@pytest.mark.parametrize("entry", ["a\x1bb", "\n", ""])
def test_a_keys_entry_that_is_no_key_must_be_text_without_control_characters(entry):
    with pytest.raises(ValueError):
        tokens_of(None, [entry])


def test_a_line_typed_and_entered_is_the_command_judged():
    result = typed("rm -rf target\n")
    assert result.command == "rm -rf target" and result.refused is None
    assert [s.words for s in result.analysis.segments] == [("rm", "-rf", "target")]
    assert result.after == LineState("", "")


def test_text_without_enter_runs_nothing_and_is_remembered_for_the_next_write():
    first = typed("rm -rf ")
    assert first.command is None and first.after.line == "rm -rf "
    second = typed("target", ["Enter"], first.after)
    assert second.command == "rm -rf target"


def test_backspace_c_u_and_c_c_edit_the_line_as_the_shell_does():
    assert typed("rm -rf xy", ["Backspace", "Enter"]).command == "rm -rf x"
    assert typed("echo hi", ["C-u"], ).after.line == ""
    assert typed("echo hi\x15ls\n").command == "ls"
    assert typed("echo hi\x03ls\n").command == "ls"
    assert typed(None, ["Backspace", "Enter"]).command == ""


def test_a_backspace_over_a_non_ascii_character_makes_the_line_unknown():
    result = typed("echo é", ["Backspace"])
    assert result.after.line is None
    assert typed(None, ["Enter"], result.after).refused


@pytest.mark.parametrize("key", ["Tab", "Up", "Down", "Left", "Right", "Home", "End", "Delete", "C-r", "C-w"])
def test_a_key_that_moves_recalls_or_completes_makes_the_line_unknown_and_its_enter_is_refused(key):
    result = typed("ls", [key])
    assert result.refused is None and result.after.line is None
    refused = typed(None, ["Enter"], result.after)
    assert refused.refused and "C-u" in refused.refused
    assert refused.after == result.after  # a refused write changes nothing
    assert typed("\x15rm -rf x\n", None, result.after).command == "rm -rf x"  # C-u clears it


@pytest.mark.parametrize("key", ["Escape", "C-o", "C-x", "C-j", "C-v", "F1", "U+0085"])
def test_a_key_that_may_run_or_change_the_editor_is_refused_outright(key):
    tokens = [Token("l"), Token("s"), Token(key=key)]
    result = type_into_shell(LineState(), tokens, terminal=True, eof=False)
    assert result.refused is not None and result.command is None


def test_several_lines_in_one_write_are_judged_together():
    result = typed("cd x\nrm -rf y\n")
    assert result.command == "cd x\nrm -rf y"
    assert [s.program for s in result.analysis.segments] == ["cd", "rm"]


def test_an_unfinished_command_is_carried_and_judged_with_the_next_lines():
    first = typed("r\\\n")
    assert first.after.carry == "r\\"
    second = typed("m -rf target\n", None, first.after)
    assert second.command == "r\\\nm -rf target"
    assert any("line continuation" in note for note in second.analysis.opaque)  # deny and ask rules match it
    assert second.after.carry == ""
    quoted = typed('echo "a\n')
    assert quoted.after.carry == 'echo "a'
    assert typed('b"\n', None, quoted.after).after.carry == ""
    assert typed(None, ["C-c"], quoted.after).after.carry == ""  # C-c drops the unfinished command


def test_an_unfinished_command_past_its_bound_is_refused():
    state = LineState("", "echo '" + "x" * MAX_CARRY_CHARS)
    assert typed("y\n", None, state).refused


def test_c_d_on_an_empty_line_ends_the_input_and_runs_nothing():
    assert typed(None, ["C-d"]).ends_input
    assert typed("ls", ["C-d"]).ends_input is False
    result = typed(None, None, eof=True)
    assert result.ends_input and result.command is None


def test_on_a_pipe_nothing_is_edited_and_the_end_of_input_runs_the_last_line():
    result = typed("rm -rf x\x7fy", ["Tab", "Enter"], terminal=False)
    assert result.refused is None and result.command == "rm -rf x\x7fy\t"
    ended = typed("rm -rf target", None, terminal=False, eof=True)
    assert ended.command == "rm -rf target" and ended.ends_input


@pytest.mark.parametrize("command", ["bash -i", "exec bash", "env bash --norc", "sh", "zsh -i", "sudo -i", "ssh host",
                                     "tmux", "$SHELL", "cat | bash", "eval x", "python3 -i; bash"])
def test_a_job_whose_command_may_run_a_shell_reads_shell_input(command):
    assert reads_shell_input(analyze(command))


@pytest.mark.parametrize("command", ["python3 -i", "python3 -m pdb script.py", "vim -u NONE f.txt", "node",
                                     "./ask.sh", "psql"])
def test_other_programs_are_interpreters(command):
    assert not reads_shell_input(analyze(command))


@pytest.mark.parametrize("command", ["bash -i", "exec bash", "env sh"])
def test_a_lone_shell_reading_peons_input_is_not_opaque_for_it(command):
    analysis = analyze(command)
    assert analysis.opaque
    assert shell_input_note_cleared(analysis).opaque == ()
    assert shell_input_note_cleared(analysis).command == command


@pytest.mark.parametrize("command", ["cat x | bash", "bash < script", "bash -i; eval y", "sudo -s", "bash -c \"$X\""])
def test_any_other_opaque_shell_stays_opaque(command):
    analysis = analyze(command)
    assert shell_input_note_cleared(analysis).opaque == analysis.opaque
