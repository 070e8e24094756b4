"""An analysed command line against an allow rule: the questions it raises, and every reason it may not be allowed.

Promise: :func:`questions` names exactly the file-system facts the reasons depend on, and
:func:`command_blockers` (the line as a whole: what cannot be seen, what is dynamic, where it writes) and
:func:`segment_blockers` (one simple command: its notes, its program's path, git, dangerous arguments)
return every reason as a sentence a user can act on; an empty list is the only way to be allowed, and a
question whose answer is missing counts as a reason (fail closed). Owns putting the rules together; each
rule is its own module's.
"""

from __future__ import annotations

from peon.approval.rules.arguments import argument_blockers
from peon.approval.rules.facts import Questions, ShellFacts, workspace_relative
from peon.approval.rules.git import git_blockers
from peon.approval.rules.writes import write_candidates, write_problem
from peon.approval.shell import Segment, ShellAnalysis


def questions(analysis: ShellAnalysis) -> Questions:
    """What the file system must answer before an allow rule may allow ``analysis``: the workspace paths
    it writes (do they stay inside?), the directories git runs in, the programs named by absolute path."""
    paths: set[str] = set()
    git_cwds: set[str] = set()
    programs: set[str] = set()
    for target, cwd in write_candidates(analysis):
        resolved = workspace_relative(target, cwd)
        if resolved is not None:
            paths.add(resolved)
    for segment in analysis.segments:
        first = segment.words[0] if segment.words else None
        if first is not None and first.startswith("/"):
            programs.add(first)
        if segment.program == "git":
            git_cwds.update(c for c in segment.cwds if c is not None and workspace_relative(".", c) is not None)
    return Questions(frozenset(paths), frozenset(git_cwds), frozenset(programs))


def command_blockers(analysis: ShellAnalysis, facts: ShellFacts) -> list[str]:
    """Reasons the command line as a whole may not be allowed by rules."""
    reasons = [f"Peon cannot see what it runs: {reason}" for reason in analysis.opaque]
    reasons.extend(analysis.dynamic)
    if not analysis.segments and not reasons:
        reasons.append("it runs no command")
    for target, cwd in write_candidates(analysis):
        reason = write_problem(target, cwd, facts)
        if reason and reason not in reasons:
            reasons.append(reason)
    return reasons


def segment_blockers(segment: Segment, facts: ShellFacts) -> list[str]:
    """Reasons this simple command may not be allowed by rules even when a rule names it."""
    reasons = list(segment.notes)
    program = segment.program
    first = segment.words[0] if segment.words else None
    if first is not None and "/" in first:
        if not first.startswith("/"):
            reasons.append(f"{first} is a program in the workspace, not the one on PATH")
        elif not facts.same_program.get(first, False):
            reasons.append(f"{first} is not the {program} found on the session's PATH")
    if program == "git":
        reasons.extend(git_blockers(segment, facts))
    reasons.extend(argument_blockers(segment))
    return reasons
