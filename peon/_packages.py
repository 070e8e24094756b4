"""Make sure ``supervisor`` and ``workers`` are Peon's own packages.

Promise: importing :mod:`peon` fails with a clear ``ImportError`` when another distribution's module
of the same name (PyPI has a ``supervisor``) would be imported instead of ours, and its advice works:

* when the other package sits in the same directory as Peon's (both installed into one environment:
  the later install overwrote files of the earlier one), removing it also removes files Peon shares
  with it, so the advice is to uninstall it **and then reinstall Peon** — with the exact command for
  the source Peon was installed from (``direct_url.json``), run by this interpreter's pip;
* when it comes earlier on ``sys.path`` (``PYTHONPATH``, another site directory), the advice is to
  take it off the path or uninstall it, naming where it is.

Installing Peon in a virtual environment of its own avoids both.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace


def ensure_own_packages() -> None:
    """Check both packages by their marker line (``PEON_PACKAGE = "<name>"``) without importing them:
    a process that only needs the contract (a worker, the forkserver) never runs supervisor code."""
    for name in ("supervisor", "workers"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError) as exc:
            raise ImportError(f"Peon's package {name!r} cannot be imported ({exc}); reinstall Peon: "
                              f"{reinstall_command()}") from exc
        if spec is None:
            raise ImportError(f"Peon's package {name!r} cannot be imported (No module named {name!r}); "
                              f"reinstall Peon: {reinstall_command()}")
        if not _has_marker(spec.origin, name):
            found = SimpleNamespace(__path__=list(spec.submodule_search_locations or []), __file__=spec.origin)
            raise ImportError(shadow_advice(name, found))


def _has_marker(origin: str | None, name: str) -> bool:
    if not origin or not origin.endswith("__init__.py"):
        return False
    try:
        text = Path(origin).read_bytes()
    except OSError:
        return False
    return re.search(rb'^PEON_PACKAGE = "' + re.escape(name.encode()) + rb'"$', text, re.MULTILINE) is not None


def shadow_advice(name: str, module: object) -> str:
    ours = Path(__file__).resolve().parent.parent / name
    where = [Path(p).resolve() for p in getattr(module, "__path__", [])]
    file = getattr(module, "__file__", None)
    if not where and file:
        where = [Path(str(file)).resolve().parent]
    others = [d for d in _distributions_of(name) if d.lower() != "peon"]
    pip = f"{shlex.quote(sys.executable)} -m pip"
    uninstall = f"{pip} uninstall {' '.join(others) or name}"
    shown = ", ".join(map(str, where)) or "an unknown place"
    if ours in where and not others:
        return (f"Peon's package {name!r} at {shown} is incomplete: its files were overwritten or removed, "
                f"typically by uninstalling another distribution that shared the directory. Reinstall Peon: "
                f"{reinstall_command()}")
    if ours in where:
        return (f"the module {name!r} at {shown} is not Peon's: another distribution "
                f"({', '.join(others) or 'unknown'}) installed a package of the same name into the same directory and "
                f"overwrote Peon's files there. Uninstalling it removes files the two share, so reinstall Peon after "
                f"it, in this order: {uninstall} && {reinstall_command()} — or install Peon in a virtual "
                f"environment of its own.")
    return (f"the module {name!r} found at {shown} is not Peon's ({ours}): another package of the same name shadows "
            f"it, earlier on sys.path. Take it off the path (PYTHONPATH, .pth files) or uninstall it ({uninstall}); "
            f"if it was installed into the same environment as Peon, reinstall Peon afterwards "
            f"({reinstall_command()}), since uninstalling removes files the two share — or install Peon in a virtual "
            f"environment of its own.")


def reinstall_command() -> str:
    """The pip command that reinstalls this Peon from where it was installed, without its dependencies."""
    pip = f"{shlex.quote(sys.executable)} -m pip install --force-reinstall --no-deps"
    try:
        from importlib import metadata

        dist = metadata.distribution("peon")
    except Exception:  # no metadata (running from a checkout): say what to reinstall from
        return f"{pip} <Peon's source directory>"
    try:
        origin = json.loads(dist.read_text("direct_url.json") or "null")
    except ValueError:
        origin = None
    if isinstance(origin, dict) and isinstance(origin.get("url"), str):
        url = origin["url"]
        target = url[len("file://"):] if url.startswith("file://") else url
        vcs = origin.get("vcs_info")
        if isinstance(vcs, dict) and vcs.get("vcs"):
            target = f"{vcs['vcs']}+{url}@{vcs.get('commit_id', '')}".rstrip("@")
        editable = isinstance(origin.get("dir_info"), dict) and origin["dir_info"].get("editable")
        return f"{pip} {'-e ' if editable else ''}{shlex.quote(target)}"
    return f"{pip} peon=={dist.version}"


def _distributions_of(name: str) -> list[str]:
    try:
        from importlib import metadata

        return sorted(set(metadata.packages_distributions().get(name, [])))
    except Exception:
        return []
