"""A rule's ``examples`` and ``not_examples``: lines the rule must (must not) decide, checked without I/O.

Promise: :func:`example_problem` says, as a sentence naming the example, why one example does not decide
as written, or None when it does. An example is what the rule's matchers read: a command line for a rule
with ``command_prefix`` (then ``path_prefix`` and the other matchers are not part of the example), a
workspace path for a rule with ``path_prefix`` only; a rule with neither takes no examples
(:func:`examples_refused`). A command line is matched exactly as :mod:`peon.approval.policy` matches it:

* an ``allow`` rule matches a line when every simple command of it is certainly ``prefix ...`` and
  nothing in it is hidden or computed at run time (the static half of what an allow rule needs; facts of
  the file system, such as where a redirection lands, are the policy's at call time);
* a ``deny`` or ``ask`` rule matches a line when any simple command may be ``prefix ...``, or when part
  of the line cannot be seen (fail closed: such a line is never a ``not_example`` of a deny rule).

This module owns checking examples; matching itself is the policy's.
"""

from __future__ import annotations

from collections.abc import Sequence

from peon.approval.policy import (
    Action, check_command_prefix, check_path_prefix, path_under, prefix_matches_exactly, prefix_may_match,
)
from peon.approval.rules import NO_FACTS, hides_commands
from peon.approval.shell import ShellAnalysis, analyze

MAX_EXAMPLES = 64  # per list, per rule: examples are documentation that runs, not a corpus
MAX_EXAMPLE_CHARS = 4096


def examples_refused(command_prefix: str | None, path_prefix: str | None,
                     examples: Sequence[str], not_examples: Sequence[str]) -> str | None:
    """Why a rule cannot carry these examples at all, or None."""
    if (examples or not_examples) and command_prefix is None and path_prefix is None:
        return ("examples and not_examples are command lines for a rule with command_prefix, or workspace paths "
                "for a rule with path_prefix; this rule has neither")
    for name, items in (("examples", examples), ("not_examples", not_examples)):
        if len(items) > MAX_EXAMPLES:
            return f"{name} has {len(items)} entries; a rule carries at most {MAX_EXAMPLES}"
        for item in items:
            if not item or len(item) > MAX_EXAMPLE_CHARS or "\0" in item:
                return f"{name} entry {item[:80]!r} must be 1 to {MAX_EXAMPLE_CHARS} characters without NUL"
    return None


def command_matches(decision: Action, command_prefix: str, line: str,
                    analysis: ShellAnalysis | None = None) -> tuple[bool, str]:
    """Whether a rule ``decision`` with ``command_prefix`` matches ``line``, and in words why."""
    prefix = check_command_prefix(command_prefix)
    analysis = analysis if analysis is not None and analysis.command == line else analyze(line)
    hidden = [*analysis.opaque, *filter(None, (hides_commands(s.words) for s in analysis.segments))]
    if decision != "allow":
        hit = next((s for s in analysis.segments if prefix_may_match(s, prefix)), None)
        if hit is not None:
            return True, f"the simple command {hit.source!r} may be {command_prefix!r}"
        if hidden:
            return True, f"Peon cannot see what it runs ({hidden[0]}), so a {decision} rule applies"
        return False, f"no simple command of it is {command_prefix!r}"
    if hidden:
        return False, f"Peon cannot see what it runs: {hidden[0]}"
    if analysis.dynamic:
        return False, analysis.dynamic[0]
    if not analysis.segments:
        return False, "it runs no command"
    for segment in analysis.segments:
        if not prefix_matches_exactly(segment, prefix, NO_FACTS):
            return False, f"the simple command {segment.source!r} is not certainly {command_prefix!r}"
    return True, f"every simple command of it is {command_prefix!r}"


def example_problem(decision: Action, command_prefix: str | None, path_prefix: str | None,
                    example: str, expected: bool) -> str | None:
    """Why ``example`` (``expected``: from ``examples``, else from ``not_examples``) does not decide as
    written, or None."""
    listed = "examples" if expected else "not_examples"
    if command_prefix is not None:
        matched, why = command_matches(decision, command_prefix, example)
    elif path_prefix is not None:
        matched = path_under(example, check_path_prefix(path_prefix))
        why = f"it is {'' if matched else 'not '}beneath {path_prefix!r}"
    else:
        return examples_refused(command_prefix, path_prefix, [example], [])
    if matched == expected:
        return None
    outcome = "does not match" if expected else "matches"
    return f"the {listed} entry {example!r} {outcome} this rule ({why})"
