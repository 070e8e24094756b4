"""Make sure ``supervisor`` and ``workers`` are Peon's own packages.

Promise: importing :mod:`peon` fails with a clear ``ImportError`` when another distribution's module
of the same name (PyPI has a ``supervisor``) would be imported instead of ours.
"""

from __future__ import annotations

import importlib


def ensure_own_packages() -> None:
    for name in ("supervisor", "workers"):
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise ImportError(f"Peon's package {name!r} cannot be imported ({exc}); reinstall peon") from exc
        if getattr(module, "PEON_PACKAGE", None) != name:
            where = getattr(module, "__file__", None) or list(getattr(module, "__path__", []))
            raise ImportError(
                f"the module {name!r} found at {where} is not Peon's: another distribution's package of the "
                f"same name shadows it. Remove it (e.g. 'pip uninstall {name}') or install Peon in its own "
                f"virtual environment."
            )
