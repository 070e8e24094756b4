"""A directory as the file tests compare it before and after: every entry beneath it, by its relative path."""

from __future__ import annotations

import os
from pathlib import Path


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry beneath ``root``: file contents, symlink targets, directories."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            key = str(full.relative_to(root))
            if full.is_symlink():
                out[key] = "-> " + os.readlink(full)
            else:
                out[key] = "dir" if full.is_dir() else full.read_bytes()
    return out
