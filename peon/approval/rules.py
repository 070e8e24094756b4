"""What makes a command line too much for an allow rule: programs' dangerous arguments, git's
repository-configured programs, and where redirections write. Pure: facts that need the file system
arrive as a :class:`ShellFacts`, gathered by the supervisor from the :class:`Questions` asked here.

Promises:

* :func:`command_blockers` and :func:`segment_blockers` return every reason an analysed command (or one
  simple command in it) may not be allowed by rules, as sentences a user can act on; an empty list is
  the only way to be allowed, and a question whose answer is missing counts as a reason (fail closed);
* the tables below are the whole list of programs whose arguments are checked (docs/approval.md
  repeats them with the reasoning); any argument of such a program that is computed at run time is a
  reason, since it could be the dangerous one.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from peon.approval.shell import Segment, ShellAnalysis

# -- arguments that turn a harmless program into one that writes, runs or reconfigures --------------


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
# Programs whose operands are files they write (checked like redirections): which operands (None:
# all of them; 1: the second), and the options that take a value (skipped, not operands).
WRITES_OPERANDS: dict[str, tuple[int | None, frozenset[str]]] = {
    "tee": (None, frozenset()),
    "uniq": (1, frozenset({"-f", "-s", "-w", "--skip-fields", "--skip-chars", "--check-chars"})),
    "xxd": (1, frozenset({"-c", "-g", "-l", "-o", "-s", "-n", "-cols", "-groupsize", "-len", "-seek", "-name"})),
}


def written_operands(segment: Segment) -> list[str | None]:
    """The operands of a :data:`WRITES_OPERANDS` program that name files it writes."""
    which, with_value = WRITES_OPERANDS.get(segment.program or "", (0, frozenset()))
    if segment.program not in WRITES_OPERANDS:
        return []
    operands: list[str | None] = []
    words = segment.words[1:]
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            operands.extend(words[i:])
            break
        if word is not None and word.startswith("-") and word != "-":
            if word in with_value:
                i += 1
            continue
        operands.append(word)
    if which is None:
        return operands
    return operands[which:which + 1]

# git: options before the subcommand that are safe; any other is not (-c, -C, --git-dir, --exec-path...).
GIT_SAFE_GLOBAL = frozenset({"--no-pager", "-P", "-p", "--paginate", "--no-replace-objects", "--literal-pathspecs",
                             "--glob-pathspecs", "--noglob-pathspecs", "--icase-pathspecs", "--no-optional-locks",
                             "--version", "-h", "--no-advice"})
GIT_UNSAFE_LONG = frozenset({"--output", "--exec", "--upload-pack", "--receive-pack", "--ext-diff",
                             "--open-files-in-pager", "--extcmd", "--output-directory", "--exec-path", "--tool",
                             "--template", "--config-env"})
GIT_UNSAFE_SHORT = {"grep": "O", "rebase": "x", "format-patch": "o", "archive": "o", "difftool": "xt",
                    "mergetool": "t", "commit": "", "config": ""}
GIT_UNSAFE_SUBCOMMANDS = {"difftool": "runs a diff tool", "mergetool": "runs a merge tool",
                          "filter-branch": "runs shell filters", "instaweb": "starts a web server and browser",
                          "web--browse": "starts a browser", "daemon": "serves the repository",
                          "help": "runs the manual viewer or browser the configuration names"}
GIT_UNSAFE_SUBCOMMAND_WORDS = {("bisect", "run"): "runs a command", ("submodule", "foreach"): "runs a command"}
# Subcommands that never run hooks; every other may (commit, merge, checkout, push, am, gc --auto...).
GIT_NO_HOOKS = frozenset({"status", "diff", "log", "show", "shortlog", "blame", "annotate", "grep", "ls-files",
                          "ls-tree", "cat-file", "rev-parse", "rev-list", "describe", "diff-tree", "diff-files",
                          "diff-index", "show-ref", "for-each-ref", "whatchanged", "version", "help", "var",
                          "count-objects", "name-rev", "merge-base", "check-ignore", "check-attr", "cherry",
                          "range-diff", "verify-commit", "verify-tag"})
# Configuration keys that make git run a program: "section.*.key" matches any subsection.
GIT_PROGRAM_KEYS = (
    "core.fsmonitor", "core.pager", "core.editor", "core.sshcommand", "core.askpass", "core.gitproxy",
    "core.hookspath", "core.alternaterefscommand", "core.worktree", "diff.external", "diff.*.command",
    "diff.*.textconv", "filter.*.clean", "filter.*.smudge", "filter.*.process", "merge.*.driver", "pager.*",
    "credential.helper", "credential.*.helper", "gpg.program", "gpg.*.program", "sequence.editor",
    "uploadpack.packobjectshook", "remote.*.uploadpack", "remote.*.receivepack", "remote.*.vcs",
    "protocol.*.allow", "protocol.allow", "difftool.*.cmd", "mergetool.*.cmd", "man.*.cmd", "web.browser",
    "browser.*.cmd", "submodule.*.update", "trailer.*.command", "trailer.*.cmd", "init.templatedir",
    "sendemail.*", "include.path", "includeif.*.path", "man.*.path", "man.viewer", "help.*", "browser.*.path",
    "gpg.*.defaultkeycommand", "core.editor", "imap.tunnel",
)
HARMLESS_DEVICES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/fd/1", "/dev/fd/2"})


def git_key_runs_program(key: str, value: str | None) -> bool:
    """Whether config ``key`` (``section.sub.name``, section and name lower-case) makes git run
    something. ``core.fsmonitor = false`` does not; includes count (they are followed separately, but
    an include that cannot be followed is unknown)."""
    section, _, rest = key.partition(".")
    subsection, _, name = rest.rpartition(".")
    for pattern in GIT_PROGRAM_KEYS:
        p_section, _, p_rest = pattern.partition(".")
        p_sub, _, p_name = p_rest.rpartition(".")
        if p_section != section:
            continue
        if p_rest == "*":
            return True
        if p_name != name:
            continue
        if (p_sub == "*" and subsection) or (p_sub == "" and subsection == ""):
            off = value is not None and value.strip().lower() in ("false", "no", "off", "0", "")
            if key == "core.fsmonitor" and off:
                return False
            return key not in ("include.path",) and not key.startswith("includeif.")
    return False


# -- facts from the file system ---------------------------------------------------------------------


@dataclass(frozen=True)
class GitFacts:
    """What a repository's own configuration makes git run, as found from one working directory."""

    program_keys: tuple[str, ...] = ()  # e.g. ("core.fsmonitor in .git/config",)
    hooks: tuple[str, ...] = ()  # executable hooks present
    aliases: tuple[str, ...] = ()  # alias names (lower-case)
    problem: str | None = None  # the configuration could not be read completely: unknown


