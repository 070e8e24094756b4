"""The file-system facts an allow rule needs, gathered by the supervisor before the policy decides.

Promises:

* :func:`gather` answers exactly the :class:`~peon.approval.rules.Questions` asked and nothing else, reading
  only small regular files (opened non-blocking, at most :data:`MAX_FILE_BYTES`), so a FIFO, a device
  or a huge file planted in the workspace cannot hang or flood the supervisor;
* anything it cannot establish is answered "unsafe" (a path that does not resolve inside the
  workspace, a program that is not the one on PATH, a git configuration with a ``problem``): the
  policy then does not allow by rules, and asks;
* a ``.git`` directory counts only when git would accept it (``HEAD``, ``objects/``, ``refs/``), so a
  decoy never hides the repository above it; submodules' configurations are read too; includes are
  followed within a budget of files and bytes (past it: a problem), so no file fans out into many;
* when the call runs in the OS sandbox, only files beneath the paths the sandbox lets the command read
  are read (:attr:`~peon.approval.rules.Questions.readable`): what the command cannot read cannot steer it, and
  the supervisor reads nothing on its behalf it could not.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

from peon.approval.gitconfig import parse_git_config
from peon.approval.rules import GitFacts, Questions, ShellFacts, git_key_runs_program

MAX_FILE_BYTES = 1 << 20
MAX_INCLUDE_DEPTH = 10
MAX_HOOKS_LISTED = 1000
MAX_CONFIG_FILES = 64  # configuration files (includes and submodules' configs) read for one directory
MAX_CONFIG_BYTES = 4 << 20  # and their bytes together


def gather(questions: Questions, workspace: Path, env: Mapping[str, str]) -> ShellFacts:
    root = os.path.realpath(workspace)
    paths = {path: _inside(root, os.path.join(root, path)) for path in questions.paths}
    git = {cwd: git_facts(Path(root) / cwd, env, questions.readable) for cwd in questions.git_cwds}
    programs = {path: _same_program(path, env) for path in questions.programs}
    return ShellFacts(paths, git, programs)


def _inside(root: str, path: str) -> bool:
    resolved = os.path.realpath(path)
    return resolved == root or resolved.startswith(root.rstrip("/") + "/")


def _same_program(path: str, env: Mapping[str, str]) -> bool:
    search = os.pathsep.join(p for p in (env.get("PATH") or os.defpath).split(os.pathsep) if p.startswith("/"))
    found = shutil.which(os.path.basename(path), path=search)
    if found is None or not os.path.exists(path):
        return False
    return os.path.realpath(found) == os.path.realpath(path)


# -- git ---------------------------------------------------------------------------------------------


class _Reader:
    """Reads configuration files within the budget, and only where the command could read them."""

    def __init__(self, readable: tuple[str, ...] | None):
        self.readable = None if readable is None else tuple(p.rstrip("/") + "/" for p in readable)
        self.files = 0
        self.bytes = 0

    def visible(self, path: Path) -> bool:
        if self.readable is None:
            return True
        real = os.path.realpath(path)
        return any((real + "/").startswith(root) for root in self.readable)

    def read(self, path: Path) -> str | None:
        if not self.visible(path):
            return None  # the sandboxed command cannot read it either
        text = _read_small(path)
        if text is None:
            return None
        self.files += 1
        self.bytes += len(text)
        if self.files > MAX_CONFIG_FILES:
            raise ValueError(f"the configuration spans more than {MAX_CONFIG_FILES} files (includes, submodules)")
        if self.bytes > MAX_CONFIG_BYTES:
            raise ValueError(f"the configuration files are larger than {MAX_CONFIG_BYTES} bytes together")
        return text

    def is_dir(self, path: Path) -> bool:
        return self.visible(path) and path.is_dir()

    def exists(self, path: Path) -> bool:
        return self.visible(path) and (path.is_file() or path.is_symlink())


def _read_small(path: Path) -> str | None:
    """A small regular file's text, None if it does not exist; OSError/ValueError for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path} is not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise ValueError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
        data = os.read(fd, MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    return data.decode("utf-8", "surrogateescape")


def is_git_directory(path: Path, reader: _Reader | None = None) -> bool:
    """Whether git would accept ``path`` as a git directory: ``HEAD``, and ``objects/`` and ``refs/``
    there or in the directory its ``commondir`` names."""
    reader = reader or _Reader(None)
    if not reader.exists(path / "HEAD"):
        return False
    common = path
    pointer = reader.read(path / "commondir") if reader.exists(path / "commondir") else None
    if pointer is not None:
        target = pointer.strip()
        common = Path(target) if target.startswith("/") else path / target
    return reader.is_dir(common / "objects") and reader.is_dir(common / "refs")


def find_git_dir(start: Path, env: Mapping[str, str], reader: _Reader | None = None) -> Path | None:
    """The git directory git would use when run in ``start`` (or a directory it could use: the search
    never stops earlier than git's, so it may find more, never less)."""
    reader = reader or _Reader(None)
    named = env.get("GIT_DIR")
    if named:
        return (start / named) if not named.startswith("/") else Path(named)
    current = Path(os.path.realpath(start))
    while True:
        dotgit = current / ".git"
        if reader.is_dir(dotgit) and is_git_directory(dotgit, reader):
            return dotgit  # a .git directory git would not accept is passed over, as git does
        if reader.visible(dotgit) and dotgit.is_file():
            text = _read_small(dotgit) or ""
            line = text.strip()
            if not line.startswith("gitdir:"):
                raise ValueError(f"{dotgit} is a file without a gitdir line")
            target = line[len("gitdir:"):].strip()
            return Path(target) if target.startswith("/") else current / target
        if is_git_directory(current, reader):
            return current  # a bare repository (git uses it when run inside it)
        if current.parent == current:
            return None
        current = current.parent


def git_facts(cwd: Path, env: Mapping[str, str], readable: tuple[str, ...] | None = None) -> GitFacts:
    """What the repository git would use in ``cwd`` configures; ``readable``: only files beneath these
    paths are read (the sandbox's view), None: any."""
    reader = _Reader(readable)
    try:
        git_dir = find_git_dir(cwd, env, reader)
        if git_dir is None:
            return GitFacts()
        common = git_dir
        pointer = reader.read(git_dir / "commondir")
        if pointer is not None:
            target = pointer.strip()
            common = Path(target) if target.startswith("/") else git_dir / target
        found: list[str] = []
        aliases: list[str] = []
        files = [git_dir / "config", git_dir / "config.worktree"]
        if common != git_dir:
            files.append(common / "config")
        for config in files:
            _scan(reader, config, env, found, aliases, 0)
        for config in _submodule_configs(reader, common / "modules"):
            _scan(reader, config, env, found, [], 0)
        hooks = _hooks(common / "hooks") if reader.visible(common / "hooks") else ()
        return GitFacts(tuple(dict.fromkeys(found)), hooks, tuple(dict.fromkeys(aliases)))
    except (OSError, ValueError, RecursionError) as exc:
        return GitFacts(problem=str(exc) or type(exc).__name__)


def _submodule_configs(reader: _Reader, modules: Path) -> list[Path]:
    """The ``config`` of every submodule's git directory (``modules/**/config``), nested ones too."""
    if not reader.is_dir(modules):
        return []
    found: list[Path] = []
    stack = [modules]
    visited = 0
    while stack:
        directory = stack.pop()
        visited += 1
        if visited > MAX_HOOKS_LISTED:
            raise ValueError(f"{modules} holds more than {MAX_HOOKS_LISTED} directories")
        if (directory / "config").is_file() and directory != modules:
            found.append(directory / "config")
            if len(found) > MAX_CONFIG_FILES:
                raise ValueError(f"more than {MAX_CONFIG_FILES} submodule configurations to check")
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False) and entry.name not in ("objects", "refs", "logs", "hooks"):
                    stack.append(Path(entry.path))
    return found


