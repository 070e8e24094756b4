"""What a write to a running job will make it run: the approval's view of ``job_write`` (pure).

Promise: text typed into a shell is a command, judged exactly as a ``bash`` command would be.

* :func:`reads_shell_input` decides, from the analysis of a job's command, whether what is written to
  it goes to a shell: any simple command that is a shell or runs one (``bash``, ``sh``, ``zsh``,
  ``ssh``, ``su``, ``tmux``..., as program or wrapper), a command name computed at run time, or a line
  Peon cannot see through — fail closed: when in doubt it is a shell.
* :func:`type_into_shell` follows a shell's line editing over the tokens of one write
  (:mod:`peon.core.keys`) and returns the text the shell will run — every line submitted by ``Enter``
  (or, on a pipe, by the end of input) — and the state of the line being typed afterwards. On a
  terminal it models only what readline, zle and the kernel's line discipline agree on with the cursor
  at the end of the line: printable text, ``Enter``, ``Backspace`` (of an ASCII character), ``C-u``
  (the line is discarded), ``C-c`` (likewise) and ``C-d`` (the end of input on an empty line, nothing
  otherwise). Keys that move the cursor or recall or complete text (arrows, ``Home``, ``End``,
  ``Delete``, ``Tab``...) make the line *unknown* until ``C-u`` or ``C-c`` discards it, and a line
  submitted while unknown is refused; any other key (``Escape``, ``C-o``, ``C-x``...) may run the line
  or change the editor and is refused outright. On a pipe nothing is edited: every character is part
  of the line as written.
* Lines the shell has not finished reading (an open quote, a ``\\`` at the end, an unfinished ``if``
  or here-document: the analysis could not parse them) are *carried*: the next submitted lines are
  judged together with them, as the shell will run them, up to :data:`MAX_CARRY_CHARS`.
* the terminal's own special characters are the defaults this follows: the worker writes nothing to a
  terminal whose special characters were mapped to printable ones
  (:func:`peon.workers.job_input.terminal_keeps_its_keys`); command allow rules never allow a typed
  line (:mod:`peon.approval.policy`): the shell's state, unseen, decides what it runs too;
* :func:`shell_input_note_cleared` takes back, for a job whose input Peon controls, the one thing a
  lone shell (``bash -i``) is opaque for — that it reads its commands from its input — since every
  line written to it is judged as above.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from peon.approval.shell import RUNNERS, SHELLS, ShellAnalysis, analyze
from peon.core.keys import Token, encode

# Programs whose input is a shell's (or may be): shells, and the programs that run one on the terminal.
SHELL_PROGRAMS = SHELLS | RUNNERS | frozenset({"sudo", "doas", "su", "ssh", "mosh", "telnet", "docker", "podman",
                                               "kubectl", "nix-shell", "toolbox", "distrobox", "fish", "xonsh"})
MAX_CARRY_CHARS = 256 * 1024  # unfinished input judged with the next lines
_READS_INPUT = "reads the commands it runs from its input"
# Keys after which the line being typed is not known (but nothing was run by them).
_UNKNOWN_MAKING = frozenset({"Tab", "Up", "Down", "Left", "Right", "Home", "End", "Delete", "Insert", "PageUp",
                             "PageDown", "C-a", "C-b", "C-e", "C-f", "C-p", "C-n", "C-r", "C-s", "C-w", "C-k",
                             "C-y", "C-t", "C-l"})


@dataclass(frozen=True)
class LineState:
    """A shell job's input as Peon follows it: the line being typed (None: not known) and the
    submitted lines the shell has not finished reading (``carry``)."""

    line: str | None = ""
    carry: str = ""


@dataclass(frozen=True)
class Typed:
    """What one write does to a shell: ``command`` is the text it will run (None: it submits no line),
    analysed as ``analysis``; ``after`` the state once written; ``refused`` why the write's effect cannot
    be known (then it must not be written)."""

    command: str | None
    analysis: ShellAnalysis | None
    after: LineState
    refused: str | None = None
    ends_input: bool = False  # the shell reads the end of its input (C-d on an empty line, eof on a pipe)


def reads_shell_input(analysis: ShellAnalysis) -> bool:
    """Whether input written to a job running the analysed command may reach a shell (see the promise)."""
    if analysis.opaque and not _only_reads_input(analysis):
        return True
    for segment in analysis.segments:
        if segment.program is None or segment.program in SHELL_PROGRAMS:
            return True
        if any(wrapper.rsplit("/", 1)[-1] in SHELL_PROGRAMS for wrapper in segment.wrappers):
            return True
    return False


def _only_reads_input(analysis: ShellAnalysis) -> bool:
    return all(note.endswith(_READS_INPUT) for note in analysis.opaque)


def shell_input_note_cleared(analysis: ShellAnalysis) -> ShellAnalysis:
    """``analysis`` of a job whose input is Peon's (a terminal or a pipe ``job_write`` feeds) without the
    note that its lone shell reads commands from its input: only for one simple command, a shell,
    without redirections (``bash -i``, ``exec bash``, ``env sh``); any other analysis is returned as it is."""
    if len(analysis.segments) != 1 or not analysis.opaque or not _only_reads_input(analysis):
        return analysis
    segment = analysis.segments[0]
    if segment.program not in SHELLS or segment.redirects or segment.origin:
        return analysis
    return replace(analysis, opaque=())


def type_into_shell(state: LineState, tokens: list[Token], *, terminal: bool, eof: bool) -> Typed:
    """What writing ``tokens`` (then, with ``eof``, the end of input) to a shell in ``state`` runs."""
    line = state.line
    submitted: list[str] = []
    ends_input = interrupted = False  # interrupted: C-c after the last line submitted
    if not terminal:  # a pipe: the bytes are the script, unedited
        for token in tokens:
            if token.key == "Enter":
                submitted.append(line or "")
                line = ""
            else:
                line = (line or "") + (token.text if token.key is None else
                                       encode([token], terminal=False).decode("utf-8", "replace"))
        if eof:
            if line:
                submitted.append(line)
            line, ends_input = "", True
        return _judged(state, submitted, line, ends_input, interrupted)
    for token in ([*tokens, Token(key="C-d")] if eof else tokens):
        key = token.key
        if key is None:
            line = None if line is None else line + token.text
        elif key == "Enter":
            if line is None:
                return _refused(state, "a line whose text Peon could not follow (after a key that moves the "
                                       "cursor, recalls or completes text) would be run; type C-u first to "
                                       "clear the line, then the whole command")
            submitted.append(line)
            line, interrupted = "", False
        elif key == "Backspace":
            if line:  # a non-ASCII character: one character or one byte erased, the shell and terminal may differ
                line = line[:-1] if line[-1].isascii() else None
        elif key in ("C-u", "C-c"):
            line = ""
            interrupted = interrupted or key == "C-c"  # C-c also drops an unfinished command
        elif key == "C-d":
            if line == "":
                ends_input = True
        elif key in _UNKNOWN_MAKING:
            line = None
        else:
            return _refused(state, f"the key {key} may run the line being typed or change how the shell edits "
                                   "it, so Peon cannot know what would run; write text and Enter instead")
    return _judged(state, submitted, line, ends_input, interrupted)


def _judged(state: LineState, submitted: list[str], line: str | None, ends_input: bool,
            interrupted: bool) -> Typed:
    if not submitted:
        return Typed(None, None, LineState(line, "" if interrupted else state.carry), ends_input=ends_input)
    command = "\n".join([state.carry, *submitted] if state.carry else submitted)
    analysis = analyze(command)
    carry = command if _unfinished(command, analysis) and not interrupted else ""
    if len(carry) > MAX_CARRY_CHARS:
        return _refused(state, f"the shell would still be reading an unfinished command of more than "
                               f"{MAX_CARRY_CHARS} characters; end it (or C-c) first")
    return Typed(command, analysis, LineState(line, carry), ends_input=ends_input)


def _unfinished(command: str, analysis: ShellAnalysis) -> bool:
    """Whether the shell may still be reading ``command`` (it could not be parsed — or was too long to be —,
    or ends in ``\\``)."""
    return command.endswith("\\") or any(note.startswith(("the command could not be parsed", "the command is longer"))
                                          for note in analysis.opaque)


def _refused(state: LineState, why: str) -> Typed:
    return Typed(None, None, state, refused=why)
