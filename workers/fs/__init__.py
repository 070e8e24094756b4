"""Workspace file I/O beneath one directory descriptor of the workspace root.

Promises (each module states its own in full):

* every path is resolved beneath the root's descriptor, by ``openat2(RESOLVE_BENEATH)`` or a component
  walk, never leaving it, and :func:`resolve` says where a path leads without opening it for reading
  (:mod:`~peon.workers.fs.resolver`);
* the object opened is the one a call was approved to open, else ``changed_since_approval``
  (:mod:`~peon.workers.fs.identity`);
* :func:`read_window` reads only regular files, a range and the whole file's SHA-256 from one pass
  (:mod:`~peon.workers.fs.read`);
* :func:`write_file` installs one file crash-atomically (:mod:`~peon.workers.fs.write`), through
  temporary files locked while their writer lives (:mod:`~peon.workers.fs.temps`), and makes the
  directories a create was approved to make, beneath the approved one (:mod:`~peon.workers.fs.parents`);
* :func:`apply_changes` installs several files all or nothing (:mod:`~peon.workers.fs.change`);
* every failure is a ``ToolError`` with a stable code (:mod:`~peon.workers.fs.errors`).

The package re-exports the functions and types its users call (``from peon.workers import fs``); a
constant is read, and patched by tests, in its own module (``fs.read.HASH_CHUNK``).
"""

from peon.workers.fs.change import Change, apply_changes
from peon.workers.fs.identity import Expected, FileId, changed_since_approval
from peon.workers.fs.read import Window, pread_exact, read_target_error, read_whole, read_window, sha256_of
from peon.workers.fs.resolver import (RESOLVER_ENV, Resolution, Resolver, choose_resolver, open_beneath, open_parent,
                                      open_root, openat2_available, resolve, workspace_root, Pinned,
                                      PinnedWorkspace)
from peon.workers.fs.temps import remove_stale_temps
from peon.workers.fs.write import WriteOutcome, target_error, write_file

__all__ = [
    "RESOLVER_ENV", "Change", "Expected", "FileId", "Pinned", "PinnedWorkspace", "Resolution", "Resolver", "Window",
    "WriteOutcome", "apply_changes", "changed_since_approval", "choose_resolver", "open_beneath", "open_parent",
    "open_root", "openat2_available", "pread_exact", "read_target_error", "read_whole", "read_window",
    "remove_stale_temps", "resolve", "sha256_of", "target_error", "workspace_root", "write_file",
]
