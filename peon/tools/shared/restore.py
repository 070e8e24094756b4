"""What a rewind writes or removes, resolved beneath the workspace root and rated as a write of each path.

Promises:

* :func:`rate_restore` resolves every path a rewind restores beneath the root's descriptor with the
  workers' resolver (:func:`peon.workers.fs.resolve`, the walk ``write`` and ``edit`` resolve by: a
  symlink that stays inside is followed, one that leaves is refused, the last component never followed
  — the rewind writes or removes the entry itself) and rates each with
  :func:`peon.tools.shared.target.rated_target`, the rule of ``write``, ``edit`` and ``apply_patch``:
  agent-control on the typed or resolved path or a directory it makes, secret-like on either.
  A path beneath another path the rewind restores (a directory a symlink replaced since the
  checkpoint: the rewind removes the link and makes the directory, never writing through it) is
  resolved up to that path and rated as typed. A path that is not a valid workspace path, or whose
  resolution fails (``outside_workspace``, ``symlink_loop``...) fails the whole rewind with that error's
  code, the path named and ``rule: rewind_path`` — nothing is restored.
* :class:`RestoreRating` is what the approver and the person at ``peon rewind`` are shown: the
  agent-control paths (with their entry) and the secret-like ones (with the reason), each list bounded
  by :data:`SHOWN_RATED`, the counts whole; ``agent_control`` carries the first entry, so the approval
  policy asks about the rewind whatever ``approval.filesystem`` says, as it does a write of that path.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from peon.approval.policy import AGENT_CONTROL
from peon.core.errors import ToolError
from peon.core.paths import WorkspacePath, parse_file_path
from peon.workers import fs

from peon.tools.shared.target import Target, rated_target

SHOWN_RATED = 200  # agent-control and secret-like paths listed each; the counts cover them all
REWIND_PATH_RULE = "rewind_path"


@dataclass(frozen=True)
class RestoreRating:
    """Every restored path's :class:`Target`, in the order given."""

    targets: tuple[Target, ...]

    @property
    def agent_control(self) -> list[Target]:
        return [target for target in self.targets if target.agent_control is not None]

    @property
    def secret(self) -> list[Target]:
        return [target for target in self.targets if target.secret is not None]

    def details(self) -> dict[str, Any]:
        """The approval's details of the rating (only what applies)."""
        out: dict[str, Any] = {}
        control, secret = self.agent_control, self.secret
        if control:
            out[AGENT_CONTROL] = control[0].agent_control
            out["agent_control_paths"] = [{"path": t.typed.normalized, "entry": t.agent_control}
                                          for t in control[:SHOWN_RATED]]
            out["agent_control_count"] = len(control)
        if secret:
            out["secret_paths"] = [{"path": t.typed.normalized, "reason": t.secret_reason()}
                                   for t in secret[:SHOWN_RATED]]
            out["secret_count"] = len(secret)
        return out

    def note(self) -> str:
        """What the risk reason says about the rated paths (empty when none is rated)."""
        parts = []
        control, secret = self.agent_control, self.secret
        if control:
            shown = ", ".join(repr(t.typed.normalized) for t in control[:5]) + (", …" if len(control) > 5 else "")
            parts.append(f"{len(control)} beneath agent-control paths (sandbox.protected), which steer later "
                         f"agents, git, the editor, the shell or CI: {shown}")
        if secret:
            shown = ", ".join(repr(t.typed.normalized) for t in secret[:5]) + (", …" if len(secret) > 5 else "")
            parts.append(f"{len(secret)} secret-like: {shown}")
        return "; ".join(parts)


def paths_digest(paths: Sequence[str]) -> str:
    """A hash of every path in order: what the executor compares with what was approved."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.encode("utf-8", "surrogatepass") + b"\0")
    return digest.hexdigest()


def _refused(text: str, exc: ToolError) -> ToolError:
    return ToolError(exc.code, f"the rewind would write or remove {text!r}, which it refuses: {exc.message}; "
                     "nothing was restored", {**(exc.details or {}), "path": text, "rule": REWIND_PATH_RULE})


def _replaced_above(parts: tuple[str, ...], restored: set[str]) -> int:
    """How many leading components of ``parts`` name another path the rewind restores (the longest), or 0."""
    for length in range(len(parts) - 1, 0, -1):
        if "/".join(parts[:length]) in restored:
            return length
    return 0


def _resolve(root: int, typed: WorkspacePath, restored: set[str]) -> fs.Resolution:
    above = _replaced_above(typed.parts, restored)
    if not above:
        return fs.resolve(root, typed, follow_final=False, must_exist=False, create_parents=True)
    replaced = fs.resolve(root, parse_file_path("/".join(typed.parts[:above])), follow_final=False,
                          must_exist=False, create_parents=True)
    # The entry there is removed and a directory made in its place: the path is written as typed.
    return fs.Resolution("/".join((replaced.path, *typed.parts[above:])), replaced.directory, None, None,
                         (*replaced.missing, *typed.parts[above - 1:-1]))


def rate_restore(root: int, paths: Iterable[str], env: Mapping[str, str],
                 protected: Iterable[str]) -> RestoreRating:
    """Every path of ``paths`` resolved beneath ``root`` and rated as a write (see the module's promises)."""
    given = list(paths)
    restored = set(given)
    entries = tuple(protected)
    targets = []
    for text in given:
        try:
            typed = parse_file_path(text)
            targets.append(rated_target(typed, _resolve(root, typed, restored), env, entries))
        except ToolError as exc:
            raise _refused(text, exc) from None
    return RestoreRating(tuple(targets))