@dataclass(frozen=True)
class Questions:
    paths: frozenset[str] = frozenset()  # workspace-relative paths to resolve (do they stay inside?)
    git_cwds: frozenset[str] = frozenset()  # workspace-relative directories git runs in
    programs: frozenset[str] = frozenset()  # absolute program paths: the same file as the PATH lookup?
    readable: tuple[str, ...] | None = None  # the call runs sandboxed: read facts only beneath these

    def __bool__(self) -> bool:
        return bool(self.paths or self.git_cwds or self.programs)


@dataclass(frozen=True)
class ShellFacts:
    paths_inside: Mapping[str, bool] = field(default_factory=dict)
    git: Mapping[str, GitFacts] = field(default_factory=dict)
    same_program: Mapping[str, bool] = field(default_factory=dict)


NO_FACTS = ShellFacts()


def rebased(analysis: ShellAnalysis, base: str) -> ShellAnalysis:
    """The analysis of a line run in workspace directory ``base`` (the call's ``cwd``): every working
    directory it records, relative to the workspace root instead of to ``base``."""
    if base in ("", "."):
        return analysis

    def moved(cwds: tuple[str | None, ...]) -> tuple[str | None, ...]:
        return tuple(None if c is None else c if c.startswith("/") else posixpath.normpath(posixpath.join(base, c))
                     for c in cwds)

    segments = tuple(replace(s, cwds=moved(s.cwds)) for s in analysis.segments)
    writes = tuple(replace(w, cwds=moved(w.cwds)) for w in analysis.writes)
    return replace(analysis, segments=segments, writes=writes)


