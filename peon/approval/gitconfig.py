"""Reading git's configuration file format, for one question: which keys does a file set?

Promise: :func:`parse_git_config` is pure, total and linear in the text's length. It returns every
``section[.subsection].name`` key a file sets (section and name lower-cased, as git compares them;
subsections kept as written) with its raw value, and the include paths it names; text it cannot read
the way git would is reported as a problem rather than skipped, so a caller can fail closed. A problem
names a line, never quotes the file's content (the file may be anything the supervisor can read).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]*")
_SECTION = re.compile(r"[A-Za-z0-9.-]+")


@dataclass(frozen=True)
class GitConfig:
    entries: tuple[tuple[str, str | None], ...]  # (key, value); value None for a bare "name" (true)
    problem: str | None = None

    def includes(self) -> list[str]:
        """Paths of include.path and includeIf.<condition>.path (every condition: they may hold)."""
        return [value for key, value in self.entries
                if value and (key == "include.path" or (key.startswith("includeif.") and key.endswith(".path")))]


def parse_git_config(text: str) -> GitConfig:
    entries: list[tuple[str, str | None]] = []
    section: str | None = None
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        rest = line.lstrip(" \t")
        if rest.startswith("["):
            header, remainder, problem = _section_header(rest)
            if problem:
                return GitConfig(tuple(entries), f"line {index}: {problem}")
            section = header
            rest = remainder.lstrip(" \t")
        if not rest or rest[0] in "#;" or rest == "\r":
            continue
        match = _NAME.match(rest)
        if match is None:
            return GitConfig(tuple(entries), f"line {index}: cannot read a key name")
        if section is None:
            return GitConfig(tuple(entries), f"line {index}: a key before any section")
        name = match.group(0).lower()
        after = rest[match.end():].lstrip(" \t")
        value: str | None
        if not after or after[0] in "#;\r":
            value = None
        elif after[0] != "=":
            return GitConfig(tuple(entries), f"line {index}: expected '=' after a key name")
        else:
            pieces = [after[1:]]
            while _continues(pieces[-1]) and index < len(lines):  # each line is looked at once: linear
                pieces[-1] = pieces[-1].rstrip("\r")[:-1]
                pieces.append(lines[index])
                index += 1
            value = _value("".join(pieces))
            if value is None:
                return GitConfig(tuple(entries), f"line {index}: an unterminated quoted value")
        entries.append((f"{section}.{name}", value))
    return GitConfig(tuple(entries))


def _section_header(text: str) -> tuple[str | None, str, str | None]:
    """``[core]``, ``[remote "origin"]`` or the old ``[branch.main]``; returns (section, rest of line,
    problem)."""
    close = None
    i = 1
    match = _SECTION.match(text, 1)
    if match is None:
        return None, "", "an empty or malformed section header"
    name = match.group(0)
    i = match.end()
    if i < len(text) and text[i] == "]":
        close = i
        section, _, legacy_sub = name.partition(".")
        key = section.lower() + (f".{legacy_sub.lower()}" if legacy_sub else "")
        return key, text[close + 1:], None
    if i < len(text) and text[i] in " \t":
        while i < len(text) and text[i] in " \t":
            i += 1
        if i >= len(text) or text[i] != '"':
            return None, "", "a malformed section header"
        i += 1
        sub = []
        while i < len(text) and text[i] != '"':
            if text[i] == "\\" and i + 1 < len(text):
                i += 1
            sub.append(text[i])
            i += 1
        if i + 1 >= len(text) or text[i + 1] != "]":
            return None, "", "a malformed subsection header"
        return f"{name.lower()}.{''.join(sub)}", text[i + 2:], None
    return None, "", "a malformed section header"


def _continues(raw: str) -> bool:
    stripped = raw.rstrip("\r")
    count = len(stripped) - len(stripped.rstrip("\\"))
    return count % 2 == 1


def _value(raw: str) -> str | None:
    out = []
    quoted = False
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == '"':
            quoted = not quoted
        elif ch == "\\" and i + 1 < len(raw):
            i += 1
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(raw[i], raw[i]))
        elif ch in "#;" and not quoted:
            break
        else:
            out.append(ch)
        i += 1
    if quoted:
        return None
    return "".join(out).strip(" \t\r")
