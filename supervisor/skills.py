"""Skill discovery: which ``<root>/<name>/SKILL.md`` files a session offers through ``read_skill``.

Promises:

* two roots are searched at session start: the user's (``$XDG_CONFIG_HOME/peon/skills``, else
  ``$HOME/.config/peon/skills``, from the session's environment) and then the project's
  (``<workspace>/.peon/skills``, which must resolve inside the workspace). When both hold a skill of
  the same name, the user's wins: a cloned repository cannot shadow a user's skill;
* a skill is valid when its ``SKILL.md`` starts with YAML front matter whose ``name`` (1-64 characters
  of ``a-z``, ``0-9`` and ``-``, no leading, trailing or doubled hyphen) equals its directory's name
  and whose ``description`` has 1-1024 characters. Every other candidate is reported in
  :attr:`Discovery.skipped` with the reason, never silently dropped (plain files and dot-entries in a
  root are not candidates);
* at most ``skills.max_skills`` skills are kept (user root first, then project, each in name order);
  at most :data:`MAX_ENTRIES_PER_ROOT` entries of a root and :data:`FRONT_MATTER_MAX_BYTES` bytes of
  each ``SKILL.md`` are read, and discovery stops after :data:`DISCOVERY_BUDGET_SECONDS`;
* no symlink is followed out of its root: a ``SKILL.md`` is opened only after ``O_PATH`` resolution
  shows that, with every symlink resolved, it is a regular file inside the root (so not even a device
  or FIFO outside the root is ever opened for reading). :func:`open_skill_file` applies the same check
  when ``read_skill`` runs, against the canonical path recorded here.

The front matter parser (:func:`parse_front_matter`) is pure and strict: ``key: value`` lines with
plain, single- or double-quoted scalars (a plain scalar may continue on indented lines) and ``|``/``>``
block scalars. Nested values of other keys (``metadata:`` maps, lists) are skipped unparsed; flow
collections, anchors, aliases and tags in ``name`` or ``description`` are refused.
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass, field
from typing import Mapping

from peon.userdir import user_peon_dir

SKILL_FILE = "SKILL.md"
MAX_ENTRIES_PER_ROOT = 4096
FRONT_MATTER_MAX_BYTES = 16384
DISCOVERY_BUDGET_SECONDS = 2.0
NAME_MAX_CHARS = 64
DESCRIPTION_MAX_CHARS = 1024
NAME_RULE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
USER, PROJECT = "user", "project"
SCALAR_KEYS = ("name", "description")


class SkillProblem(Exception):
    """Why a candidate is not a valid skill (one sentence, shown by ``peon skills``)."""


@dataclass(frozen=True)
class SkillRecord:
    name: str
    description: str
    origin: str  # "user" or "project"
    root: str  # the canonical root directory the skill was found under
    path: str  # the canonical path of its SKILL.md

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "origin": self.origin,
                "root": self.root, "path": self.path}


@dataclass
class Discovery:
    available: dict[str, SkillRecord] = field(default_factory=dict)
    skipped: list[dict] = field(default_factory=list)  # {"path", "reason"}

    def describe(self) -> dict:
        return {"available": [record.to_dict() for record in self.available.values()], "skipped": list(self.skipped)}


# -- front matter (pure) ----------------------------------------------------------------------------------


def split_front_matter(data: bytes) -> str:
    """The front matter text between the opening ``---`` line and the closing ``---`` (or ``...``) line."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = data.split(b"\n")
    if lines[0].rstrip(b"\r") != b"---":
        raise SkillProblem("SKILL.md does not begin with a '---' line opening YAML front matter")
    for index, line in enumerate(lines[1:], start=1):
        if line.rstrip(b"\r") in (b"---", b"..."):
            if index == len(lines) - 1 and len(data) >= FRONT_MATTER_MAX_BYTES:
                break  # the closing line itself may have been cut
            try:
                return b"\n".join(line.rstrip(b"\r") for line in lines[1:index]).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise SkillProblem(f"the front matter is not valid UTF-8 (byte {exc.start})") from None
    if len(data) >= FRONT_MATTER_MAX_BYTES:
        raise SkillProblem(f"the front matter is not closed by a '---' line within {FRONT_MATTER_MAX_BYTES} bytes")
    raise SkillProblem("the front matter is not closed by a '---' line")