def questions(analysis: ShellAnalysis) -> Questions:
    paths: set[str] = set()
    git_cwds: set[str] = set()
    programs: set[str] = set()
    for target, cwd in _write_candidates(analysis):
        resolved = _workspace_relative(target, cwd)
        if resolved is not None:
            paths.add(resolved)
    for segment in analysis.segments:
        first = segment.words[0] if segment.words else None
        if first is not None and first.startswith("/"):
            programs.add(first)
        if segment.program == "git":
            git_cwds.update(c for c in segment.cwds if c is not None and _workspace_relative(".", c) is not None)
    return Questions(frozenset(paths), frozenset(git_cwds), frozenset(programs))


def _write_candidates(analysis: ShellAnalysis) -> list[tuple[str | None, str | None]]:
    found: list[tuple[str | None, str | None]] = []
    for write in analysis.writes:
        found.extend((write.target, cwd) for cwd in write.cwds)
    for segment in analysis.segments:
        found.extend((operand, cwd) for operand in written_operands(segment) for cwd in segment.cwds
                     if operand != "-")
    return found


def _workspace_relative(target: str | None, cwd: str | None) -> str | None:
    """``target`` (relative to ``cwd``) as a normal workspace-relative path, or None if it is not one."""
    if target is None or cwd is None or target.startswith("/") or cwd.startswith("/"):
        return None
    joined = posixpath.normpath(posixpath.join(cwd, target))
    if joined == ".." or joined.startswith("../"):
        return None
    return joined


# -- blockers ---------------------------------------------------------------------------------------


def command_blockers(analysis: ShellAnalysis, facts: ShellFacts) -> list[str]:
    """Reasons the command line as a whole may not be allowed by rules."""
    reasons = [f"Peon cannot see what it runs: {reason}" for reason in analysis.opaque]
    reasons.extend(analysis.dynamic)
    if not analysis.segments and not reasons:
        reasons.append("it runs no command")
    for target, cwd in _write_candidates(analysis):
        reason = _write_problem(target, cwd, facts)
        if reason and reason not in reasons:
            reasons.append(reason)
    return reasons


def _write_problem(target: str | None, cwd: str | None, facts: ShellFacts) -> str | None:
    if target is None:
        return "it writes to a file whose name is computed at run time"
    if target in HARMLESS_DEVICES:
        return None
    if cwd is None and not target.startswith("/"):
        return f"it writes to {target} in a directory Peon cannot know (after cd)"
    relative = _workspace_relative(target, cwd or ".")
    if relative is None:
        return f"it writes to {target}, outside the workspace"
    inside = facts.paths_inside.get(relative)
    if inside is None:
        return f"it writes to {relative}, which was not checked"
    if not inside:
        return f"it writes to {relative}, which resolves outside the workspace (a symbolic link)"
    return None


def segment_blockers(segment: Segment, facts: ShellFacts) -> list[str]:
    """Reasons this simple command may not be allowed by rules even when a rule names it."""
    reasons = list(segment.notes)
    program = segment.program
    first = segment.words[0] if segment.words else None
    if first is not None and "/" in first:
        if not first.startswith("/"):
            reasons.append(f"{first} is a program in the workspace, not the one on PATH")
        elif not facts.same_program.get(first, False):
            reasons.append(f"{first} is not the {program} found on the session's PATH")
    if program == "git":
        reasons.extend(_git_blockers(segment, facts))
    rule = UNSAFE_ARGUMENTS.get(program or "")
    if rule is not None:
        if rule.always:
            reasons.append(f"{program} {rule.why}")
        if any(w is None for w in segment.words[1:]):
            reasons.append(f"an argument of {program} is computed at run time (it could be a dangerous option)")
        for word in segment.words[1:]:
            if word is not None and _option_matches(word, rule):
                reasons.append(f"{program} {word} {rule.why}")
        if program == "sed":
            reasons.extend(_sed_script_blockers(segment))
        if program in ("awk", "gawk", "mawk", "nawk"):
            reasons.extend(_awk_blockers(segment))
    return reasons


def _option_matches(word: str, rule: ArgumentRule) -> bool:
    if word in rule.words or word.startswith(rule.prefixes or ("\0",)):
        return True
    if word.startswith("--") and len(word) > 2:
        name = word.partition("=")[0]
        return any(option.startswith(name) and len(name) >= 3 for option in rule.long)
    if word.startswith("-") and len(word) > 1 and not word[1:].lstrip("0123456789").startswith("-"):
        return any(letter in rule.short for letter in word[1:])
    return False


