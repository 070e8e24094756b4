"""The facts from the file system an allow rule needs: what is asked, what is answered, and the
workspace-relative places both are keyed on.

Promise: the supervisor answers a :class:`Questions` with a :class:`ShellFacts` (:mod:`peon.supervisor.approval.facts`);
everything here is a frozen value, and a place is a normal workspace-relative path or nothing:
:func:`workspace_relative` never returns a path that leaves the workspace. Owns this vocabulary; which
questions a command line raises is :mod:`peon.approval.rules.blockers`'s.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from peon.approval.shell import ShellAnalysis


@dataclass(frozen=True)
class GitFacts:
    """What a repository's own configuration makes git run, as found from one working directory."""

    program_keys: tuple[str, ...] = ()  # e.g. ("core.fsmonitor in .git/config",)
    hooks: tuple[str, ...] = ()  # executable hooks present
    aliases: tuple[str, ...] = ()  # alias names (lower-case)
    problem: str | None = None  # the configuration could not be read completely: unknown


@dataclass(frozen=True)
class Questions:
    """What an allow rule needs the file system to answer before it may allow a command line."""

    paths: frozenset[str] = frozenset()  # workspace-relative paths to resolve (do they stay inside?)
    git_cwds: frozenset[str] = frozenset()  # workspace-relative directories git runs in
    programs: frozenset[str] = frozenset()  # absolute program paths: the same file as the PATH lookup?
    readable: tuple[str, ...] | None = None  # the call runs sandboxed: read facts only beneath these

    def __bool__(self) -> bool:
        return bool(self.paths or self.git_cwds or self.programs)


@dataclass(frozen=True)
class ShellFacts:
    """The supervisor's answers to :class:`Questions` (a missing answer is never a yes)."""

    paths_inside: Mapping[str, bool] = field(default_factory=dict)
    git: Mapping[str, GitFacts] = field(default_factory=dict)
    same_program: Mapping[str, bool] = field(default_factory=dict)


NO_FACTS = ShellFacts()


def workspace_relative(target: str | None, cwd: str | None) -> str | None:
    """``target`` (relative to ``cwd``) as a normal workspace-relative path, or None if it is not one."""
    if target is None or cwd is None or target.startswith("/") or cwd.startswith("/"):
        return None
    joined = posixpath.normpath(posixpath.join(cwd, target))
    if joined == ".." or joined.startswith("../"):
        return None
    return joined


def rebased(analysis: ShellAnalysis, base: str) -> ShellAnalysis:
    """The analysis of a line run in workspace directory ``base`` (the call's ``cwd``): every working
    directory it records, relative to the workspace root instead of to ``base``."""
    if base in ("", "."):
        return analysis

    def moved(cwds: tuple[str | None, ...]) -> tuple[str | None, ...]:
        return tuple(None if c is None else c if c.startswith("/") else posixpath.normpath(posixpath.join(base, c))
                     for c in cwds)

    segments = tuple(replace(s, cwds=moved(s.cwds)) for s in analysis.segments)
    writes = tuple(replace(w, cwds=moved(w.cwds)) for w in analysis.writes)
    return replace(analysis, segments=segments, writes=writes)
