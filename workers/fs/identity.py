"""What a call was approved to open, checked against what is actually opened, at the moment of use.

Promises: a :class:`FileId` names a file by device and inode (written and parsed as
``"<device>:<inode>"``, nothing else parses); :func:`check_expected` accepts an opened directory, name and
file (or its absence) only when they are exactly the :class:`Expected` ones, and otherwise raises
:func:`changed_since_approval` before the caller reads or writes a byte.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from peon.core.errors import ErrorCode, ToolError
from peon.core.paths import WorkspacePath


@dataclass(frozen=True)
class FileId:
    """A file's identity: its device and inode. Shown and sent as ``"<device>:<inode>"``."""

    device: int
    inode: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileId:
        return cls(st.st_dev, st.st_ino)

    @classmethod
    def parse(cls, text: object) -> FileId | None:
        """The identity written by :meth:`__str__`, or None for anything else."""
        if not isinstance(text, str):
            return None
        device, colon, inode = text.partition(":")
        if not colon or not device.isdigit() or not inode.isdigit():
            return None
        return cls(int(device), int(inode))

    def __str__(self) -> str:
        return f"{self.device}:{self.inode}"


def changed_since_approval(path: WorkspacePath, what: str) -> ToolError:
    """The refusal when what a call is about to open is not what was approved; nothing was read or written."""
    return ToolError(ErrorCode.CHANGED_SINCE_APPROVAL,
                     f"path {path.shown} changed since the call was approved: {what}; nothing was done",
                     {"rule": "changed_since_approval"})


@dataclass(frozen=True)
class Expected:
    """What a call was approved to open: checked against the object actually opened, at the moment of use."""

    directory: FileId  # the directory holding the last component; with ``parents``, the one they go in
    name: str  # the last component's name in it
    file: FileId | None  # the file itself; None: nothing may exist there (a create)
    parents: tuple[str, ...] = ()  # directories approved to be created below ``directory``, outermost first
    ancestor: str = ""  # with ``parents``: ``directory``'s resolved workspace-relative path ("" the root)


def check_expected(path: WorkspacePath, expected: Expected, directory: os.stat_result, name: str,
                   existing: os.stat_result | None) -> None:
    """The directory written into, the name in it and what is there now (``existing``, None: nothing) must be
    the approved ones, else :func:`changed_since_approval`. A directory made by the call itself
    (``expected.parents``) was checked where it was made (:mod:`peon.workers.fs.parents`)."""
    if (not expected.parents and FileId.of(directory) != expected.directory) or name != expected.name:
        raise changed_since_approval(path, "the directory it leads to is not the approved one")
    found = None if existing is None else FileId.of(existing)
    if found != expected.file:
        what = ("it was absent when approved and now exists" if expected.file is None
                else "the file was removed" if found is None
                else f"it is now another file (approved {expected.file}, found {found})")
        raise changed_since_approval(path, what)

