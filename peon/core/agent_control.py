"""The agent-control list: the workspace paths that make another program run code or steer an agent —
git, Peon, the coding agents, editors, the shell, CI — and what each of its readers makes of it.

Promises:

* :data:`AGENT_CONTROL_PATHS` is the one list, grouped by what runs or reads each path
  (:data:`GROUPS`): the default of ``sandbox.protected``, which a user may replace and a project may
  only add to. Entries are workspace-relative paths; one that starts with ``**/`` names that path at any
  depth (``**/.git``: every repository's git directory or ``gitdir:`` file; ``**/AGENTS.md``: an
  instruction file in any directory). Nothing else of Peon's holds a copy of it.
* :func:`entry_for` is the file tools' decision: the entry a path (typed or resolved) is, or is beneath
  — the most specific one when several apply — compared without regard to case (a case-folding file
  system opens ``.GIT/config`` as ``.git/config``). ``write``, ``edit`` and ``apply_patch`` carry it as
  ``agent_control`` in their details and are asked whatever ``approval.filesystem`` says; reading any
  of these paths is free.
* :func:`created_entry` is the same decision for the directories a create makes: one that is an entry,
  is beneath one, or would hold one (a new ``.git`` holds ``.git/hooks``) is agent-control.
* :func:`command_paths` is the sandbox plan's reading of the same entries: each at the root of a
  writable directory (``**/`` dropped: the mount view covers what exists, it does not search the tree),
  without the git directory as a whole — git writes its objects, index and refs there on every commit,
  so commands get its redirections one by one (hooks, config, commondir, info, worktrees, alternates).
* :func:`check_entry` says why a configured entry is not one (``**`` anywhere but first, absolute,
  ``.``, ``..`` or empty components), or None.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

ANYWHERE = "**/"
GIT_DIR = ".git"


@dataclass(frozen=True)
class Group:
    """Paths that one kind of program runs or reads, and why writing them is agent-control."""

    why: str
    paths: tuple[str, ...]


GROUPS: tuple[Group, ...] = (
    Group("git runs them on the user's next git command (hooks, configuration, where the repository really is)",
          ("**/.git", ".git/hooks", ".git/config", ".git/commondir", ".git/info", ".git/worktrees",
           ".git/objects/info/alternates", ".gitmodules", ".husky", ".pre-commit-config.yaml", "lefthook.yml",
           ".lefthook.yml")),
    Group("Peon reads them: its project configuration and skills", (".peon",)),
    Group("a coding agent runs them when it starts: settings, hooks, MCP servers, commands",
          (".claude", ".mcp.json", ".codex", ".agents", ".gemini", ".cursor", ".windsurf", ".continue", ".roo",
           ".kiro", ".amazonq", ".junie", ".opencode", "opencode.json", ".aider.conf.yml")),
    Group("a coding agent follows them: instruction files",
          ("**/AGENTS.md", "**/AGENTS.override.md", "**/CLAUDE.md", "**/CLAUDE.local.md", "**/GEMINI.md",
           ".cursorrules", ".windsurfrules", ".clinerules", ".github/copilot-instructions.md", ".github/instructions")),
    Group("an editor runs them when it opens the folder: tasks, launch configurations, settings, dev containers",
          (".vscode", ".idea", ".zed", ".devcontainer")),
    Group("the shell runs them on entering the directory (direnv, mise)", (".envrc", ".mise.toml", "mise.toml")),
    Group("CI runs them with the repository's secrets on the next push",
          (".github/workflows", ".github/actions", ".gitlab-ci.yml", ".circleci")),
)

AGENT_CONTROL_PATHS: tuple[str, ...] = tuple(path for group in GROUPS for path in group.paths)


def check_entry(entry: str) -> str | None:
    """Why ``entry`` is not an agent-control entry, or None."""
    parts = entry.split("/")
    if not entry or entry.startswith("/") or "\0" in entry or any(p in ("", ".", "..") for p in parts):
        return f"{entry!r} must be a relative path without '.', '..' or empty parts"
    if "**" in parts[1:] or (parts[0] == "**" and len(parts) == 1):
        return f"{entry!r}: '**' may only start an entry, followed by a path ('**/AGENTS.md')"
    return None


def _pattern(entry: str) -> tuple[bool, tuple[str, ...]]:
    anywhere = entry.startswith(ANYWHERE)
    return anywhere, tuple(entry[len(ANYWHERE):].lower().split("/") if anywhere else entry.lower().split("/"))


def entry_for(parts: tuple[str, ...], protected: Iterable[str]) -> str | None:
    """The entry of ``protected`` that ``parts`` (a workspace-relative path) is, or is beneath; the most
    specific when several are, the first of those when they tie (see the module's promises)."""
    folded = tuple(part.lower() for part in parts)
    best: str | None = None
    best_length = 0
    for entry in protected:
        anywhere, pattern = _pattern(entry)
        length = len(pattern)
        if length <= best_length:
            continue
        starts = range(len(folded) - length + 1) if anywhere else range(1 if len(folded) >= length else 0)
        if any(folded[start:start + length] == pattern for start in starts):
            best, best_length = entry, length
    return best


def created_entry(directories: Iterable[str], protected: Iterable[str]) -> tuple[str, str] | None:
    """(the entry, the directory) for the first directory to be created that is an entry, is beneath one,
    or holds one (making ``.git`` makes the place of ``.git/hooks``), or None."""
    entries = tuple(protected)
    for directory in directories:
        parts = tuple(directory.split("/"))
        entry = entry_for(parts, entries) or _held_by(tuple(part.lower() for part in parts), entries)
        if entry is not None:
            return entry, directory
    return None


def _held_by(folded: tuple[str, ...], entries: tuple[str, ...]) -> str | None:
    for entry in entries:
        anywhere, pattern = _pattern(entry)
        tails = range(len(folded)) if anywhere else range(1)
        if any(len(folded) - start < len(pattern) and folded[start:] == pattern[:len(folded) - start]
               for start in tails):
            return entry
    return None


def command_paths(protected: Iterable[str]) -> tuple[str, ...]:
    """The paths the sandbox keeps read-only beneath each writable directory (see the module's promises)."""
    out: dict[str, None] = {}
    for entry in protected:
        path = entry[len(ANYWHERE):] if entry.startswith(ANYWHERE) else entry
        if path != GIT_DIR:
            out[path] = None
    return tuple(out)