def _scan(reader: _Reader, path: Path, env: Mapping[str, str], found: list[str], aliases: list[str],
          depth: int) -> None:
    if depth > MAX_INCLUDE_DEPTH:
        raise ValueError(f"includes nested deeper than {MAX_INCLUDE_DEPTH} at {path}")
    text = reader.read(path)
    if text is None:
        return
    parsed = parse_git_config(text)
    if parsed.problem:
        raise ValueError(f"{path}: {parsed.problem}")
    for key, value in parsed.entries:
        if git_key_runs_program(key, value):
            found.append(f"{key} in {path}")
        if key.startswith("alias."):
            aliases.append(key[len("alias."):].lower())
    for include in parsed.includes():
        if include.startswith("~/"):
            home = env.get("HOME")
            if not home:
                raise ValueError(f"{path} includes {include} and HOME is not set")
            target = Path(home) / include[2:]
        else:
            target = Path(include) if include.startswith("/") else path.parent / include
        _scan(reader, target, env, found, aliases, depth + 1)


def _hooks(directory: Path) -> tuple[str, ...]:
    try:
        entries = os.scandir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return ()
    hooks = []
    with entries:
        for count, entry in enumerate(entries):
            if count >= MAX_HOOKS_LISTED:
                raise ValueError(f"{directory} has more than {MAX_HOOKS_LISTED} entries")
            if entry.name.endswith(".sample"):
                continue
            try:
                info = entry.stat()
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and info.st_mode & 0o111:
                hooks.append(entry.name)
    return tuple(sorted(hooks))
