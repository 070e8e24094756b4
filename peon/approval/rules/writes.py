"""Where a command line writes: its redirections and the operands of programs that write them.

Promise: :func:`write_candidates` lists every file a command line may write (a redirection that writes,
an operand of a program in :data:`WRITES_OPERANDS`) with each directory it may be relative to, and
:func:`write_problem` says why one of them keeps an allow rule from allowing: a name computed at run
time, a directory Peon cannot know, a place outside the workspace, or one the file system did not
confirm to stay inside (fail closed). Owns what counts as a write.
"""

from __future__ import annotations

from peon.approval.rules.facts import ShellFacts, workspace_relative
from peon.approval.shell import Segment, ShellAnalysis

# Programs whose operands are files they write (checked like redirections): which operands (None:
# all of them; 1: the second), and the options that take a value (skipped, not operands).
WRITES_OPERANDS: dict[str, tuple[int | None, frozenset[str]]] = {
    "tee": (None, frozenset()),
    "uniq": (1, frozenset({"-f", "-s", "-w", "--skip-fields", "--skip-chars", "--check-chars"})),
    "xxd": (1, frozenset({"-c", "-g", "-l", "-o", "-s", "-n", "-cols", "-groupsize", "-len", "-seek", "-name"})),
}


def written_operands(segment: Segment) -> list[str | None]:
    """The operands of a :data:`WRITES_OPERANDS` program that name files it writes."""
    which, with_value = WRITES_OPERANDS.get(segment.program or "", (0, frozenset()))
    if segment.program not in WRITES_OPERANDS:
        return []
    operands: list[str | None] = []
    words = segment.words[1:]
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            operands.extend(words[i:])
            break
        if word is not None and word.startswith("-") and word != "-":
            if word in with_value:
                i += 1
            continue
        operands.append(word)
    if which is None:
        return operands
    return operands[which:which + 1]


HARMLESS_DEVICES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/fd/1", "/dev/fd/2"})


def write_candidates(analysis: ShellAnalysis) -> list[tuple[str | None, str | None]]:
    """Every (target, directory) a command line may write: each redirection that writes and each written
    operand, with each working directory it may be relative to (None: computed at run time, or unknown)."""
    found: list[tuple[str | None, str | None]] = []
    for write in analysis.writes:
        found.extend((write.target, cwd) for cwd in write.cwds)
    for segment in analysis.segments:
        found.extend((operand, cwd) for operand in written_operands(segment) for cwd in segment.cwds
                     if operand != "-")
    return found


def write_problem(target: str | None, cwd: str | None, facts: ShellFacts) -> str | None:
    """Why writing ``target`` (relative to ``cwd``) keeps an allow rule from allowing, or None."""
    if target is None:
        return "it writes to a file whose name is computed at run time"
    if target in HARMLESS_DEVICES:
        return None
    if cwd is None and not target.startswith("/"):
        return f"it writes to {target} in a directory Peon cannot know (after cd)"
    relative = workspace_relative(target, cwd or ".")
    if relative is None:
        return f"it writes to {target}, outside the workspace"
    inside = facts.paths_inside.get(relative)
    if inside is None:
        return f"it writes to {relative}, which was not checked"
    if not inside:
        return f"it writes to {relative}, which resolves outside the workspace (a symbolic link)"
    return None