def _git_blockers(segment: Segment, facts: ShellFacts) -> list[str]:
    reasons: list[str] = []
    words = segment.words
    i = 1
    while i < len(words):
        word = words[i]
        if word is None:
            return ["an argument of git is computed at run time (it could be -c or another dangerous option)"]
        if not word.startswith("-"):
            break
        if word not in GIT_SAFE_GLOBAL:
            reasons.append(f"git {word} before the subcommand can change the configuration or repository git uses")
        i += 1
    subcommand = words[i] if i < len(words) else None
    rest = [w for w in words[i + 1:]]
    if any(w is None for w in rest):
        reasons.append("an argument of git is computed at run time (it could be a dangerous option)")
    if subcommand in GIT_UNSAFE_SUBCOMMANDS:
        reasons.append(f"git {subcommand} {GIT_UNSAFE_SUBCOMMANDS[subcommand]}")
    if subcommand is not None and rest and rest[0] is not None and (subcommand, rest[0]) in GIT_UNSAFE_SUBCOMMAND_WORDS:
        reasons.append(f"git {subcommand} {rest[0]} {GIT_UNSAFE_SUBCOMMAND_WORDS[(subcommand, rest[0])]}")
    short = GIT_UNSAFE_SHORT.get(subcommand or "", "")
    for word in [w for w in words[1:i] if w is not None]:
        if len(word) >= 4 and "--help".startswith(word):
            reasons.append("git --help runs the manual viewer or browser the configuration names")
    for word in rest:
        if word is None or word == "--":
            if word == "--":
                break
            continue
        if word.startswith("--") and len(word) >= 4 and "--help".startswith(word.partition("=")[0]):
            reasons.append(f"git {subcommand} --help runs the manual viewer or browser the configuration names")
        elif word.startswith("--"):
            name = word.partition("=")[0]
            if any(option.startswith(name) and len(name) >= 4 for option in GIT_UNSAFE_LONG) and \
                    not name.startswith("--output-indicator"):
                reasons.append(f"git {subcommand} {word} writes files or runs programs")
        elif word.startswith("-") and short and any(letter in short for letter in word[1:]):
            reasons.append(f"git {subcommand} {word} writes files or runs programs")
    cwds = segment.cwds
    if None in cwds:
        reasons.append("git runs in a directory Peon cannot know (after cd), so its configuration is unknown")
    for cwd in cwds:
        if cwd is None:
            continue
        if _workspace_relative(".", cwd) is None:
            reasons.append(f"git runs in {cwd}, outside the workspace")
            continue
        found = facts.git.get(_workspace_relative(".", cwd) or ".")
        if found is None:
            reasons.append("the repository's configuration was not checked")
        elif found.problem:
            reasons.append(f"the repository's configuration cannot be checked ({found.problem})")
        else:
            for key in found.program_keys:
                reasons.append(f"the repository configures a program git may run ({key}), and the agent can "
                               "change that configuration")
            if subcommand is not None and subcommand.lower() in found.aliases:
                reasons.append(f"git {subcommand} is an alias defined by the repository")
            if found.hooks and (subcommand is None or subcommand not in GIT_NO_HOOKS):
                reasons.append(f"git {subcommand} may run the repository's hooks ({', '.join(found.hooks)}), which "
                               "the agent can change")
    return list(dict.fromkeys(reasons))


# -- sed and awk scripts ----------------------------------------------------------------------------

_SED_SIMPLE = set("pdnNqQlL=gGhHxzFPD}{")


# Options of sed and awk that take a value (attached, or the next word), so the value is not the script.
SED_VALUE_OPTIONS = ("-l", "--line-length", "-f", "--file")
AWK_VALUE_OPTIONS = ("-F", "--field-separator", "-v", "--assign", "-f", "--file", "-i", "--include", "-l", "--load",
                     "-E", "--exec", "-W")


def _script_operands(segment: Segment, expression_options: tuple[str, ...],
                     value_options: tuple[str, ...] = ()) -> list[str | None]:
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


def _sed_script_blockers(segment: Segment) -> list[str]:
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


def _awk_blockers(segment: Segment) -> list[str]:
    scripts = _script_operands(segment, ("--source", "-e"), AWK_VALUE_OPTIONS)
    reasons = []
    for script in scripts:
        if script is None:
            reasons.append("awk: its program is computed at run time")
        elif _AWK_DANGER.search(script):
            reasons.append("awk: its program can run commands or write files (system, |, >, getline)")
    return reasons


