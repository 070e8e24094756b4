"""Skills as data: the record of a discovered skill and the rules of a valid ``SKILL.md``. Pure: no I/O.

Promises:

* :class:`SkillRecord` is what discovery found (name, description, origin, canonical root and path);
  it travels to workers as :meth:`SkillRecord.to_dict` and back as ``SkillRecord(**record)``.
* A skill is valid when its ``SKILL.md`` starts with YAML front matter whose ``name`` (1-64 characters
  of ``a-z``, ``0-9`` and ``-``, no leading, trailing or doubled hyphen) equals its directory's name
  and whose ``description`` has 1-1024 characters (:func:`check_skill`); anything else is a
  :class:`SkillProblem` whose message names the rule broken.
* The front matter parser (:func:`split_front_matter`, :func:`parse_front_matter`) is strict:
  ``key: value`` lines with plain, single- or double-quoted scalars (a plain scalar may continue on
  indented lines) and ``|``/``>`` block scalars. Nested values of other keys (``metadata:`` maps,
  lists) are skipped unparsed; flow collections, anchors, aliases and tags in ``name`` or
  ``description`` are refused, as are plain scalars a YAML 1.1 reader would take for a null, boolean,
  number or date. Whatever it accepts, PyYAML reads the same way (a differential test checks this).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SKILL_FILE = "SKILL.md"
PROJECT_SKILL_DIR = ".peon/skills"  # the project root, relative to the workspace
FRONT_MATTER_MAX_BYTES = 16384
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
    arguments: tuple[str, ...] = ()  # the names its front matter declares (:func:`prompt_arguments`)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "description": self.description, "origin": self.origin,
                               "root": self.root, "path": self.path}
        if self.arguments:
            out["arguments"] = list(self.arguments)
        return out


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
    if (rest and not same_line.startswith(" #")) or any(line.strip(" ") for line in later):
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


ARGUMENT_RULE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
MAX_ARGUMENTS = 16


def prompt_arguments(fields: Mapping[str, str]) -> tuple[str, ...]:
    """The argument names an ``arguments`` key declares, as a flow list (``[issue, branch]``), a
    comma- or space-separated line, or a block list of plain names; anything else declares none (the
    skill stays valid: its arguments are a convenience for clients that show prompts)."""
    raw = fields.get("arguments")
    if raw is None:
        return ()
    text = raw.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    names = [piece.strip().removeprefix("- ").strip() for piece in re.split(r"[,\n ]+(?=[^ ])|,", text)]
    names = [name for name in names if name and name != "-"]
    if not names or len(names) > MAX_ARGUMENTS or len(set(names)) != len(names):
        return ()
    if not all(ARGUMENT_RULE.fullmatch(name) for name in names):
        return ()
    return tuple(names)


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
    control = next((ch for ch in description if (ord(ch) < 32 and ch not in "\n\t") or ord(ch) == 127), None)
    if control is not None:
        raise SkillProblem(f"description contains the control character U+{ord(control):04X}")
    return name, description