_DOUBLE_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
                   "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85",
                   "_": "\xa0", "L": "\u2028", "P": "\u2029"}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}
_KEY_LINE = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_-]*) *:(?: +(.*))?")
_BLOCK_HEADER = re.compile(r"([|>])([+-]?)([1-9]?)(?: +#.*)? *")
_NOT_PLAIN_START = tuple("[]{}&*!|>%@`,")
# Plain scalars that a YAML 1.1 loader (PyYAML's resolvers) reads as null, a boolean, a number or a
# date rather than as text; refused so every YAML reader agrees on what the skill says.
_NOT_TEXT = re.compile(
    r"~|null|Null|NULL"
    r"|yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF"
    r"|[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+"
    r"|[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?"
    r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
    r"|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]*)?"
    r"(?:[ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?)?"
)


def _fold_flow(lines: list[str]) -> str:
    """YAML line folding of a multi-line flow scalar: a single line break becomes a space, a run of
    n breaks becomes n-1 newlines; spaces around the breaks are dropped."""
    if len(lines) == 1:
        return lines[0]
    pieces = [lines[0].rstrip(" \t"), *(line.strip(" \t") for line in lines[1:-1]), lines[-1].lstrip(" \t")]
    out, breaks = pieces[0], 0
    for piece in pieces[1:]:
        breaks += 1
        if piece:
            out += " " if breaks == 1 else "\n" * (breaks - 1)
            out += piece
            breaks = 0
    if breaks:
        out += " " if breaks == 1 else "\n" * (breaks - 1)
    return out


def _unescape(text: str, key: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] != "\\":
            out.append(text[i])
            i += 1
            continue
        code = text[i + 1: i + 2]
        if code in _DOUBLE_ESCAPES:
            out.append(_DOUBLE_ESCAPES[code])
            i += 2
        elif code in _HEX_DIGITS:
            digits = text[i + 2: i + 2 + _HEX_DIGITS[code]]
            if len(digits) != _HEX_DIGITS[code] or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise SkillProblem(f"'{key}' has a malformed \\{code} escape")
            out.append(chr(int(digits, 16)))
            i += 2 + len(digits)
        else:
            raise SkillProblem(f"'{key}' has an unknown escape '\\{code}'")
    return "".join(out)


def _quoted(lines: list[str], key: str) -> str:
    """A single- or double-quoted scalar that starts with the quote at ``lines[0][0]``."""
    text = "\n".join(lines)
    quote, i = text[0], 1
    while i < len(text):
        if quote == "'" and text[i] == "'":
            if text[i + 1: i + 2] != "'":
                break
            i += 2
        elif quote == '"' and text[i] == "\\":
            i += 2
        elif quote == '"' and text[i] == '"':
            break
        else:
            i += 1
    else:
        raise SkillProblem(f"'{key}' has an unterminated {quote}-quoted string")
    same_line, *later = text[i + 1:].split("\n")
    rest = same_line.strip(" ")
    if rest and not same_line.startswith(" #") or any(line.strip(" ") for line in later):
        raise SkillProblem(f"'{key}' has text after its closing quote: {(rest or later[0].strip())[:40]!r}")
    lines = text[1:i].split("\n")
    if quote == '"' and any((len(line) - len(line.rstrip("\\"))) % 2 for line in lines[:-1]):
        raise SkillProblem(f"'{key}' escapes a line break, which Peon does not accept; keep the value on one line")
    body = _fold_flow(lines)
    return body.replace("''", "'") if quote == "'" else _unescape(body, key)


def _fold_block(body: list[str]) -> str:
    out, pending, previous = "", 0, None
    for line in body:
        if not line:
            pending += 1
            continue
        if previous is None:
            out += "\n" * pending
        else:
            indented = line[:1] in (" ", "\t") or previous[:1] in (" ", "\t")
            out += "\n" * (pending + indented) if pending else ("\n" if indented else " ")
        out += line
        previous, pending = line, 0
    return out