# -- what deny and ask rules compare: options normalised, git globals skipped ------------------------


@dataclass(frozen=True)
class Options:
    """One program's option spellings: each short letter and long name maps to a canonical name;
    ``with_value`` lists canonical names that take a value (attached or the next word); ``implies``
    adds the options one option stands for (``cp -a`` is ``-dR --preserve=all``)."""

    short: Mapping[str, str] = field(default_factory=dict)
    long: Mapping[str, str] = field(default_factory=dict)
    with_value: frozenset[str] = frozenset()
    implies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    operand_values: frozenset[str] = frozenset()  # options whose value is also an operand (curl --url)
    shorthand: bool = False  # an implying option is only a short way to write what it implies (-D)


def _options(short: str = "", long: str = "", values: str = "", implies: Mapping[str, tuple[str, ...]] | None = None,
             operand_values: str = "", shorthand: bool = False) -> Options:
    """Compact tables: ``short`` is "r=recursive R=recursive"; ``long`` is "recursive force"
    (canonical itself) or "dir=directory"; ``values`` are canonical names that take a value."""
    shorts = dict(item.split("=", 1) for item in short.split())
    longs = {}
    for item in long.split():
        name, _, canonical = item.rpartition("=") if item.count("=") == 2 else item.partition("=")
        longs[name] = canonical or name
    return Options(shorts, longs, frozenset(values.split()), dict(implies or {}), frozenset(operand_values.split()),
                   shorthand)


