"""The defaults a front end puts between Peon's shipped defaults and every configuration someone wrote.

Promise: :func:`with_front_end_defaults` returns the configuration to open a session with: ``config``
itself when every key of ``defaults`` is set by a layer someone wrote (the user's file, the project's
file, ``config``), else ``config`` (read, when it is a file's path) with the keys no such layer sets
added at the front end's value. A front end's default replaces the shipped one and never a value
someone chose. ``config`` is resolved first, so a bad file is reported by its own name.

:data:`MCP_DEFAULTS` are the defaults of the MCP servers, ``peon mcp`` and ``peon serve``: their
clients give up on a tool call after a timeout of their own — Codex after ``tool_timeout_sec``, 60 s
unless set; the TypeScript SDK's ``DEFAULT_REQUEST_TIMEOUT_MSEC`` (60 s), which clients built on it
keep — so a command still running after 45 s is answered with its output so far and goes on as a job
(``limits.yield_after_seconds``, docs/jobs.md): below 60 s with room for the answer's way back.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from peon.client.config.layers import load_config, read_toml
from peon.client.config.tables import merge

MCP_DEFAULTS: Mapping[str, Any] = {"limits.yield_after_seconds": 45.0}

Config = Mapping[str, Any] | str | os.PathLike[str] | None


def with_front_end_defaults(config: Config, defaults: Mapping[str, Any], *, workspace: str | os.PathLike[str],
                            env: Mapping[str, str] | None = None) -> Config:
    """``config`` with each dotted key of ``defaults`` that no written layer sets (see the module's promise)."""
    loaded = load_config(config, workspace=workspace, env=env)
    chosen = {key for layer in loaded.layers if layer.kind != "defaults" for key in layer.keys}
    missing = {key: value for key, value in defaults.items() if key not in chosen}
    if not missing:
        return config
    table: dict[str, Any] = (dict(read_toml(Path(config)) or {}) if isinstance(config, (str, os.PathLike))
                             else dict(config or {}))
    for key, value in missing.items():
        nested: Any = value
        for part in reversed(key.split(".")):
            nested = {part: nested}
        table = merge(table, nested)
    return table
