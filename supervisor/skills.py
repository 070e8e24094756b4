"""Skill discovery: which ``<root>/<name>/SKILL.md`` files a session offers through ``read_skill``.

Promises:

* two roots are searched at session start: the user's (``$XDG_CONFIG_HOME/peon/skills``, else
  ``$HOME/.config/peon/skills``, from the session's environment) and then the project's
  (``<workspace>/.peon/skills``, which must resolve inside the workspace). When both hold a skill of
  the same name, the user's wins: a cloned repository cannot shadow a user's skill;
* a candidate is a valid skill by the rules of :mod:`peon.core.skills`; every other candidate is reported
  in :attr:`Discovery.skipped` with the reason, never silently dropped (plain files and dot-entries in
  a root are not candidates);
* at most ``skills.max_skills`` skills are kept (user root first, then project, each in name order);
  at most :data:`MAX_ENTRIES_PER_ROOT` entries of a root and :data:`FRONT_MATTER_MAX_BYTES` bytes of
  each ``SKILL.md`` are read, and discovery stops after :data:`DISCOVERY_BUDGET_SECONDS`;
* no symlink is followed out of its root, and nothing outside it is ever opened for reading (not even
  a device or FIFO): the project root and its ``SKILL.md`` files are resolved beneath the workspace's
  descriptor by the rules of every workspace path (:func:`peon.workers.skills.open_project_skill_file`:
  relative symlinks that stay inside are followed, absolute ones and ones that climb out are refused),
  a user skill by ``O_PATH`` resolution under its root (:func:`peon.workers.skills.open_skill_file`).
  ``read_skill`` checks again, against the canonical path recorded here, when it runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peon.core.skills import (
    FRONT_MATTER_MAX_BYTES,
    PROJECT,
    PROJECT_SKILL_DIR,
    SKILL_FILE,
    USER,
    SkillProblem,
    SkillRecord,
    check_skill,
    prompt_arguments,
    parse_front_matter,
    split_front_matter,
)
from peon.core.errors import ErrorCode, ToolError
from peon.core.paths import parse_workspace_path
from peon.core.userdir import user_peon_dir
from peon.workers import fs
from peon.workers.skills import Outside, is_within, open_project_skill_file, open_skill_file, read_prefix

__all__ = ["Discovery", "SkillRecord", "discover", "load_skill", "project_skill_root", "user_skill_root"]

MAX_ENTRIES_PER_ROOT = 4096
DISCOVERY_BUDGET_SECONDS = 2.0


@dataclass
class Discovery:
    available: dict[str, SkillRecord] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)  # {"path", "reason"}

    def describe(self) -> dict[str, Any]:
        return {"available": [record.to_dict() for record in self.available.values()], "skipped": list(self.skipped)}


def user_skill_root(env: Mapping[str, str]) -> str | None:
    directory = user_peon_dir(env)
    return str(directory / "skills") if directory else None


def project_skill_root(workspace: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(workspace), *PROJECT_SKILL_DIR.split("/"))


def _canonical_root(root: str, origin: str, workspace: str, workspace_fd: int,
                    report: list[dict[str, str]]) -> str | None:
    if origin == PROJECT:  # resolved beneath the workspace, by the same rules as every workspace path
        try:
            resolution = fs.resolve(workspace_fd, parse_workspace_path(PROJECT_SKILL_DIR), follow_final=True,
                                    must_exist=False)
        except ToolError as exc:
            if exc.code is ErrorCode.NOT_FOUND:  # a link on the way leads nowhere; fs's sentence speaks of write
                reason = f"the project skill root cannot be resolved: there is no {exc.details.get('at')!r}"
            else:
                reason = ("the project skill root resolves outside the workspace"
                          if exc.code is ErrorCode.OUTSIDE_WORKSPACE else "the project skill root cannot be resolved")
                reason = f"{reason}: {exc.message}"
            report.append({"path": root, "reason": reason})
            return None
        if resolution.kind is None:
            return None
        if resolution.kind != "directory":
            report.append({"path": root, "reason": f"the {origin} skill root is not a directory"})
            return None
        return os.path.join(workspace, resolution.path)
    if not os.path.isdir(root):
        if os.path.lexists(root):
            report.append({"path": root, "reason": f"the {origin} skill root is not a directory"})
        return None
    return os.path.realpath(root)


def _candidates(root: str, report: list[dict[str, str]]) -> list[str]:
    names: list[str] = []
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                if len(names) >= MAX_ENTRIES_PER_ROOT:
                    report.append({"path": root, "reason": f"the root has more than {MAX_ENTRIES_PER_ROOT} entries; "
                                                           "the rest were not examined"})
                    break
                if entry.name.startswith("."):
                    continue
                if entry.is_dir(follow_symlinks=False) or entry.is_symlink():
                    names.append(entry.name)
    except OSError as exc:
        report.append({"path": root, "reason": f"the root cannot be listed: {exc.strerror}"})
    return sorted(names)


def load_skill(root: str, entry: str, origin: str, *, workspace: str = "", workspace_fd: int = -1) -> SkillRecord:
    """One candidate ``<root>/<entry>/SKILL.md`` as a record, or :class:`SkillProblem`. A project
    candidate (``workspace`` and ``workspace_fd`` given) is resolved beneath the workspace."""
    try:
        if origin == PROJECT:
            fd, real = open_project_skill_file(workspace_fd, workspace, root, entry)
        else:
            directory = os.path.join(root, entry)
            if os.path.islink(directory):
                target = os.path.realpath(directory)
                if not is_within(target, root):
                    raise Outside(f"the skill directory is a symlink to {target}, outside its root")
                if not os.path.isdir(target):
                    raise SkillProblem("the entry is a symlink to something that is not a directory")
            fd, real = open_skill_file(os.path.join(directory, SKILL_FILE), root)
    except FileNotFoundError:
        raise SkillProblem(f"no {SKILL_FILE} in the skill directory") from None
    except ToolError as exc:
        raise SkillProblem(exc.message) from None
    except OSError as exc:
        raise SkillProblem(f"{SKILL_FILE} cannot be opened: {exc.strerror}") from None
    try:
        head = read_prefix(fd, FRONT_MATTER_MAX_BYTES)
    except OSError as exc:
        raise SkillProblem(f"{SKILL_FILE} cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    fields = parse_front_matter(split_front_matter(head))
    name, description = check_skill(entry, fields)
    return SkillRecord(name, description, origin, root, real, prompt_arguments(fields))


def discover(workspace: str | os.PathLike[str], env: Mapping[str, str], max_skills: int,
             budget_seconds: float = DISCOVERY_BUDGET_SECONDS, *, root_fd: int = -1) -> Discovery:
    """Find the session's skills (see the module's promises). Project skills are resolved beneath
    ``root_fd`` (the session's pinned workspace) when given, else beneath the workspace opened by path."""
    workspace = os.fspath(workspace)
    # Discovery reads only the workspace and its pinned root (fs.workspace_root), never the configuration.
    with fs.workspace_root(fs.Pinned(Path(workspace), root_fd)) as workspace_fd:
        return _discover(workspace, workspace_fd, env, max_skills, budget_seconds)


def _discover(workspace: str, workspace_fd: int, env: Mapping[str, str], max_skills: int,
              budget_seconds: float) -> Discovery:
    found = Discovery()
    deadline = time.monotonic() + budget_seconds
    searched: set[str] = set()
    for origin, root in ((USER, user_skill_root(env)), (PROJECT, project_skill_root(workspace))):
        canonical = root and _canonical_root(root, origin, workspace, workspace_fd, found.skipped)
        if not canonical or canonical in searched:
            continue
        searched.add(canonical)
        entries = _candidates(canonical, found.skipped)
        for index, entry in enumerate(entries):
            if time.monotonic() >= deadline:
                found.skipped.append({"path": canonical, "reason": f"discovery stopped after {budget_seconds:g} s; "
                                      f"{len(entries) - index} entries of this root were not examined"})
                break
            _consider(found, canonical, entry, origin, max_skills, workspace, workspace_fd)
    return found


def _consider(found: Discovery, root: str, entry: str, origin: str, max_skills: int, workspace: str,
              workspace_fd: int) -> None:
    where = os.path.join(root, entry)
    try:
        record = load_skill(root, entry, origin, workspace=workspace, workspace_fd=workspace_fd)
    except SkillProblem as problem:
        found.skipped.append({"path": where, "reason": str(problem)})
        return
    kept = found.available.get(record.name)
    if kept is not None:
        found.skipped.append({"path": where, "reason": f"the {kept.origin} skill of the same name ({kept.path}) "
                              "takes precedence"})
    elif len(found.available) >= max_skills:
        found.skipped.append({"path": where, "reason": f"skills.max_skills ({max_skills}) valid skills were already "
                              "found"})
    else:
        found.available[record.name] = record
