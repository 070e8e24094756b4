"""What a ``bash`` command line will run, read with a real shell grammar (tree-sitter-bash).

Promises:

* :func:`analyze` is pure (no I/O, no clock) and total: any string gives a :class:`ShellAnalysis`,
  never an exception; unparsable input is an analysis that says so (``opaque``);
* every *simple command* bash could run is a :class:`Segment` — across ``;``, ``&&``, ``||``, ``|``,
  ``&``, newlines, subshells, groups, loops, conditionals, function bodies, command and process
  substitutions, here-document expansions, ``find -exec``, ``xargs`` and ``bash -c '<literal>'`` —
  normalised before it is matched: leading assignments and the wrappers in :data:`WRAPPERS` (with their
  own options) are removed and recorded, quotes and backslashes are removed from literal words;
* what cannot be seen statically is never guessed: a command name or wrapper operand computed at run
  time, ``eval``/``source``/``trap``/``alias``..., arithmetic evaluation, parse errors and
  here-documents whose end the grammar and bash might disagree on are listed in ``opaque`` (the policy
  treats them as matching every deny/ask rule); things that are visible but make a command line more
  than its segments (substitutions, assignments, function definitions, run-time arguments) are listed
  in ``dynamic`` (the policy never allows them by rules);
* every redirection that writes is listed in ``writes`` with its literal target (``None`` when the
  target is computed at run time) and the working directories the shell may be in at that point
  (``cd`` with a literal operand adds one; any other ``cd``/``pushd``/``popd`` makes it unknown).

The package, one idea per module: :mod:`~peon.approval.shell.result` (what an analysis says),
:mod:`~peon.approval.shell.words` (the value bash gives a word), :mod:`~peon.approval.shell.grammar` (the
tree-sitter parse), :mod:`~peon.approval.shell.checks` (where grammar and bash may disagree: opaque),
:mod:`~peon.approval.shell.walk` (the syntax tree into simple commands),
:mod:`~peon.approval.shell.commands` (what each simple command runs) and
:mod:`~peon.approval.shell.state` (what the walk gathers). This module only names the public API.
Which arguments make a program unsafe, and which facts need the file system, is
:mod:`peon.approval.rules`'s business.
"""

from peon.approval.shell.commands import (
    CODE_VARIABLES,
    COMMAND_VARIABLES,
    EXEC_OPTIONS,
    MAX_NESTING,
    NAME_BUILTINS,
    OPAQUE_BUILTINS,
    RUNNERS,
    SHELLS,
    WRAPPERS,
    Wrapper,
    code_variable,
)
from peon.approval.shell.grammar import parse_tree
from peon.approval.shell.result import MAX_SHOWN_SEGMENTS, MAX_SHOWN_WORD_CHARS, Redirect, Segment, ShellAnalysis, Write
from peon.approval.shell.state import MAX_STEPS
from peon.approval.shell.walk import MAX_COMMAND_BYTES, MAX_SEGMENTS, MAX_SYNTAX_DEPTH, analyze
from peon.approval.shell.words import literal

__all__ = [
    "CODE_VARIABLES", "COMMAND_VARIABLES", "EXEC_OPTIONS", "MAX_COMMAND_BYTES", "MAX_NESTING", "MAX_SEGMENTS",
    "MAX_SHOWN_SEGMENTS", "MAX_SHOWN_WORD_CHARS", "MAX_STEPS", "MAX_SYNTAX_DEPTH", "NAME_BUILTINS",
    "OPAQUE_BUILTINS", "RUNNERS", "SHELLS", "WRAPPERS", "Redirect", "Segment", "ShellAnalysis", "Wrapper", "Write",
    "analyze", "code_variable", "literal", "parse_tree",
]
