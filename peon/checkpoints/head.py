"""Where the workspace's own repository points: read from its files, never through git.

Promise: :func:`workspace_head` reads the workspace's ``.git/HEAD`` (and the ref it names, loose or
packed) as regular files of bounded size, never following a symbolic link at the last component,
and returns ``"<ref> <commit>"``, ``"detached <commit>"``, or None (no repository, or nothing it can
read). Nothing is written and no program runs: a hostile repository's configuration is never read.
"""

from __future__ import annotations

import re
from pathlib import Path

from peon.core.statefile import RefusedFile, read_regular_file

MAX_HEAD_BYTES = 4096
MAX_PACKED_BYTES = 16 * 1024 * 1024
_SHA = re.compile(rb"[0-9a-f]{40}([0-9a-f]{24})?")
_REF = re.compile(rb"refs/[A-Za-z0-9._/+-]{1,240}")


def _read(path: Path, limit: int) -> bytes | None:
    try:
        return read_regular_file(path, max_bytes=limit, follow_symlinks=False)
    except (OSError, RefusedFile):
        return None


def workspace_head(workspace: Path) -> str | None:
    git = workspace / ".git"
    if not git.is_dir() or git.is_symlink():
        return None
    head = _read(git / "HEAD", MAX_HEAD_BYTES)
    if head is None:
        return None
    head = head.strip()
    if _SHA.fullmatch(head):
        return f"detached {head.decode()}"
    if not head.startswith(b"ref: "):
        return None
    ref = head[5:].strip()
    if not _REF.fullmatch(ref) or b".." in ref:
        return None
    loose = _read(git / ref.decode(), MAX_HEAD_BYTES)
    if loose is not None and _SHA.fullmatch(loose.strip()):
        return f"{ref.decode()} {loose.strip().decode()}"
    packed = _read(git / "packed-refs", MAX_PACKED_BYTES) or b""
    for line in packed.splitlines():
        parts = line.split(b" ")
        if len(parts) == 2 and parts[1] == ref and _SHA.fullmatch(parts[0]):
            return f"{ref.decode()} {parts[0].decode()}"
    return f"{ref.decode()} (no commit yet)"
