"""What makes a command line too much for an allow rule: programs' dangerous arguments, git's
repository-configured programs, and where redirections write. Pure: facts that need the file system
arrive as a :class:`ShellFacts`, gathered by the supervisor from the :class:`Questions` asked here.

Promises:

* :func:`command_blockers` and :func:`segment_blockers` return every reason an analysed command (or one
  simple command in it) may not be allowed by rules, as sentences a user can act on; an empty list is
  the only way to be allowed, and a question whose answer is missing counts as a reason (fail closed);
* the tables are the whole list of programs whose arguments are checked (docs/approval.md repeats them
  with the reasoning); any argument of such a program that is computed at run time is a reason, since it
  could be the dangerous one;
* deny and ask rules compare a simple command with their prefix by meaning, not spelling
  (:func:`invocation_may_match`), and :func:`hides_commands` names what makes a command able to run any
  command at all.

The package, one idea per module: :mod:`~peon.approval.rules.blockers` (the questions and the reasons,
put together), :mod:`~peon.approval.rules.facts` (what is asked of the file system and answered),
:mod:`~peon.approval.rules.writes` (where a command line writes), :mod:`~peon.approval.rules.arguments`
(programs' dangerous options), :mod:`~peon.approval.rules.scripts` (sed and awk programs),
:mod:`~peon.approval.rules.git` (what git runs that the command line does not show) and
:mod:`~peon.approval.rules.invocation` (a simple command read the way its program reads it). This module
only names the public API.
"""

from peon.approval.rules.arguments import UNSAFE_ARGUMENTS, ArgumentRule
from peon.approval.rules.blockers import command_blockers, questions, segment_blockers
from peon.approval.rules.facts import NO_FACTS, GitFacts, Questions, ShellFacts, rebased
from peon.approval.rules.git import GIT_PROGRAM_KEYS, git_key_runs_program, hides_commands
from peon.approval.rules.invocation import PROGRAM_OPTIONS, Invocation, invocation, invocation_may_match
from peon.approval.rules.scripts import sed_script_problem
from peon.approval.rules.writes import HARMLESS_DEVICES, WRITES_OPERANDS, written_operands

__all__ = [
    "GIT_PROGRAM_KEYS", "HARMLESS_DEVICES", "NO_FACTS", "PROGRAM_OPTIONS", "UNSAFE_ARGUMENTS", "WRITES_OPERANDS",
    "ArgumentRule", "GitFacts", "Invocation", "Questions", "ShellFacts", "command_blockers", "git_key_runs_program",
    "hides_commands", "invocation", "invocation_may_match", "questions", "rebased", "sed_script_problem",
    "segment_blockers", "written_operands",
]
