"""Whether anything under the workspace may have changed since the last snapshot: inotify on every
directory the store records, so a snapshot of an unchanged workspace costs no walk at all.

Promises:

* :meth:`Watch.settled` is True only when no event has arrived for any watched directory since the
  last :meth:`Watch.clear`, every directory is watched and the kernel lost no event (an overflow, a
  watch that could not be added, a directory over :data:`MAX_DIRECTORIES`, or anything unexpected
  turns the watch off for good: :meth:`Watch.settled` then always answers False, and every snapshot
  walks the tree as without it);
* :meth:`Watch.clear` drains the events first and adds a watch on every directory created meanwhile,
  so an event that arrives after it marks the workspace changed again — a snapshot taken after a
  ``clear`` is never trusted past a change made during it;
* excluded trees never unsettle it (the store never records them): they are watched apart, and
  :meth:`Watch.take_excluded` names those in which something happened (while the watches last:
  past :data:`MAX_DIRECTORIES` an excluded tree goes unwatched, never the recorded tree);
  ``.git`` directories are not watched; symbolic links are never followed; the descriptor is
  close-on-exec and non-blocking, owned here.

Not seen by inotify, and so not by a skipped snapshot: a write through a memory mapping, and a write
through a hard link from outside the workspace. Linux only; anywhere inotify is missing the watch is off.
"""

from __future__ import annotations

import ctypes
import errno
import fnmatch
import os
import struct
from pathlib import Path

MAX_DIRECTORIES = 50_000
_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x2, 0x4, 0x8
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF, _IN_Q_OVERFLOW, _IN_IGNORED, _IN_ISDIR = 0x400, 0x800, 0x4000, 0x8000, 0x40000000
_IN_ONLYDIR, _IN_DONT_FOLLOW, _IN_EXCL_UNLINK = 0x01000000, 0x02000000, 0x04000000
_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
         | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR | _IN_DONT_FOLLOW | _IN_EXCL_UNLINK)
_IN_CLOEXEC, _IN_NONBLOCK = 0o2000000, 0o4000
_EVENT = struct.Struct("iIII")


class Watch:
    def __init__(self, workspace: Path, excluded_names: list[str], excluded_globs: list[str]):
        self.workspace = os.fsencode(workspace)
        self.names = {os.fsencode(name) for name in excluded_names} | {b".git"}
        self.globs = excluded_globs
        self.paths: dict[int, bytes] = {}
        self.excluded_roots: dict[int, bytes] = {}  # a watch inside an excluded tree -> that tree's root
        self.excluded_paths: dict[int, bytes] = {}  # and -> the directory it is on
        self.excluded_changed: set[bytes] = set()
        self.fd = -1
        self.on = False
        self.changed = True
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            self._add = libc.inotify_add_watch
            self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            self.fd = libc.inotify_init1(_IN_CLOEXEC | _IN_NONBLOCK)
        except (OSError, AttributeError):
            return
        if self.fd < 0:
            return
        self.on = True
        self._watch_tree(self.workspace)

    def _skipped(self, path: bytes) -> bool:
        if os.path.basename(path) in self.names:
            return True
        relative = os.fsdecode(os.path.relpath(path, self.workspace))
        return any(fnmatch.fnmatchcase(relative, glob) for glob in self.globs)

    def _watch_tree(self, top: bytes, excluded_root: bytes | None = None) -> None:
        stack: list[tuple[bytes, bytes | None]] = [(top, excluded_root)]
        while stack and self.on:
            path, root = stack.pop()
            if os.path.basename(path) == b".git" and path != self.workspace:
                continue  # a repository's own files: never recorded, never watched
            if root is None and path != self.workspace and self._skipped(path):
                root = path  # an excluded tree: watched only to say that it changed
            if len(self.paths) + len(self.excluded_roots) >= MAX_DIRECTORIES:
                if root is not None:
                    continue  # what an excluded tree does is then not said; the recorded tree stays watched
                self.off()
                return
            descriptor = self._add(self.fd, path, _MASK)
            if descriptor < 0:
                if ctypes.get_errno() in (errno.ENOENT, errno.ENOTDIR):
                    continue  # gone already: its parent's event said so
                if root is not None:
                    continue
                self.off()
                return
            if root is None:
                self.paths[descriptor] = path
            else:
                self.excluded_roots[descriptor], self.excluded_paths[descriptor] = root, path
            try:
                with os.scandir(path) as entries:
                    stack += [(entry.path, root) for entry in entries if entry.is_dir(follow_symlinks=False)]
            except OSError:
                continue

    def off(self) -> None:
        """Give up watching: from now on every snapshot walks the tree."""
        self.on = False
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.paths.clear()
        self.excluded_roots.clear()
        self.excluded_paths.clear()

    def _drain(self) -> None:
        new_dirs: list[tuple[bytes, bytes | None]] = []
        while self.on:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                self.off()
                return
            offset = 0
            while offset + _EVENT.size <= len(data):
                descriptor, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size: offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                if mask & _IN_Q_OVERFLOW:
                    self.off()
                    return
                if mask & _IN_IGNORED:
                    self.paths.pop(descriptor, None)
                    self.excluded_roots.pop(descriptor, None)
                    self.excluded_paths.pop(descriptor, None)
                    continue
                root = self.excluded_roots.get(descriptor)
                if root is not None:
                    self.excluded_changed.add(root)
                    if mask & _IN_ISDIR and mask & (_IN_CREATE | _IN_MOVED_TO):
                        new_dirs.append((os.path.join(self.excluded_paths.get(descriptor, root), name), root))
                    continue
                parent = self.paths.get(descriptor)
                if parent is None:
                    continue
                if parent == self.workspace and mask & (_IN_DELETE_SELF | _IN_MOVE_SELF):
                    self.off()  # the workspace itself went away or moved
                    return
                if name in self.names and (mask & _IN_ISDIR or name == b".git"):
                    if name != b".git":  # an excluded tree came or went: said, never recorded
                        self.excluded_changed.add(os.path.join(parent, name))
                        if mask & _IN_ISDIR and mask & (_IN_CREATE | _IN_MOVED_TO):
                            new_dirs.append((os.path.join(parent, name), None))
                    continue
                self.changed = True
                if mask & _IN_ISDIR and mask & (_IN_CREATE | _IN_MOVED_TO):
                    new_dirs.append((os.path.join(parent, name), None))
        for path, root in new_dirs:
            self._watch_tree(path, root)

    def take_excluded(self) -> list[str]:
        """The excluded trees (workspace-relative) in which something happened since the last call."""
        changed, self.excluded_changed = self.excluded_changed, set()
        return sorted(os.fsdecode(os.path.relpath(path, self.workspace)) for path in changed)

    def settled(self) -> bool:
        """True when nothing can have changed since the last :meth:`clear` (see the module's promise)."""
        if not self.on:
            return False
        self._drain()
        return self.on and not self.changed

    def clear(self) -> None:
        """Start a new interval: called just before a snapshot walks the tree."""
        if self.on:
            self._drain()
            self.changed = False

    def close(self) -> None:
        self.off()
