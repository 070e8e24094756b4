"""Arguments that turn a harmless program into one that writes, runs or reconfigures.

Promise: :data:`UNSAFE_ARGUMENTS` is the whole list of programs whose options are checked
(docs/approval.md repeats it with the reasoning). :func:`argument_blockers` names every dangerous option
of such a program however it is spelled — a long option abbreviated (``--outp`` is ``--output``), short
ones clustered (``-no``) — and any argument computed at run time, since it could be the dangerous one.
Owns these tables; sed and awk programs are :mod:`peon.approval.rules.scripts`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from peon.approval.rules.scripts import awk_blockers, sed_script_blockers
from peon.approval.shell import Segment


@dataclass(frozen=True)
class ArgumentRule:
    """Dangerous options of one program. Long options match abbreviations too (GNU getopt and git
    accept any unambiguous prefix: ``--outp=x`` is ``--output=x``)."""

    long: frozenset[str] = frozenset()  # "--output" matches "--output", "--output=x", "--outp"
    short: frozenset[str] = frozenset()  # letters: "-o", "-o5", "-no"
    words: frozenset[str] = frozenset()  # whole words: find's "-exec"
    why: str = ""
    prefixes: tuple[str, ...] = ()  # words starting so: dd's "of="
    always: bool = False  # the program itself writes (split): never allowed by rules


UNSAFE_ARGUMENTS: dict[str, ArgumentRule] = {
    "find": ArgumentRule(words=frozenset({"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0",
                                          "-fprintf", "-fls"}),
                         why="runs commands, deletes or writes files"),
    "fd": ArgumentRule(long=frozenset({"--exec", "--exec-batch"}), short=frozenset("xX"), why="runs commands"),
    "fdfind": ArgumentRule(long=frozenset({"--exec", "--exec-batch"}), short=frozenset("xX"), why="runs commands"),
    "sort": ArgumentRule(long=frozenset({"--output", "--compress-program"}), short=frozenset("o"),
                         why="writes a file or runs a compressor"),
    "rg": ArgumentRule(long=frozenset({"--pre", "--hostname-bin"}), why="runs a program on every file"),
    "sed": ArgumentRule(long=frozenset({"--in-place", "--file"}), short=frozenset("if"),
                        why="edits files in place or reads its script from a file"),
    "awk": ArgumentRule(long=frozenset({"--file", "--include", "--load", "--exec", "--pretty-print", "--profile",
                                        "--dump-variables"}), short=frozenset("filEopdW"),
                        why="reads its program from a file, loads an extension or writes a file"),
    "tree": ArgumentRule(short=frozenset("o"), why="writes its output to a file"),
    "shuf": ArgumentRule(long=frozenset({"--output"}), short=frozenset("o"), why="writes its output to a file"),
    "iconv": ArgumentRule(long=frozenset({"--output"}), short=frozenset("o"), why="writes its output to a file"),
    "less": ArgumentRule(long=frozenset({"--log-file", "--LOG-FILE"}), short=frozenset("oO"),
                         why="copies its input to a file"),
    "date": ArgumentRule(long=frozenset({"--set"}), short=frozenset("s"), why="sets the system clock"),
    "dd": ArgumentRule(prefixes=("of=",), why="writes a file"),
    "split": ArgumentRule(always=True, why="writes files named after its prefix"),
    "csplit": ArgumentRule(always=True, why="writes files named after its prefix"),
}
for _name in ("gawk", "mawk", "nawk"):
    UNSAFE_ARGUMENTS[_name] = UNSAFE_ARGUMENTS["awk"]


def option_matches(word: str, rule: ArgumentRule) -> bool:
    if word in rule.words or word.startswith(rule.prefixes or ("\0",)):
        return True
    if word.startswith("--") and len(word) > 2:
        name = word.partition("=")[0]
        return any(option.startswith(name) and len(name) >= 3 for option in rule.long)
    if word.startswith("-") and len(word) > 1 and not word[1:].lstrip("0123456789").startswith("-"):
        return any(letter in rule.short for letter in word[1:])
    return False


def argument_blockers(segment: Segment) -> list[str]:
    """Reasons the arguments of a program in :data:`UNSAFE_ARGUMENTS` make this simple command unsafe
    (a sed or awk script included); none for any other program."""
    program = segment.program
    rule = UNSAFE_ARGUMENTS.get(program or "")
    if rule is None:
        return []
    reasons = []
    if rule.always:
        reasons.append(f"{program} {rule.why}")
    if any(w is None for w in segment.words[1:]):
        reasons.append(f"an argument of {program} is computed at run time (it could be a dangerous option)")
    for word in segment.words[1:]:
        if word is not None and option_matches(word, rule):
            reasons.append(f"{program} {word} {rule.why}")
    if program == "sed":
        reasons.extend(sed_script_blockers(segment))
    if program in ("awk", "gawk", "mawk", "nawk"):
        reasons.extend(awk_blockers(segment))
    return reasons