def _block(header: str, lines: list[str], key: str) -> str:
    match = _BLOCK_HEADER.fullmatch(header.rstrip(" \t"))
    if not match:
        raise SkillProblem(f"'{key}' has a malformed block scalar header {header!r}")
    style, chomp, explicit = match.groups()
    content = list(lines)
    while content and not content[-1].strip(" "):
        content.pop()
    trailing = len(lines) - len(content)
    first = next((line for line in content if line.strip(" ")), "")
    indent = int(explicit) if explicit else len(first) - len(first.lstrip(" "))
    body = []
    for line in content:
        if line.strip(" ") and len(line) - len(line.lstrip(" ")) < indent:
            raise SkillProblem(f"'{key}' has a block scalar line indented less than its first line")
        body.append(line[indent:] if line.strip(" ") else "")
    text = "\n".join(body) if style == "|" else _fold_block(body)
    if not content:
        return "\n" * len(lines) if chomp == "+" else ""
    if chomp == "-":
        return text
    return text + "\n" + ("\n" * trailing if chomp == "+" else "")


def _plain(lines: list[str], key: str) -> str:
    first = lines[0]
    if first.startswith(_NOT_PLAIN_START):
        raise SkillProblem(f"'{key}' starts with {first[0]!r}, YAML syntax Peon does not accept here; quote the value")
    if first in ("-", "?") or first.startswith(("- ", "? ")):
        raise SkillProblem(f"'{key}' must be a single text value, not a list")
    if any("\t" in line for line in lines):
        raise SkillProblem(f"'{key}' contains a tab outside quotes; quote the value and write it as \\t")
    kept = []
    for index, line in enumerate(lines):
        comment = re.search(r"(?:^| )#", line)
        kept.append(line[: comment.start()] if comment else line)
        if comment:
            if any(rest.strip(" ") for rest in lines[index + 1:]):
                raise SkillProblem(f"'{key}' continues after a comment")
            break
    if any(": " in line or line.rstrip().endswith(":") for line in kept):
        raise SkillProblem(f"'{key}' contains ': ', which YAML reads as a nested mapping; quote the value")
    while kept and not kept[-1].strip():
        kept.pop()
    value = _fold_flow([line.strip(" ") for line in kept]) if kept else ""
    if value and _NOT_TEXT.fullmatch(value):
        raise SkillProblem(f"'{key}' is {value!r}, which YAML reads as a null, boolean, number or date, "
                           "not text; quote it")
    return value


def _value(key: str, value: str, continuation: list[str]) -> str:
    if any(line.startswith("-") for line in continuation):
        raise SkillProblem(f"'{key}' must be a single text value, not a list")
    if value[:1] in ("|", ">"):
        if "\t" in value or any("\t" in line[: len(line) - len(line.lstrip(" \t"))] for line in continuation):
            raise SkillProblem(f"'{key}' is indented with a tab; indent with spaces")
        return _block(value, continuation, key)
    while continuation and not continuation[-1].strip(" "):
        continuation.pop()
    if not value.strip(" ") or value.lstrip(" ").startswith("#"):  # the value starts on the next line
        lines = [line.strip(" ") for line in continuation]
        while lines and not lines[0]:
            lines.pop(0)
        if not lines:
            return ""
        value, continuation = lines[0], lines[1:]
    if value.startswith(("'", '"')):
        return _quoted([value, *continuation], key)
    return _plain([value, *continuation], key)


