"""Saving an approver's "always allow commands starting with …" as an allow rule in the user's configuration.

Promises:

* a rule is only ever written to the user's own configuration file (the layer the client loaded as the
  user's, else ``$XDG_CONFIG_HOME/peon/config.toml`` / ``~/.config/peon/config.toml``), never to a
  project's file: a project file cannot loosen, and nothing here can make it;
* the file is rewritten atomically (the old text, then the new ``[[approval.rules]]`` table, written to a
  temporary file beside it, fsynced and renamed over it), so a crash leaves the old or the new file; a
  symbolic link to it (a dotfiles repository) is followed and kept;
* the new text is checked before it replaces the old one: it must still parse as TOML and hold exactly one
  more rule, the one saved — else nothing is written and ``ValueError`` says why;
* a file that is not a regular file, or is over the configuration's size limit, is refused
  (:mod:`peon.core.statefile`), never opened for reading.

The next session loads the rule as any rule of the user's file: validated, and decided on the analysed
segments of every command line (:mod:`peon.approval.policy`).
"""

from __future__ import annotations

import json
import os
import time
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from peon.approval.policy import PolicyRule, check_command_prefix
from peon.core.statefile import RefusedFile, read_regular_file
from peon.core.userdir import user_peon_dir
from peon.supervisor.approval.grants import write_atomically

MAX_CONFIG_FILE_BYTES = 1 << 20  # as the client's loader reads it


def user_config_file(layers: Iterable[Mapping[str, Any]], env: Mapping[str, str]) -> Path | None:
    """The user's configuration file: the one the session loaded as the user's, else where it would be."""
    for layer in layers:
        if layer.get("kind") == "user" and isinstance(layer.get("source"), str):
            return Path(layer["source"])
    directory = user_peon_dir(env)
    return directory / "config.toml" if directory is not None else None


def rule_table(rule: PolicyRule, when: float) -> str:
    """The TOML text of ``rule`` as an ``[[approval.rules]]`` table (JSON strings are TOML strings)."""
    if rule.decision != "allow" or rule.command_prefix is None or rule.tool is None:
        raise ValueError("only an allow rule for a tool's command prefix is saved")
    check_command_prefix(rule.command_prefix)
    lines = [f"\n# Saved by Peon {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(when))}: "
             "an approver allowed commands starting with these words.",
             "[[approval.rules]]", f"tool = {json.dumps(rule.tool)}"]
    if rule.risk is not None:
        lines.append(f"risk = {json.dumps(rule.risk)}")
    lines += [f"command_prefix = {json.dumps(rule.command_prefix)}", 'decision = "allow"', ""]
    return "\n".join(lines)


def _rules_in(text: str) -> list[Any]:
    approval = tomllib.loads(text).get("approval")
    rules = approval.get("rules", []) if isinstance(approval, dict) else []
    return list(rules) if isinstance(rules, list) else []


def save_allow_rule(path: Path, rule: PolicyRule, *, when: float | None = None) -> Path:
    """Append ``rule`` to the user's configuration file at ``path`` (created when missing); the file written."""
    target = Path(os.path.realpath(path))
    try:
        old = read_regular_file(target, max_bytes=MAX_CONFIG_FILE_BYTES, follow_symlinks=False).decode("utf-8")
    except FileNotFoundError:
        old = ""
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except RefusedFile as exc:
        raise ValueError(f"the user's configuration file {exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"the user's configuration file {target} is not UTF-8") from None
    try:
        before = _rules_in(old)
        new = old + ("" if not old or old.endswith("\n") else "\n") + rule_table(rule, time.time() if when is None
                                                                              else when)
        after = _rules_in(new)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"the user's configuration file {target} is not valid TOML ({exc})") from None
    saved = {"tool": rule.tool, "command_prefix": rule.command_prefix, "decision": "allow",
             **({"risk": rule.risk} if rule.risk is not None else {})}
    if after[:len(before)] != before or after[len(before):] != [saved]:
        raise ValueError(f"the rule cannot be appended to {target} as a table of its own "
                         "(the file's last table is not closed); add it by hand")
    write_atomically(target, new.encode("utf-8"))
    return target