# The programs deny rules usually name. Any other program's options are compared as written, with
# clustered short flags split (-rf = -fr = -r -f).
PROGRAM_OPTIONS: dict[str, Options] = {
    "rm": _options("r=recursive R=recursive f=force i=interactive I=interactive-once d=dir v=verbose",
                   "recursive force interactive dir verbose one-file-system no-preserve-root preserve-root "
                   "interactive=never=force"),
    "cp": _options("r=recursive R=recursive a=archive f=force i=interactive n=no-clobber t=target-directory "
                   "S=suffix u=update v=verbose l=link s=symbolic-link T=no-target-directory",
                   "recursive archive force interactive no-clobber target-directory suffix update verbose link "
                   "symbolic-link no-target-directory", "target-directory suffix",
                   implies={"archive": ("recursive",)}),
    "mv": _options("f=force i=interactive n=no-clobber t=target-directory S=suffix u=update v=verbose "
                   "T=no-target-directory", "force interactive no-clobber target-directory suffix update verbose "
                   "no-target-directory", "target-directory suffix"),
    "chmod": _options("R=recursive v=verbose c=changes f=silent", "recursive verbose changes silent quiet=silent "
                      "reference", "reference"),
    "chown": _options("R=recursive v=verbose c=changes f=silent h=no-dereference", "recursive verbose changes "
                      "silent quiet=silent reference from no-dereference", "reference from"),
    "shred": _options("f=force n=iterations s=size u=remove v=verbose x=exact z=zero",
                      "force iterations size remove verbose exact zero random-source", "iterations size random-source"),
    "curl": _options(
        "X=request d=data H=header o=output O=remote-name u=user A=user-agent T=upload-file F=form b=cookie "
        "c=cookie-jar m=max-time x=proxy e=referer L=location s=silent S=show-error f=fail k=insecure v=verbose "
        "I=head G=get i=include K=config D=dump-header E=cert r=range w=write-out C=continue-at y=speed-time "
        "Y=speed-limit z=time-cond t=telnet-option P=ftp-port Q=quote U=proxy-user",
        "request data data-raw data-binary data-urlencode data-ascii json header output remote-name user "
        "user-agent upload-file form form-string cookie cookie-jar max-time proxy referer location silent "
        "show-error fail insecure verbose head get include config dump-header cert range write-out continue-at "
        "speed-time speed-limit time-cond telnet-option ftp-port quote proxy-user url connect-to resolve "
        "output-dir unix-socket abstract-unix-socket",
        "request data data-raw data-binary data-urlencode data-ascii json header output user user-agent "
        "upload-file form form-string cookie cookie-jar max-time proxy referer config dump-header cert range "
        "write-out continue-at speed-time speed-limit time-cond telnet-option ftp-port quote proxy-user url "
        "connect-to resolve output-dir unix-socket abstract-unix-socket", operand_values="url"),
    "wget": _options(
        "O=output-document o=output-file a=append-output P=directory-prefix U=user-agent q=quiet c=continue "
        "r=recursive N=timestamping i=input-file e=execute t=tries T=timeout w=wait Q=quota l=level "
        "A=accept R=reject D=domains I=include-directories X=exclude-directories B=base",
        "output-document output-file append-output directory-prefix user-agent quiet continue recursive "
        "timestamping input-file execute tries timeout wait quota level accept reject domains "
        "include-directories exclude-directories base post-data post-file body-data method header user "
        "password", "output-document output-file append-output directory-prefix user-agent input-file execute "
        "tries timeout wait quota level accept reject domains include-directories exclude-directories base "
        "post-data post-file body-data method header user password"),
}
# git subcommands: their own options (git accepts unambiguous abbreviations of long options).
GIT_SUBCOMMAND_OPTIONS: dict[str, Options] = {
    "push": _options("f=force u=set-upstream d=delete n=dry-run o=push-option q=quiet v=verbose",
                     "force force-with-lease force-if-includes set-upstream delete dry-run push-option repo "
                     "receive-pack exec=receive-pack quiet verbose all branches mirror tags follow-tags atomic "
                     "prune no-verify verify signed porcelain progress thin no-thin recurse-submodules",
                     "push-option repo receive-pack"),
    "reset": _options("q=quiet N=intent-to-add", "hard soft mixed merge keep quiet recurse-submodules "
                      "pathspec-from-file", "pathspec-from-file"),
    "clean": _options("f=force d=directories x=ignored-too X=only-ignored n=dry-run e=exclude i=interactive "
                      "q=quiet", "force dry-run exclude interactive quiet", "exclude"),
    "checkout": _options("f=force b=new-branch B=force-new-branch q=quiet m=merge p=patch",
                         "force quiet merge patch orphan detach track", "new-branch force-new-branch orphan"),
    "branch": _options("d=delete D=force-delete f=force m=move M=force-move c=copy C=force-copy",
                       "delete force move copy", implies={"force-delete": ("delete", "force"),
                                                          "force-move": ("move", "force"),
                                                          "force-copy": ("copy", "force")}, shorthand=True),
    "commit": _options("a=all m=message F=file n=no-verify C=reuse-message c=reedit-message q=quiet v=verbose "
                       "s=signoff e=edit", "all message file no-verify amend reuse-message reedit-message quiet "
                       "verbose signoff edit no-edit", "message file reuse-message reedit-message"),
    "tag": _options("d=delete f=force a=annotate s=sign m=message F=file", "delete force annotate sign message file",
                    "message file"),
    "rebase": _options("i=interactive x=exec f=force-rebase", "interactive exec force-rebase onto root",
                       "exec onto"),
    "stash": _options(),
}
# Global options git reads before the subcommand, and which take a value.
GIT_GLOBAL_WITH_VALUE = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix",
                                   "--config-env", "--attr-source", "--list-cmds"})
