"""What one analysis gathers as it walks a command line, and its budget of work.

Promise: a :class:`State` records segments, opaque and dynamic reasons (each reason once, in the order
found) and writes, with the working directories the shell may be in; :meth:`State.step` stops the walk
once :data:`MAX_STEPS` syntax nodes were looked at, making the line opaque: the work per line is bounded
whatever its shape. Owns that record; the walk (:mod:`peon.approval.shell.walk`) and the commands
(:mod:`peon.approval.shell.commands`) fill it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from peon.approval.shell.result import Segment, Write

MAX_STEPS = 400_000  # syntax nodes the walk may look at (linear work, bounded); past it the line is opaque


@dataclass
class State:
    """The analysis of one command line while it is walked (nested scripts walk into the same one)."""

    source: bytes  # the bytes of the line being walked now (a nested script's while it is walked)
    # The walk, reading a literal command line another shell runs (bash -c, PAGER=...) into this same
    # state: the commands module follows such lines through it.
    walk_script: Callable[[State, str, str], None]
    segments: list[Segment] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)
    dynamic: list[str] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    cwds: list[str | None] = field(default_factory=lambda: ["."])
    depth: int = 0  # nested shells (bash -c, PAGER=...)
    nesting: int = 0  # syntax nesting of the walk (substitutions, subshells, groups)
    steps: int = 0  # syntax nodes looked at, against MAX_STEPS

    def step(self) -> bool:
        """Count one node; False (and the line opaque) once the budget is spent."""
        self.steps += 1
        if self.steps <= MAX_STEPS:
            return True
        self.add_opaque(f"the command is too large to analyse (more than {MAX_STEPS} syntax nodes)")
        return False

    def add_opaque(self, reason: str) -> None:
        if reason not in self.opaque:
            self.opaque.append(reason)

    def add_dynamic(self, reason: str) -> None:
        if reason not in self.dynamic:
            self.dynamic.append(reason)
