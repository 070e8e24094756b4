"""Opening a skill's ``SKILL.md`` without leaving its root: the contained reads of ``read_skill``
(in the worker) and of discovery (in the supervisor).

Promises:

* :func:`open_skill_file` opens an absolute path for reading only if, with every symlink resolved, it
  is a regular file inside the given canonical root. It first resolves with ``O_PATH``, which opens
  nothing, so no file outside the root — not even a FIFO or a device — is ever opened for reading.
* :func:`open_skill` opens the ``SKILL.md`` of a discovered :class:`~peon.core.skills.SkillRecord` and
  insists that it is still the file discovery recorded. A project skill is resolved beneath the
  session's pinned workspace root (:func:`peon.workers.fs.workspace_root`) from its workspace-relative path
  ``.peon/skills/<name>/SKILL.md``: a symlink that leaves the workspace is refused before anything is
  opened, even if the workspace itself was renamed or replaced since the session started. A user skill
  lives outside the workspace and is opened with :func:`open_skill_file` under its root. Either way the
  file must resolve to the canonical path recorded at discovery, else :class:`Moved`.
"""

from __future__ import annotations

import os
import stat

from peon.core.errors import ErrorCode, ToolError
from peon.core.paths import parse_workspace_path
from peon.core.skills import PROJECT, PROJECT_SKILL_DIR, SKILL_FILE, SkillProblem, SkillRecord
from peon.core.tool import SessionView

from peon.workers import fs


def is_within(path: str, root: str) -> bool:
    """Whether the canonical ``path`` is ``root`` or inside it, compared by whole components."""
    return path == root or path.startswith(root.rstrip("/") + "/")


class Outside(SkillProblem):
    """The path resolves outside its root."""


class NotRegular(SkillProblem):
    """The path resolves to something other than a regular file."""


def open_skill_file(path: str, root: str) -> tuple[int, str]:
    """Open ``path`` for reading only if it resolves to a regular file inside ``root`` (canonical).

    Returns the descriptor and the canonical path that was opened. The path is first resolved with
    ``O_PATH``, which opens nothing, so no file outside the root is ever opened for reading.
    """
    handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        real = os.readlink(f"/proc/self/fd/{handle}")
        if not is_within(real, root):
            raise Outside(f"{path} resolves to {real}, outside its root {root}")
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegular(f"{real} is not a regular file")
        fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    finally:
        os.close(handle)
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):  # cannot happen through the magic link
        os.close(fd)
        raise Outside(f"{path} changed while it was opened")
    return fd, real


def read_prefix(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from the descriptor's position; fewer only at end of file."""
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(fd, limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


class Moved(SkillProblem):
    """The skill's path now leads to another file than the one discovery recorded."""

    def __init__(self, now: str):
        super().__init__(f"that path now leads to {now}")
        self.now = now


def open_project_skill_file(workspace_fd: int, workspace: str, root: str, name: str) -> tuple[int, str]:
    """Open ``.peon/skills/<name>/SKILL.md`` beneath the workspace's descriptor for reading, only if it
    resolves to a regular file inside the canonical project ``root``.

    ``workspace`` is the workspace's canonical path, used only to name the file. Returns the
    descriptor and the canonical path opened. Raises :class:`FileNotFoundError`, :class:`Outside`,
    :class:`NotRegular` or a :class:`~peon.core.errors.ToolError` for any other resolution failure.
    """
    typed = parse_workspace_path(f"{PROJECT_SKILL_DIR}/{name}/{SKILL_FILE}")
    try:
        resolution = fs.resolve(workspace_fd, typed, follow_final=True, must_exist=True)
    except ToolError as exc:
        if exc.code is ErrorCode.NOT_FOUND:
            raise FileNotFoundError(exc.message) from None
        if exc.code is ErrorCode.OUTSIDE_WORKSPACE:
            raise Outside(f"it resolves outside its root and the workspace: {exc.message}") from None
        raise
    real = os.path.join(workspace, resolution.path)
    if not is_within(real, root):
        raise Outside(f"{typed.text} resolves to {real}, outside its root {root}")
    if resolution.kind != "regular file":
        raise NotRegular(f"{real} is not a regular file")
    try:
        fd = fs.open_beneath(workspace_fd, parse_workspace_path(resolution.path),
                             os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY, fs.Resolver.WALK)
    except ToolError as exc:
        raise Moved(f"another file ({exc.message})") from None
    opened = os.fstat(fd)
    if fs.FileId.of(opened) != resolution.file or not stat.S_ISREG(opened.st_mode):
        os.close(fd)
        raise Moved(f"another file at {real} (it changed while it was opened)")
    return fd, real


def open_skill(record: SkillRecord, session: SessionView) -> int:
    """A descriptor of the record's ``SKILL.md``, opened for reading (see the module's promises).

    Raises :class:`FileNotFoundError` (gone), :class:`Outside`, :class:`NotRegular`, :class:`Moved`, or
    a :class:`~peon.core.errors.ToolError` from the workspace's resolution rules.
    """
    if record.origin == PROJECT:
        with fs.workspace_root(session) as workspace_fd:
            fd, real = open_project_skill_file(workspace_fd, os.fspath(session.workspace), record.root, record.name)
    else:
        fd, real = open_skill_file(record.path, record.root)
    if real != record.path:
        os.close(fd)
        raise Moved(real)
    return fd
