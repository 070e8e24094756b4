"""An agent client's configuration file, read and rewritten without losing what is not Peon's.

Promises:

* :func:`write_atomically` replaces a file in one step — a temporary file in the same directory, flushed,
  given the old file's mode (a new file gets the mode ``open`` would give it), then renamed over it — so a
  client reading the file sees the old or the new content, never half of it; a configuration file that is
  a symbolic link (dotfiles) keeps its link and has its target rewritten;
* :func:`edit_json` changes a JSON document in place and renders it back with the file's own indentation,
  every other key kept in its order; a file that is not plain JSON (comments, trailing commas) or whose
  top level is not an object is refused with a :class:`ConfigFileError` that names it, never rewritten;
* :func:`parse_toml` reads TOML keeping its comments and layout (tomlkit), so an edit changes only the
  keys it sets; a file that is not TOML is refused the same way;
* :func:`json_entry_step` plans one member of a JSON file's object (a client's server entry), nothing
  else of the file changed but its rendering;
* :func:`unified_diff` shows a change as ``diff -u`` would, between the file's path before and after.

This module owns the reading, rendering and writing of those files; which keys each client wants is its
client module's (:mod:`peon.cli.clients.claude`, ...).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.toml_document import TOMLDocument

from peon.cli.clients.base import Step

# A configuration file larger than this is not a configuration file Peon edits.
MAX_BYTES = 8 * 1024 * 1024


class ConfigFileError(Exception):
    """A client's configuration file Peon cannot edit safely; the message names the file and the fix."""


def read_text(path: Path) -> str | None:
    """The file's text, or None when there is no file."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ConfigFileError(f"{path} is a directory, not a configuration file") from None
    if len(data) > MAX_BYTES:
        raise ConfigFileError(f"{path} is larger than {MAX_BYTES} bytes; edit it by hand")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path} is not UTF-8 text; edit it by hand") from None


def load_json(path: Path, text: str | None) -> dict[str, Any]:
    """The JSON object in ``text`` (an empty one for a missing or blank file)."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigFileError(f"{path} is not plain JSON ({exc.msg}, line {exc.lineno}): Peon rewrites only "
                              "files it can read whole; add the entry by hand or remove the comments") from None
    if not isinstance(data, dict):
        raise ConfigFileError(f"{path} does not hold a JSON object at its top level")
    return data


def json_indent(text: str | None) -> int | str:
    """The indentation the file already uses (two spaces for a new file)."""
    found = re.search(r"^\{\s*\n([ \t]+)\S", text or "")
    if not found:
        return 2
    unit = found.group(1)
    return len(unit) if set(unit) == {" "} else unit


def render_json(data: dict[str, Any], like: str | None) -> str:
    return json.dumps(data, indent=json_indent(like), ensure_ascii=False) + "\n"


def edit_json(path: Path, text: str | None, change: Callable[[dict[str, Any]], None]) -> str:
    """``text`` after ``change`` edited its object; the same text when the edit changed nothing."""
    data = load_json(path, text)
    before = json.dumps(data, sort_keys=True)
    change(data)
    if text is not None and json.dumps(data, sort_keys=True) == before:
        return text
    return render_json(data, text)


def parse_toml(path: Path, text: str | None) -> TOMLDocument:
    try:
        return tomlkit.parse(text or "")
    except TOMLKitError as exc:
        raise ConfigFileError(f"{path} is not valid TOML ({exc}); fix it first") from None


def unified_diff(path: Path, before: str | None, after: str) -> str:
    """``before`` → ``after`` as a unified diff labelled with the path (``/dev/null`` for a new file)."""
    lines = difflib.unified_diff((before or "").splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=str(path) if before is not None else "/dev/null", tofile=str(path))
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one rename, keeping the file's mode (and a symbolic link's link)."""
    target = path.resolve() if path.is_symlink() else path
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~current_umask()
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".peon-tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def current_umask() -> int:
    """This process's umask, read without changing it (``os.umask`` can only be read by setting it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def json_entry_step(path: Path, table: str, name: str, entry: dict[str, Any]) -> Step | None:
    """The step that makes ``entry`` the member ``name`` of the object ``table`` in a JSON file (every
    other member and key kept in its place), or None when it already is."""
    text = read_text(path)
    data = load_json(path, text)
    members = data.get(table)
    if members is not None and not isinstance(members, dict):
        raise ConfigFileError(f"{path}: {table} is not an object; fix it first")
    if (members or {}).get(name) == entry:
        return None
    data[table] = {**(members or {}), name: entry}
    after = render_json(data, text)
    return Step(path, text, after, text=after)
