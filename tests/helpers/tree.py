"""Peon's modules as the source tree holds them: the three folders installed as packages (``peon``; ``workers/``
and ``supervisor/`` inside Peon's namespace), each module's dotted name, and the layer a dotted name belongs to.
Read from the files only: nothing of Peon's is imported."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
# The three layers: the folder each is in, and the package it is installed as (supervisor/ and workers/ are
# installed inside Peon's namespace; peon/supervisor and peon/workers are links to them, not read twice).
LAYERS = {"peon": "peon", "workers": "peon.workers", "supervisor": "peon.supervisor"}


def module_name(path: Path) -> str:
    folder, *parts = path.relative_to(ROOT).with_suffix("").parts
    names = [*LAYERS[folder].split("."), *parts]
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def _files(folder: Path) -> list[Path]:
    """The modules beneath ``folder``, not through the links to the other layers' folders."""
    return [p for p in folder.rglob("*.py") if not any((ROOT / q).is_symlink() for q in p.relative_to(ROOT).parents)]


def modules() -> list[tuple[str, Path]]:
    return sorted((module_name(p), p) for folder in LAYERS for p in _files(ROOT / folder))


def layer_of(module: str) -> str:
    """The layer a module belongs to: ``supervisor``, ``workers`` or ``peon`` (or another top-level name)."""
    for layer in ("supervisor", "workers"):
        if module == f"peon.{layer}" or module.startswith(f"peon.{layer}."):
            return layer
    return module.split(".")[0]
