"""sed and awk programs given on the command line: do they write files or run commands?

Promise: :func:`sed_script_problem` reads a sed script command by command and names the first that
writes a file or runs a command (``w``, ``W``, ``e``, ``s///w``, ``s///e``); anything it does not
understand is a problem too. An awk program is refused on any word that can run a command or write
(``system``, ``|``, ``>``, ``getline``...). A script computed at run time is a problem. Linear in the
script's length. Owns these readers.
"""

from __future__ import annotations

import re

from peon.approval.shell import Segment


_SED_SIMPLE = set("pdnNqQlL=gGhHxzFPD}{")


# Options of sed and awk that take a value (attached, or the next word), so the value is not the script.
SED_VALUE_OPTIONS = ("-l", "--line-length", "-f", "--file")
AWK_VALUE_OPTIONS = ("-F", "--field-separator", "-v", "--assign", "-f", "--file", "-i", "--include", "-l", "--load",
                     "-E", "--exec", "-W")


def _script_operands(segment: Segment, expression_options: tuple[str, ...],
                     value_options: tuple[str, ...] = ()) -> list[str | None]:
    """The scripts given with ``expression_options`` (``-e S``), else the first operand."""
    words = segment.words[1:]
    scripts: list[str | None] = []
    positional: list[str | None] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word is None:
            positional.append(None)
        elif word in value_options:
            i += 1  # its value is the next word
        elif word.startswith("--") and word.partition("=")[0] in value_options:
            pass
        elif word.startswith("-") and not word.startswith("--") and len(word) > 2 and word[:2] in value_options \
                and word[:2] not in expression_options:
            pass  # -F: and -vx=1: the value is attached
        elif word in expression_options:
            scripts.append(words[i + 1] if i + 1 < len(words) else None)
            i += 1
        elif any(word.startswith(option + "=") for option in expression_options if option.startswith("--")):
            scripts.append(word.partition("=")[2])
        elif word.startswith("-e") and len(word) > 2 and "-e" in expression_options:
            scripts.append(word[2:])
        elif word == "--":
            positional.extend(words[i + 1:])
            break
        elif not word.startswith("-") or word == "-":
            positional.append(word)
        i += 1
    return scripts or positional[:1]


def sed_script_blockers(segment: Segment) -> list[str]:
    """Reasons the sed scripts of this ``sed`` command may write files or run commands."""
    reasons = []
    for script in _script_operands(segment, ("-e", "--expression"), SED_VALUE_OPTIONS):
        problem = "its script is computed at run time" if script is None else sed_script_problem(script)
        if problem:
            reasons.append(f"sed: {problem}")
    return reasons


def sed_script_problem(script: str) -> str | None:
    """Why a sed script may write files or run commands (the w, W, e commands and s///w, s///e), or
    None. Anything this reader does not understand is a problem."""
    i, n = 0, len(script)
    while i < n:
        while i < n and script[i] in " \t\n;":
            i += 1
        if i >= n:
            break
        # address: numbers, $, /re/, \cREc, ranges, steps, negation
        while i < n:
            ch = script[i]
            if ch.isdigit() or ch in "$,~+! \t":
                i += 1
            elif ch == "/" or ch == "\\":
                delimiter = "/" if ch == "/" else (script[i + 1] if i + 1 < n else "")
                i = _skip_delimited(script, i + (1 if ch == "/" else 2), delimiter)
                if i < 0:
                    return "its script could not be read"
                while i < n and script[i] in "IM":
                    i += 1
            else:
                break
        if i >= n:
            break
        command = script[i]
        i += 1
        if command in ("w", "W"):
            return "its script writes a file (w)"
        if command == "e":
            return "its script runs a command (e)"
        if command in "#aicrR":  # to the end of the line: a comment, text, a file to read
            while i < n and script[i] != "\n":
                i += 1
        elif command in ":btT":  # a label: it ends at a blank (`b end w file` writes), ; or a newline
            while i < n and script[i] in " \t":
                i += 1
            while i < n and script[i] not in " \t\n;":
                i += 1
        elif command in ("s", "y"):
            if i >= n:
                return "its script could not be read"
            delimiter = script[i]
            i = _skip_delimited(script, i + 1, delimiter)
            if i < 0:
                return "its script could not be read"
            i = _skip_delimited(script, i, delimiter)
            if i < 0:
                return "its script could not be read"
            flags = ""
            while i < n and script[i] not in "\n;}":
                flags += script[i]
                i += 1
            if command == "s" and ("w" in flags or "e" in flags):
                return "its script writes a file or runs a command (s///w, s///e)"
        elif command not in _SED_SIMPLE:
            return f"its script uses the command {command!r}, which Peon does not check"
    return None


def _skip_delimited(text: str, i: int, delimiter: str) -> int:
    """Index after the unescaped ``delimiter`` that ends a part starting at ``i``; -1 if none."""
    if not delimiter or delimiter in "\n\\":
        return -1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == delimiter:
            return i + 1
        if text[i] == "\n":
            return -1
        i += 1
    return -1


_AWK_DANGER = re.compile(r"system|getline|\||>|fflush|close|ENVIRON|PROCINFO")


def awk_blockers(segment: Segment) -> list[str]:
    """Reasons the program of this ``awk`` command may run commands or write files."""
    scripts = _script_operands(segment, ("--source", "-e"), AWK_VALUE_OPTIONS)
    reasons = []
    for script in scripts:
        if script is None:
            reasons.append("awk: its program is computed at run time")
        elif _AWK_DANGER.search(script):
            reasons.append("awk: its program can run commands or write files (system, |, >, getline)")
    return reasons