# git's own commands (built in, or shipped in its exec path). Any other subcommand is an alias the
# repository or the environment may define, or a git-NAME program: it may do what any git command does.
_GIT_COMMAND_NAMES = """
add am annotate apply archive bisect blame branch bugreport bundle cat-file check-attr check-ignore check-mailmap
check-ref-format checkout checkout-index cherry cherry-pick clean clone column commit commit-graph commit-tree
config count-objects credential credential-cache credential-store daemon describe diagnose diff diff-files
diff-index diff-tree difftool fast-export fast-import fetch fetch-pack filter-branch fmt-merge-msg for-each-ref
for-each-repo format-patch fsck fsck-objects gc get-tar-commit-id grep hash-object help hook http-backend http-fetch
http-push imap-send index-pack init init-db instaweb interpret-trailers log ls-files ls-remote ls-tree mailinfo
mailsplit maintenance merge merge-base merge-file merge-index merge-octopus merge-one-file merge-ours merge-recursive
merge-recursive-ours merge-recursive-theirs merge-resolve merge-subtree merge-tree mergetool mktag mktree
multi-pack-index mv name-rev notes pack-objects pack-redundant pack-refs patch-id pickaxe prune prune-packed pull
push quiltimport range-diff read-tree rebase receive-pack reflog remote remote-ext remote-fd remote-ftp remote-ftps
remote-http remote-https repack replace request-pull rerere reset restore rev-list rev-parse revert rm send-pack
shell shortlog show show-branch show-index show-ref sparse-checkout stage stash status stripspace submodule subtree
switch symbolic-ref tag unpack-file unpack-objects update-index update-ref update-server-info upload-archive
upload-pack var verify-commit verify-pack verify-tag version whatchanged worktree write-tree
"""
GIT_COMMANDS = frozenset(_GIT_COMMAND_NAMES.split())
# Plumbing (and porcelain) that does what a subcommand a rule names does: a rule naming the key matches
# these whatever their options.
GIT_SAME_EFFECT: dict[str, frozenset[str]] = {
    "push": frozenset({"send-pack", "http-push", "subtree", "remote-ext", "remote-fd", "remote-http",
                       "remote-https", "remote-ftp", "remote-ftps", "svn", "p4"}),
    "fetch": frozenset({"fetch-pack", "http-fetch", "remote-ext", "remote-fd", "remote-http", "remote-https",
                        "remote-ftp", "remote-ftps", "pull"}),
    "commit": frozenset({"commit-tree", "update-ref"}),
    "reset": frozenset({"read-tree", "update-ref", "checkout-index", "restore"}),
    "checkout": frozenset({"read-tree", "checkout-index", "switch", "restore"}),
    "branch": frozenset({"update-ref", "symbolic-ref"}),
    "tag": frozenset({"mktag", "update-ref"}),
    "clean": frozenset(),
    "rm": frozenset({"update-index"}),
    "merge": frozenset({"merge-recursive", "merge-ort", "merge-resolve", "merge-octopus", "merge-subtree",
                        "merge-tree", "read-tree", "update-ref", "pull"}),
}


@dataclass(frozen=True)
class Invocation:
    """A simple command as deny and ask rules compare it."""

    program: str | None  # base name; None when computed at run time
    subcommand: str | None = None  # git's, after its global options; "": none; None: computed at run time
    options: frozenset[str | tuple[str, str]] = frozenset()  # canonical names, (name, value) with values
    operands: tuple[str | None, ...] = ()
    unknown_options: bool = False  # a word computed at run time may be any option


def _canonical_long(name: str, table: Options | None) -> list[str]:
    """``--rec`` is ``--recursive`` when that is the only long option it starts; ambiguous: all of them."""
    if table is None:
        return [name]
    if name in table.long:
        return [table.long[name]]
    found = sorted({canonical for long, canonical in table.long.items() if long.startswith(name) and "=" not in long})
    return found or [name]


def invocation(words: Sequence[str | None]) -> Invocation:
    """``words`` (program first) read the way the program reads them: clustered short options split,
    long options and abbreviations mapped to canonical names, options anywhere before ``--``."""
    return _invocation(tuple(words))


@functools.lru_cache(maxsize=2048)  # each simple command is compared with every deny and ask rule
def _invocation(words: tuple[str | None, ...]) -> Invocation:
    first = words[0] if words else None
    program = None if first is None else (posixpath.basename(first) or first)
    rest = list(words[1:])
    subcommand = None
    if program is not None and program.startswith("git-") and program[4:] in GIT_COMMANDS:
        program, rest = "git", [program[4:], *rest]  # git's exec path holds git-push, git-send-pack...
    table = PROGRAM_OPTIONS.get(program or "")
    if program == "git":
        i = 0
        while i < len(rest):
            word = rest[i]
            if word is None or not word.startswith("-"):
                break
            i += 2 if word in GIT_GLOBAL_WITH_VALUE else 1
        subcommand = rest[i] if i < len(rest) else ""  # "": none (git --version); None: computed
        if subcommand is None:
            return Invocation(program, None, frozenset(), tuple(rest[i + 1:]), True)
        rest = rest[i + 1:]
        table = GIT_SUBCOMMAND_OPTIONS.get(subcommand or "")
    options: set[str | tuple[str, str]] = set()
    operands: list[str | None] = []
    unknown = False
    i = 0
    while i < len(rest):
        word = rest[i]
        i += 1
        if word is None:
            unknown = True
            operands.append(None)
            continue
        if word == "--":
            operands.extend(rest[i:])
            break
        if word.startswith("--"):
            name, equals, value = word[2:].partition("=")
            if table is not None and f"{name}={value}" in table.long:  # rm --interactive=never is --force
                options.add(table.long[f"{name}={value}"])
                continue
            for canonical in _canonical_long(name, table):
                if table is not None and canonical in table.with_value:
                    if not equals:
                        value = _next_value(rest, i)
                        i += 1
                    options.add((canonical, value))
                    if canonical in table.operand_values:
                        operands.append(value)
                else:
                    options.add(canonical)
                options.update(table.implies.get(canonical, ()) if table is not None else ())
            continue
        if word.startswith("-") and len(word) > 1:
            letters = word[1:]
            for index, letter in enumerate(letters):
                canonical = table.short.get(letter, f"-{letter}") if table is not None else f"-{letter}"
                options.update(table.implies.get(canonical, ()) if table is not None else ())
                if table is not None and canonical in table.with_value:
                    value = letters[index + 1:]
                    if not value:
                        value = _next_value(rest, i)
                        i += 1
                    options.add((canonical, value))
                    break
                options.add(canonical)
            continue
        operands.append(word)
    if table is not None and table.shorthand:
        options -= set(table.implies)
    return Invocation(program, subcommand, frozenset(options), tuple(operands), unknown)


