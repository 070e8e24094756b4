"""The directories a new file's path needs, made beneath the directory its approval names.

Promise: :func:`make_parents` opens the approved directory (:attr:`Expected.ancestor`) beneath the
root, insists on its approved identity (else ``changed_since_approval``), then makes each approved
name in turn through the previous directory's descriptor and opens it with ``O_NOFOLLOW``: no
directory is made or entered through a symlink, and a name that is not a directory by then (a symlink
or a file planted in between) is ``changed_since_approval``. A directory another writer made in the
meantime is used as it is (it is beneath the approved one, reached without a symlink); only those
this call made are reported, fsynced into their parents, and removed by :meth:`Parents.undo` when the
file cannot be installed after all.
"""

from __future__ import annotations

import errno
import os
from contextlib import suppress
from dataclasses import dataclass, field

from peon.core.paths import WorkspacePath, parse_workspace_path

from peon.workers.fs.errors import file_kind
from peon.workers.fs.identity import Expected, FileId, changed_since_approval
from peon.workers.fs.resolver import Resolver, open_beneath

DIRECTORY_MODE = 0o777  # less the umask, as mkdir -p makes them


@dataclass
class Parents:
    """The approved directory and the ones below it down to the new file's, each open."""

    ancestor: str  # the approved directory's resolved workspace-relative path ("" the root)
    chain: list[int] = field(default_factory=list)  # descriptors: the approved directory, then each below
    names: list[str] = field(default_factory=list)  # the name of each directory below it
    first_made: int | None = None  # index in ``names`` of the first directory this call made

    @property
    def dirfd(self) -> int:
        """The new file's directory."""
        return self.chain[-1]

    def made(self) -> list[str]:
        """The workspace-relative path of each directory this call made, outermost first."""
        if self.first_made is None:
            return []
        base = [self.ancestor] if self.ancestor else []
        return ["/".join([*base, *self.names[:end]]) for end in range(self.first_made + 1, len(self.names) + 1)]

    def undo(self) -> None:
        """Remove the directories this call made, innermost first (each only if empty; best effort)."""
        if self.first_made is None:
            return
        for index in range(len(self.names) - 1, self.first_made - 1, -1):
            with suppress(OSError):
                os.rmdir(self.names[index], dir_fd=self.chain[index])
        with suppress(OSError):
            os.fsync(self.chain[self.first_made])
        self.first_made = None

    def close(self) -> None:
        for fd in self.chain:
            os.close(fd)
        self.chain.clear()


def make_parents(root: int, path: WorkspacePath, expected: Expected, resolver: Resolver) -> Parents:
    """Make the directories ``expected.parents`` below the approved ``expected.ancestor`` (see the module's
    promise); the caller closes the result."""
    if expected.ancestor:
        ancestor = open_beneath(root, parse_workspace_path(expected.ancestor), os.O_RDONLY | os.O_DIRECTORY, resolver)
    else:
        ancestor = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root)
    parents = Parents(expected.ancestor, [ancestor])
    try:
        if FileId.of(os.fstat(ancestor)) != expected.directory:
            raise changed_since_approval(path, f"{expected.ancestor or '.'!r}, where its new directories go, is "
                                         "not the approved directory")
        for name in expected.parents:
            here = parents.dirfd
            try:
                os.mkdir(name, DIRECTORY_MODE, dir_fd=here)
                made = True
            except FileExistsError:
                made = False  # another writer made it in the meantime: entered below, never through a link
            try:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=here)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                    raise
                raise changed_since_approval(path, f"{name!r}, a directory it was to create, is now "
                                             f"{_what_is(here, name)}") from None
            if made:
                os.fsync(here)  # the new entry is on disk before anything is written beneath it
                if parents.first_made is None:
                    parents.first_made = len(parents.names)
            parents.chain.append(fd)
            parents.names.append(name)
        return parents
    except BaseException:
        parents.undo()
        parents.close()
        raise


def _what_is(dirfd: int, name: str) -> str:
    try:
        return f"a {file_kind(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode)}"
    except OSError:
        return "gone"
