"""How to install one of Peon's extras into the environment that runs this Peon, as a command a user can paste.

Promise: :func:`extra_command` names Peon's distribution (``peon-runtime``; ``peon`` on the public index is
another project) and, when this Peon was installed from a directory, archive or repository, that same
source (``direct_url.json``), so the command adds the extra to the Peon that is running — never another one.
"""

from __future__ import annotations

import json
import shlex
import sys

DISTRIBUTION = "peon-runtime"


def extra_command(extra: str) -> str:
    """The pip command that adds ``extra`` (``serve``, ``remote``...) to this Peon."""
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    source = _installed_from()
    if source is None:
        return f"{pip} {shlex.quote(f'{DISTRIBUTION}[{extra}]')}"
    target, editable = source
    return f"{pip} {'-e ' if editable else ''}{shlex.quote(f'{target}[{extra}]')}"


def _installed_from() -> tuple[str, bool] | None:
    """Where this Peon was installed from (a local path or URL, and whether editable), if pip recorded it."""
    try:
        from importlib import metadata

        # The first record pip wrote (a checkout on sys.path may hold a build's egg-info without one).
        texts = (d.read_text("direct_url.json") for d in metadata.distributions(name=DISTRIBUTION))
        origin = json.loads(next((t for t in texts if t), "null"))
    except Exception:  # no metadata (running from a checkout) or an unreadable record: the index name
        return None
    if not isinstance(origin, dict) or not isinstance(origin.get("url"), str):
        return None
    url: str = origin["url"]
    if isinstance(origin.get("vcs_info"), dict):
        return None  # an extra cannot be added to a VCS requirement without its full spelling; use the name
    target = url[len("file://"):] if url.startswith("file://") else url
    dir_info = origin.get("dir_info")
    return target, bool(isinstance(dir_info, dict) and dir_info.get("editable"))