def _next_value(words: Sequence[str | None], index: int) -> str:
    word = words[index] if index < len(words) else None
    return "" if word is None else word


def _operands_in_order(wanted: Sequence[str | None], found: Sequence[str | None]) -> bool:
    position = 0
    for word in found:
        if position < len(wanted) and (word is None or word == wanted[position]):
            position += 1
    return position == len(wanted)


def invocation_may_match(segment_words: Sequence[str | None], prefix_words: Sequence[str]) -> bool:
    """For deny and ask rules: could this simple command be what the prefix names, however its options
    are spelled? Options compare as sets (order and clustering do not matter), the prefix's operands
    must occur in order, git compares its subcommand after the global options, and a subcommand git
    does not ship (an alias, a git-NAME program) or plumbing with the same effect matches every git rule."""
    seen = invocation(segment_words)
    wanted = invocation(list(prefix_words))
    if seen.program is not None and seen.program != wanted.program:
        return False
    if seen.program is None:
        return True
    if wanted.program == "git" and wanted.subcommand:
        sub = seen.subcommand
        if sub == "":
            return False  # git alone, or only global options (--version): no subcommand runs
        if sub is None or sub.lower() not in GIT_COMMANDS:
            return True  # computed at run time, an alias or a git-NAME program: it may be anything
        if sub in GIT_SAME_EFFECT.get(wanted.subcommand, ()):
            return True
        if sub != wanted.subcommand:
            return False
    if not seen.unknown_options and not wanted.options <= seen.options:
        return False
    return _operands_in_order(wanted.operands, seen.operands)


def hides_commands(segment_words: Sequence[str | None]) -> str | None:
    """Why this simple command may run any command at all (git configuration given on the command line
    that runs programs, git subcommands that run command strings); None if it does not."""
    seen = invocation(segment_words)
    if seen.program != "git":
        return None
    words = list(segment_words[1:])
    for index, word in enumerate(words):
        if word is None or not word.startswith("-"):
            break
        if word in ("-c", "--config-env") or word.startswith("--config-env="):
            setting = word.partition("=")[2] if "=" in word else (words[index + 1] if index + 1 < len(words) else None)
            if setting is None:
                return f"git {word} sets configuration computed at run time"
            key, _, value = setting.partition("=")
            if key.lower().startswith("alias.") or git_key_runs_program(key.lower(), value):
                return f"git {word} {setting or '?'} sets configuration that runs programs"
        if word.startswith("--exec-path"):
            return "git --exec-path runs git commands from another directory"
    sub = seen.subcommand
    operands = seen.operands
    if sub == "config" and any(w is None or w.lower().startswith("alias.") or git_key_runs_program(w.lower(), "x")
                               for w in operands[:2]):
        return "git config sets configuration that runs programs"
    if sub in ("filter-branch",) or (sub == "submodule" and "foreach" in operands) or \
            (sub == "bisect" and "run" in operands) or (sub == "rebase" and any(
                isinstance(o, tuple) and o[0] == "exec" for o in seen.options)):
        return f"git {sub} runs command strings"
    return None