def parse_front_matter(text: str) -> dict[str, str]:
    """Top-level keys mapped to text. ``name`` and ``description`` are parsed as YAML scalars; any
    other key's value is kept as its raw text and never interpreted."""
    entries: list[tuple[str, str, list[str]]] = []
    lines = text.split("\n")
    if lines[-1] == "":  # a final line break ends the last line; it does not start another
        lines.pop()
    for number, line in enumerate(lines, start=1):
        if line.startswith("\t"):
            raise SkillProblem(f"front matter line {number} is indented with a tab, which YAML forbids")
        continues = not line.strip(" \t") or line.startswith(" ") or line == "-" or line.startswith("- ")
        if continues:
            if entries:
                entries[-1][2].append(line)
            elif line.strip():
                raise SkillProblem(f"front matter line {number} is indented before any key")
            continue
        if line.startswith("#"):
            if entries and entries[-1][0] in SCALAR_KEYS:
                entries.append(("#", "", []))  # what follows a comment line no longer continues the value
            continue
        match = _KEY_LINE.fullmatch(line.rstrip(" "))
        if not match:
            raise SkillProblem(f"front matter line {number} is not a 'key: value' line: {line[:60]!r}")
        key = match.group(1)
        if entries and entries[-1][0] == "#" and entries[-1][2]:
            raise SkillProblem(f"front matter line {number - 1} continues a value after a comment line")
        if any(key == seen for seen, _, _ in entries):
            raise SkillProblem(f"front matter sets '{key}' twice")
        entries.append((key, match.group(2) or "", []))
    for key, _, continuation in entries:
        if key == "#" and any(line.strip(" ") for line in continuation):
            raise SkillProblem("a value continues after a comment line")
    return {key: _value(key, value, continuation) if key in SCALAR_KEYS
            else "\n".join([value, *continuation]) for key, value, continuation in entries if key != "#"}


def check_skill(directory_name: str, fields: Mapping[str, str]) -> tuple[str, str]:
    """(name, description) of a valid skill, or :class:`SkillProblem` naming the rule broken."""
    if "name" not in fields:
        raise SkillProblem("the front matter has no 'name'")
    if "description" not in fields:
        raise SkillProblem("the front matter has no 'description'")
    name, description = fields["name"], fields["description"]
    if not 1 <= len(name) <= NAME_MAX_CHARS:
        raise SkillProblem(f"name {name[:80]!r} has {len(name)} characters; it must have 1-{NAME_MAX_CHARS}")
    if not NAME_RULE.fullmatch(name):
        raise SkillProblem(f"name {name!r} must be lowercase letters, digits and single hyphens, "
                           "not starting or ending with a hyphen")
    if name != directory_name:
        raise SkillProblem(f"name {name!r} does not match its directory name {directory_name!r}")
    if not description.strip() or len(description) > DESCRIPTION_MAX_CHARS:
        raise SkillProblem(f"description has {len(description)} characters; it must have 1-{DESCRIPTION_MAX_CHARS} "
                           "and not be blank")
    control = next((ch for ch in description if ord(ch) < 32 and ch not in "\n\t" or ord(ch) == 127), None)
    if control is not None:
        raise SkillProblem(f"description contains the control character U+{ord(control):04X}")
    return name, description


# -- the file system ---------------------------------------------------------------------------------------


def is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class Outside(SkillProblem):
    """The path resolves outside its root."""


class NotRegular(SkillProblem):
    """The path resolves to something other than a regular file."""


def open_skill_file(path: str, root: str) -> tuple[int, str]:
    """Open ``path`` for reading only if it resolves to a regular file inside ``root`` (canonical).

    Returns the descriptor and the canonical path that was opened. The path is first resolved with
    ``O_PATH``, which opens nothing, so no file outside the root is ever opened for reading.
    """
    handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        real = os.readlink(f"/proc/self/fd/{handle}")
        if not is_within(real, root):
            raise Outside(f"{path} resolves to {real}, outside its root {root}")
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegular(f"{real} is not a regular file")
        fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    finally:
        os.close(handle)
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):  # cannot happen through the magic link
        os.close(fd)
        raise Outside(f"{path} changed while it was opened")
    return fd, real


def read_prefix(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(fd, limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def user_skill_root(env: Mapping[str, str]) -> str | None:
    directory = user_peon_dir(env)
    return str(directory / "skills") if directory else None


def project_skill_root(workspace: str | os.PathLike) -> str:
    return os.path.join(os.fspath(workspace), ".peon", "skills")


def _canonical_root(root: str, origin: str, workspace: str, report: list[dict]) -> str | None:
    if not os.path.isdir(root):
        if os.path.lexists(root):
            report.append({"path": root, "reason": f"the {origin} skill root is not a directory"})
        return None
    canonical = os.path.realpath(root)
    if origin == PROJECT and not is_within(canonical, os.path.realpath(workspace)):
        report.append({"path": root, "reason": f"the project skill root resolves to {canonical}, outside the workspace"})
        return None
    return canonical


def _candidates(root: str, report: list[dict]) -> list[str]:
    names = []
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                if len(names) >= MAX_ENTRIES_PER_ROOT:
                    report.append({"path": root, "reason": f"the root has more than {MAX_ENTRIES_PER_ROOT} entries; "
                                                           "the rest were not examined"})
                    break
                if entry.name.startswith("."):
                    continue
                if entry.is_dir(follow_symlinks=False) or entry.is_symlink():
                    names.append(entry.name)
    except OSError as exc:
        report.append({"path": root, "reason": f"the root cannot be listed: {exc.strerror}"})
    return sorted(names)


def load_skill(root: str, entry: str, origin: str) -> SkillRecord:
    """One candidate ``<root>/<entry>/SKILL.md`` as a record, or :class:`SkillProblem`."""
    path = os.path.join(root, entry, SKILL_FILE)
    directory = os.path.join(root, entry)
    if os.path.islink(directory):
        target = os.path.realpath(directory)
        if not is_within(target, root):
            raise Outside(f"the skill directory is a symlink to {target}, outside its root")
        if not os.path.isdir(target):
            raise SkillProblem("the entry is a symlink to something that is not a directory")
    try:
        fd, real = open_skill_file(path, root)
    except FileNotFoundError:
        raise SkillProblem(f"no {SKILL_FILE} in the skill directory") from None
    except OSError as exc:
        raise SkillProblem(f"{SKILL_FILE} cannot be opened: {exc.strerror}") from None
    try:
        head = read_prefix(fd, FRONT_MATTER_MAX_BYTES)
    except OSError as exc:
        raise SkillProblem(f"{SKILL_FILE} cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    name, description = check_skill(entry, parse_front_matter(split_front_matter(head)))
    return SkillRecord(name, description, origin, root, real)


def discover(workspace: str | os.PathLike, env: Mapping[str, str], max_skills: int,
             budget_seconds: float = DISCOVERY_BUDGET_SECONDS) -> Discovery:
    """Find the session's skills (see the module's promises)."""
    found = Discovery()
    deadline = time.monotonic() + budget_seconds
    searched: set[str] = set()
    for origin, root in ((USER, user_skill_root(env)), (PROJECT, project_skill_root(workspace))):
        canonical = root and _canonical_root(root, origin, os.fspath(workspace), found.skipped)
        if not canonical or canonical in searched:
            continue
        searched.add(canonical)
        entries = _candidates(canonical, found.skipped)
        for index, entry in enumerate(entries):
            if time.monotonic() >= deadline:
                found.skipped.append({"path": canonical, "reason": f"discovery stopped after {budget_seconds:g} s; "
                                      f"{len(entries) - index} entries of this root were not examined"})
                break
            _consider(found, canonical, entry, origin, max_skills)
    return found


def _consider(found: Discovery, root: str, entry: str, origin: str, max_skills: int) -> None:
    where = os.path.join(root, entry)
    try:
        record = load_skill(root, entry, origin)
    except SkillProblem as problem:
        found.skipped.append({"path": where, "reason": str(problem)})
        return
    kept = found.available.get(record.name)
    if kept is not None:
        found.skipped.append({"path": where, "reason": f"the {kept.origin} skill of the same name ({kept.path}) "
                              "takes precedence"})
    elif len(found.available) >= max_skills:
        found.skipped.append({"path": where, "reason": f"skills.max_skills ({max_skills}) valid skills were already "
                              "found"})
    else:
        found.available[record.name] = record
