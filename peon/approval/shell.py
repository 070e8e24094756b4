"""What a ``bash`` command line will run, read with a real shell grammar (tree-sitter-bash).

Promises:

* :func:`analyze` is pure (no I/O, no clock) and total: any string gives a :class:`ShellAnalysis`,
  never an exception; unparsable input is an analysis that says so (``opaque``);
* every *simple command* bash could run is a :class:`Segment` — across ``;``, ``&&``, ``||``, ``|``,
  ``&``, newlines, subshells, groups, loops, conditionals, function bodies, command and process
  substitutions, here-document expansions, ``find -exec``, ``xargs`` and ``bash -c '<literal>'`` —
  normalised before it is matched: leading assignments and the wrappers in :data:`WRAPPERS` (with their
  own options) are removed and recorded, quotes and backslashes are removed from literal words;
* what cannot be seen statically is never guessed: a command name or wrapper operand computed at run
  time, ``eval``/``source``/``trap``/``alias``..., arithmetic evaluation, parse errors and
  here-documents whose end the grammar and bash might disagree on are listed in ``opaque`` (the policy
  treats them as matching every deny/ask rule); things that are visible but make a command line more
  than its segments (substitutions, assignments, function definitions, run-time arguments) are listed
  in ``dynamic`` (the policy never allows them by rules);
* every redirection that writes is listed in ``writes`` with its literal target (``None`` when the
  target is computed at run time) and the working directories the shell may be in at that point
  (``cd`` with a literal operand adds one; any other ``cd``/``pushd``/``popd`` makes it unknown).

The grammar is tree-sitter's (docs/approval.md says why it was chosen over bashlex). Which arguments
make a program unsafe, and which facts need the file system, is :mod:`peon.approval.rules`'s business.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from peon.core.text import shorten, shorten_counted

MAX_NESTING = 4  # bash -c 'bash -c "..."' deeper than this is opaque
MAX_SEGMENTS = 500  # a command line with more simple commands than this is opaque (bounded work)
MAX_COMMAND_BYTES = 256 * 1024  # longer command lines are not parsed at all: opaque
MAX_SHOWN_SEGMENTS = 50  # an approval request shows at most this many segments
MAX_SHOWN_WORD_CHARS = 200
MAX_SYNTAX_DEPTH = 100  # substitutions, subshells and groups nested deeper than this are opaque
MAX_STEPS = 400_000  # syntax nodes the walk may look at (linear work, bounded); past it the line is opaque

# -- results -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Redirect:
    operator: str  # ">", ">>", "&>", "<", "<<", "<<<", ">&", ...
    target: str | None  # the literal target word; None when computed at run time
    writes: bool

    def show(self) -> str:
        return f"{self.operator}{'?' if self.target is None else self.target}"


@dataclass(frozen=True)
class Segment:
    """One simple command, normalised: ``words[0]`` is the program as typed (after wrappers)."""

    words: tuple[str | None, ...]  # literal words; None for a word computed at run time
    source: str  # the text of the command as written
    wrappers: tuple[str, ...] = ()  # removed wrappers, outermost first (e.g. ("env", "nice"))
    assignments: tuple[str, ...] = ()  # names assigned for this command only (FOO=1 cmd)
    redirects: tuple[Redirect, ...] = ()
    origin: str = ""  # "", "command substitution", "find -exec", "xargs", "bash -c", ...
    cwds: tuple[str | None, ...] = (".",)  # where it may run, workspace-relative; None = unknown
    notes: tuple[str, ...] = ()  # why this segment alone can never be allowed by rules

    @property
    def program(self) -> str | None:
        """The program's name without a directory (``/usr/bin/touch`` → ``touch``)."""
        first = self.words[0] if self.words else None
        return None if first is None else posixpath.basename(first) or first

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"words": ["?" if w is None else _shown(w) for w in self.words]}
        for key in ("wrappers", "assignments", "notes"):
            if getattr(self, key):
                out[key] = list(getattr(self, key))
        if self.redirects:
            out["redirects"] = [r.show() for r in self.redirects]
        if self.origin:
            out["origin"] = self.origin
        return out


@dataclass(frozen=True)
class Write:
    target: str | None  # literal path as written; None when computed at run time
    cwds: tuple[str | None, ...]  # workspace-relative working directories it may be relative to


@dataclass(frozen=True)
class ShellAnalysis:
    segments: tuple[Segment, ...]
    opaque: tuple[str, ...] = ()  # parts no one can see statically: match every deny/ask rule
    dynamic: tuple[str, ...] = ()  # visible, but never allowed by rules
    writes: tuple[Write, ...] = ()

    @property
    def parsed(self) -> bool:
        return not self.opaque

    def to_dict(self) -> dict[str, Any]:
        shown = self.segments[:MAX_SHOWN_SEGMENTS]
        out: dict[str, Any] = {"segments": [s.to_dict() for s in shown]}
        if len(self.segments) > len(shown):
            out["segments_not_shown"] = len(self.segments) - len(shown)
        if self.opaque:
            out["unanalyzable"] = list(self.opaque)
        if self.dynamic:
            out["dynamic"] = list(self.dynamic)
        return out


def _shown(word: str) -> str:
    return shorten_counted(word, MAX_SHOWN_WORD_CHARS)


# -- literal words -----------------------------------------------------------------------------------

_BRACE_EXPANSION = re.compile(r"\{[^{}\s]*(,|\.\.)[^{}\s]*\}")  # {a,b} and {1..3}; {} stays literal
_ANSI_SIMPLE = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
                "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def _may_brace_expand(text: str) -> bool:
    """Whether ``{`` then ``,`` or ``..`` then ``}`` occur in this order (one linear scan)."""
    opening = text.find("{")
    if opening < 0:
        return False
    comma, dots = text.find(",", opening), text.find("..", opening)
    separator = min(i for i in (comma, dots, len(text)) if i >= 0)
    return separator < len(text) and text.find("}", separator) >= 0


def _unquote_bare(text: str) -> str | None:
    """A bare word's value: backslashes removed; None if bash would expand it (glob, brace, tilde, $)."""
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 < len(text):
                if text[i + 1] != "\n":  # backslash-newline is a line continuation
                    out.append(text[i + 1])
                i += 2
                continue
            out.append(ch)
        elif ch in "*?[$`" or (ch == "~" and i == 0) or (ch == "{" and _BRACE_EXPANSION.match(text, i)):
            return None
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _unquote_double(inner: str) -> str:
    out = []
    i = 0
    while i < len(inner):
        ch = inner[i]
        if ch == "\\" and i + 1 < len(inner) and inner[i + 1] in '$`"\\\n':
            if inner[i + 1] != "\n":
                out.append(inner[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _unquote_ansi_c(inner: str) -> str | None:
    out = []
    i = 0
    while i < len(inner):
        ch = inner[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= len(inner):
            return None
        nxt = inner[i + 1]
        if nxt in _ANSI_SIMPLE:
            out.append(_ANSI_SIMPLE[nxt])
            i += 2
            continue
        match = re.match(r"x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{1,4})|U([0-9A-Fa-f]{1,8})|([0-7]{1,3})", inner[i + 1:])
        if match is None:
            return None  # \c and friends: not worth guessing
        digits = next(g for g in match.groups() if g is not None)
        code = int(digits, 8 if match.group(4) else 16)
        if code == 0 or code > 0x10FFFF:
            return None  # bash ends the word at NUL
        out.append(chr(code))
        i += 1 + match.end()
    return "".join(out)


# -- the grammar -------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _parser() -> Any:
    import tree_sitter  # imported here: only the supervisor analyses commands, workers never load it
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


PARSE_CHUNK = 512
PARSE_READS_PER_CHUNK = 8  # a well-formed line is read about once; error recovery re-reads without end


def parse_tree(command: str) -> Any:
    """The syntax tree, or None when the grammar needed more than its budget of input reads (its
    error recovery on some malformed lines is quadratic: 120 kB of ``)(`` would take ~45 s)."""
    source = command.encode("utf-8", "surrogatepass")
    budget = PARSE_READS_PER_CHUNK * (len(source) // PARSE_CHUNK + 1) + 64
    reads = 0
    spent = False

    def read(offset: int, _point: Any) -> bytes:
        nonlocal reads, spent
        reads += 1
        if reads > budget:
            spent = True
            return b""
        return source[offset:offset + PARSE_CHUNK]

    parser = _parser()
    parser.parse(read)
    if spent:
        return None
    # Parsed again from the bytes: a tree parsed from a reader reads node texts through it, slowly.
    return parser.parse(source)


# Shell words and keywords that run code the grammar cannot see (or change what names mean).
OPAQUE_BUILTINS = {
    "eval": "eval runs a string as shell code",
    "source": "source runs a file as shell code", ".": ". runs a file as shell code",
    "trap": "trap runs a string as shell code later",
    "alias": "alias changes what a command name runs", "hash": "hash -p changes what a command name runs",
    "enable": "enable can load builtins from a shared object", "shopt": "shopt can turn on alias expansion",
    "let": "let evaluates arithmetic (which can run substitutions)",
    "fc": "fc runs commands from the history", "bind": "bind -x runs shell code",
    "complete": "complete -C runs a command", "compgen": "compgen -C runs a command",
    "mapfile": "mapfile -C runs a callback", "readarray": "readarray -C runs a callback",
}
# Programs that run a command given in their arguments in ways not followed here: opaque. Besides the
# privilege, namespace and tracing tools: util-linux, coreutils, procps, findutils and moreutils runners,
# and the usual launchers (the list is kept long on purpose: a runner missing here hides its command).
RUNNERS = frozenset({
    "watch", "parallel", "sem", "script", "scriptlive", "su", "runuser", "sg", "newgrp", "unshare", "nsenter",
    "systemd-run", "systemd-nspawn", "run0", "pkexec", "firejail", "bwrap", "setpriv", "prlimit", "chrt",
    "chroot", "schroot", "flock", "lckdo", "strace", "ltrace", "gdb", "lldb", "valgrind", "perf", "rr",
    "busybox", "toybox", "expect", "unbuffer", "tmux", "screen", "dtach", "abduco", "at", "batch", "ssh",
    "sshpass", "setarch", "linux32", "linux64", "i386", "x86_64", "uname26", "fakeroot", "fakeroot-ng",
    "fakechroot", "eatmydata", "chronic", "ifne", "pee", "mispipe", "vipe", "zrun", "proxychains",
    "proxychains4", "torsocks", "torify", "tsocks", "trickle", "dbus-run-session", "dbus-launch", "xvfb-run",
    "numactl", "hwloc-bind", "cgexec", "cpulimit", "choom", "uclampset", "coresched", "taskpolicy",
    "catchsegv", "faketime", "daemonize", "start-stop-daemon", "runcon", "aa-exec", "chpst", "softlimit",
    "setuidgid", "envdir", "envuidgid", "gosu", "su-exec", "tini", "dumb-init", "timelimit", "nq", "tsp",
    "entr", "watchexec", "hyperfine", "caffeinate", "flatpak-spawn", "proot", "ld.so", "ld-linux.so.2",
    "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "run-parts", "xe", "rush", "fish", "csh",
    "tcsh", "nu", "elvish", "xonsh", "pwsh", "yash", "posh", "osh", "oil",
})
SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "rbash"})
# Variables whose value bash or a common program runs as code it cannot show: PS4 with xtrace (prompt
# expansion runs substitutions), BASH_ENV and ENV (files a child shell sources), exported functions, git
# configuration in the environment, libraries every program loads.
CODE_VARIABLES = frozenset({
    "PS0", "PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS",
    "BASH_LOADABLES_PATH", "LD_PRELOAD", "LD_AUDIT", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
    "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_EXEC_PATH", "GIT_TEMPLATE_DIR", "LESSOPEN", "LESSCLOSE",
})
# Variables whose value programs run as a command line (through sh -c): a literal value is analysed as
# one (PAGER=cat is the segment `cat`), any other is opaque.
COMMAND_VARIABLES = frozenset({
    "PAGER", "MANPAGER", "EDITOR", "VISUAL", "BROWSER", "GIT_PAGER", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR",
    "GIT_SSH", "GIT_SSH_COMMAND", "GIT_EXTERNAL_DIFF", "GIT_ASKPASS", "SSH_ASKPASS", "GIT_PROXY_COMMAND",
})
_CODE_VARIABLE_PREFIXES = ("BASH_FUNC_", "GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")
# Builtins that take variable names: a name with a subscript (a[$(cmd)]) is evaluated as arithmetic,
# which runs the substitution even when the word was quoted.
NAME_BUILTINS = frozenset({"printf", "read", "declare", "typeset", "local", "export", "readonly", "unset",
                           "test", "[", "getopts", "wait", "mapfile", "readarray", "let", "shift"})
_SUBSCRIPTED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\[")
# Words the grammar can leave where a command name should be when it misreads a line.
_RESERVED_WORDS = frozenset({"{", "}", "(", ")", "((", "[[", "]]", "!", "if", "then", "elif", "else", "fi", "do",
                             "done", "while", "until", "for", "in", "case", "esac", "select", "function"})


def code_variable(name: str) -> bool:
    """Whether assigning ``name`` can make bash (or a program it starts) run code Peon cannot show."""
    return name in CODE_VARIABLES or name.startswith(_CODE_VARIABLE_PREFIXES)
# Commands that name other commands and change only how (or whether) they run. For each: options that
# take no value, options that take one (short ones may be attached: -n5), options whose meaning cannot
# be followed (opaque), options that make the wrapper itself unsafe, and how many operands precede the
# command (timeout's duration).


@dataclass(frozen=True)
class Wrapper:
    flags: frozenset[str] = frozenset()
    with_value: frozenset[str] = frozenset()
    opaque: frozenset[str] = frozenset()
    unsafe: frozenset[str] = frozenset()
    operands: int = 0
    assignments: bool = False  # env: NAME=VALUE words before the command
    numeric_flag: bool = False  # nice -5
    default: tuple[str, ...] = ()  # what runs without a command (xargs runs echo)
    note: str = ""  # why a command under this wrapper is never allowed by rules


WRAPPERS: dict[str, Wrapper] = {
    "command": Wrapper(flags=frozenset({"-p", "-v", "-V"})),
    "builtin": Wrapper(),
    "exec": Wrapper(flags=frozenset({"-c", "-l"}), with_value=frozenset({"-a"})),
    "env": Wrapper(flags=frozenset({"-i", "-0", "--null", "--ignore-environment", "-v", "--debug", "-"}),
                   with_value=frozenset({"-u", "--unset", "-C", "--chdir", "--block-signal", "--default-signal",
                                         "--ignore-signal"}),
                   opaque=frozenset({"-S", "--split-string"}), assignments=True),
    "nice": Wrapper(with_value=frozenset({"-n", "--adjustment"}), numeric_flag=True),
    "time": Wrapper(flags=frozenset({"-p", "--portability", "-v", "--verbose", "-q", "--quiet", "-a", "--append"}),
                    with_value=frozenset({"-f", "--format"}), unsafe=frozenset({"-o", "--output"})),
    "timeout": Wrapper(flags=frozenset({"--preserve-status", "--foreground", "-v", "--verbose"}),
                       with_value=frozenset({"-k", "--kill-after", "-s", "--signal"}), operands=1),
    "nohup": Wrapper(),
    "stdbuf": Wrapper(with_value=frozenset({"-i", "--input", "-o", "--output", "-e", "--error"})),
    "setsid": Wrapper(flags=frozenset({"-c", "--ctty", "-f", "--fork", "-w", "--wait"})),
    "coproc": Wrapper(),
    "ionice": Wrapper(flags=frozenset({"-t", "--ignore"}), with_value=frozenset({"-c", "--class", "-n",
                                                                                "--classdata"})),
    "taskset": Wrapper(flags=frozenset({"-a", "--all-tasks", "-c", "--cpu-list"}), operands=1),
    "xargs": Wrapper(flags=frozenset({"-0", "--null", "-o", "--open-tty", "-p", "--interactive", "-r",
                                      "--no-run-if-empty", "-t", "--verbose", "-x", "--exit"}),
                     with_value=frozenset({"-a", "--arg-file", "-d", "--delimiter", "-E", "-I", "-L", "-n",
                                           "--max-args", "-P", "--max-procs", "-s", "--max-chars",
                                           "--process-slot-var", "--eof", "--replace", "--max-lines"}),
                     default=("echo",), note="its arguments come from input at run time (xargs)"),
    "sudo": Wrapper(flags=frozenset({"-E", "-H", "-n", "-P", "-S", "-b", "-k", "-K", "--preserve-env",
                                     "--non-interactive", "--set-home", "--stdin", "--"}),
                    with_value=frozenset({"-u", "--user", "-g", "--group", "-C", "-D", "--chdir", "-h", "-p",
                                          "-r", "-t", "-T", "-U"}),
                    opaque=frozenset({"-s", "--shell", "-i", "--login", "-e", "--edit"}),
                    note="it runs with another user's privileges (sudo)"),
    "doas": Wrapper(flags=frozenset({"-n"}), with_value=frozenset({"-u", "-C"}), opaque=frozenset({"-s"}),
                    note="it runs with another user's privileges (doas)"),
}
# find/fd options that run a command given as the following words, up to ";" or "+".
_FD_EXEC = frozenset({"-x", "--exec", "-X", "--exec-batch"})
EXEC_OPTIONS = {"find": frozenset({"-exec", "-execdir", "-ok", "-okdir"}), "fd": _FD_EXEC, "fdfind": _FD_EXEC}

_WRITE_OPERATORS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&", "&>|"})
_ARITHMETIC_TEST = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_TRANSPARENT = frozenset({"program", "list", "pipeline", "negated_command", "subshell", "compound_statement",
                          "do_group", "if_statement", "elif_clause", "else_clause", "while_statement",
                          "case_statement", "case_item", "for_statement", "comment"})
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_WORDS = frozenset({"word", "number", "string", "raw_string", "ansi_c_string", "translated_string",
                    "concatenation", "simple_expansion", "expansion", "command_substitution",
                    "process_substitution", "arithmetic_expansion", "brace_expression", "extglob_pattern",
                    "array", "regex", "test_operator", "special_variable_name", "variable_name"})


def literal(node: Any) -> str | None:
    """The value bash gives a word node after quote removal, or None if it is computed at run time."""
    kind = node.type
    text = node.text.decode("utf-8", "surrogateescape")
    if kind == "word" or (kind == "number" and node.named_child_count == 0):
        return _unquote_bare(text)
    if kind == "raw_string":
        return text[1:-1] if len(text) >= 2 and text.endswith("'") else None
    if kind == "string":
        if any(child.type != "string_content" for child in node.named_children) or not text.endswith('"'):
            return None
        return _unquote_double(text[1:-1])
    if kind == "ansi_c_string":
        return _unquote_ansi_c(text[2:-1]) if len(text) >= 3 and text.endswith("'") else None
    if kind == "concatenation":
        if _may_brace_expand(text):
            return None  # {a,'b'}: brace expansion across quoted parts
        parts = [literal(child) for child in node.children]
        return None if any(p is None for p in parts) else "".join(p for p in parts if p is not None)
    return None  # expansions, substitutions, translated strings, arrays...


# -- the walk ----------------------------------------------------------------------------------------


@dataclass
class _State:
    source: bytes
    segments: list[Segment] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)
    dynamic: list[str] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    cwds: list[str | None] = field(default_factory=lambda: ["."])
    depth: int = 0  # nested shells (bash -c, PAGER=...)
    nesting: int = 0  # syntax nesting of the walk (substitutions, subshells, groups)
    steps: int = 0  # syntax nodes looked at, against MAX_STEPS

    def step(self) -> bool:
        """Count one node; False (and the line opaque) once the budget is spent."""
        self.steps += 1
        if self.steps <= MAX_STEPS:
            return True
        self.add_opaque(f"the command is too large to analyse (more than {MAX_STEPS} syntax nodes)")
        return False

    def add_opaque(self, reason: str) -> None:
        if reason not in self.opaque:
            self.opaque.append(reason)

    def add_dynamic(self, reason: str) -> None:
        if reason not in self.dynamic:
            self.dynamic.append(reason)


def analyze(command: str) -> ShellAnalysis:
    """Every simple command ``command`` may run, what cannot be seen, and where it writes."""
    return _analyze_cached(command)


@functools.lru_cache(maxsize=64)  # one call is matched against many rules and shown to the approver
def _analyze_cached(command: str) -> ShellAnalysis:
    state = _State(command.encode("utf-8", "surrogatepass"))
    try:
        _analyze_into(state, command, origin="")
    except RecursionError:  # MAX_SYNTAX_DEPTH keeps the walk far from the limit; this is the last net
        state.add_opaque("the command is nested too deeply to analyse")
    return ShellAnalysis(tuple(state.segments), tuple(state.opaque), tuple(state.dynamic), tuple(state.writes))


def _analyze_into(state: _State, command: str, origin: str) -> None:
    if "\0" in command:
        state.add_opaque("the command contains a NUL byte")
        return
    if len(command) > MAX_COMMAND_BYTES:
        state.add_opaque(f"the command is longer than {MAX_COMMAND_BYTES} characters")
        return
    tree = parse_tree(command)
    if tree is None:
        state.add_opaque("the command could not be parsed within the analysis budget")
        return
    root = tree.root_node
    if root.has_error:
        state.add_opaque(f"the command could not be parsed as bash ({_first_error(root)})")
        return
    saved = state.source
    state.source = command.encode("utf-8", "surrogatepass")
    try:
        _check_coverage(state, root)
        if b"<<" in state.source:
            _check_heredocs(state, root)
        if b"\\\n" in state.source:
            _check_continuations(state, root)
        _visit(state, root, origin)
    finally:
        state.source = saved


def _first_error(node: Any) -> str:
    for child in _descendants(node):
        if child.type == "ERROR" or child.is_missing:
            line, column = child.start_point
            what = f"missing {child.type!r}" if child.is_missing else "unexpected text"
            return f"{what} at line {line + 1}, column {column + 1}"
    return "syntax error"


def _descendants(node: Any) -> Iterator[Any]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def _text(node: Any) -> str:
    text: bytes = node.text
    return text.decode("utf-8", "surrogateescape")


def _snippet(state: _State, node: Any, limit: int = 300) -> str:
    """The start of a node's text, copied in bounded time (a node may span the whole line)."""
    end = min(node.end_byte, node.start_byte + limit)
    return state.source[node.start_byte:end].decode("utf-8", "surrogateescape")


_KEEPS_BACKSLASH_NEWLINE = frozenset({"raw_string", "heredoc_body", "comment", "ansi_c_string"})


def _check_continuations(state: _State, root: Any) -> None:
    """Bash removes backslash-newline before it splits words (``r\\<newline>m`` runs ``rm``); the grammar
    splits there. Between two non-blank characters outside quotes that keep it, the line is opaque.
    One walk of the tree in document order decides every place (linear, whatever the nesting)."""
    source = state.source
    joins = []
    position = source.find(b"\\\n")
    while position >= 0:
        before = source[position - 1:position] if position else b" "
        after = source[position + 2:position + 3] or b" "
        if before not in b" \t\n;&|" and after not in b" \t\n;&|":
            joins.append(position)
        position = source.find(b"\\\n", position + 2)
    if not joins:
        return
    # Innermost enclosing node of interest at each join: quotes that keep the backslash-newline as
    # text (or remove it within one word), substitutions that start a new command line.
    stack: list[tuple[int, bool]] = []  # (end byte, keeps)
    pending = iter(joins)
    join = next(pending, None)
    cursor = root.walk()
    descend = True
    while join is not None:
        node = cursor.node
        if descend:
            while join is not None and join < node.start_byte:  # every node before it has been seen
                if _joins_a_word(state, stack, join):
                    return
                join = next(pending, None)
            if join is None:
                return
            kind = node.type
            if kind in _KEEPS_BACKSLASH_NEWLINE or kind == "string":
                while stack and stack[-1][0] <= node.start_byte:
                    stack.pop()
                stack.append((node.end_byte, True))
            elif kind in ("command_substitution", "process_substitution"):
                while stack and stack[-1][0] <= node.start_byte:
                    stack.pop()
                stack.append((node.end_byte, False))
            if node.child_count and kind not in _KEEPS_BACKSLASH_NEWLINE and cursor.goto_first_child():
                continue
        if cursor.goto_next_sibling():
            descend = True
            continue
        if not cursor.goto_parent():
            break
        descend = False
    while join is not None:  # after the last node
        if _joins_a_word(state, stack, join):
            return
        join = next(pending, None)


def _joins_a_word(state: _State, stack: list[tuple[int, bool]], join: int) -> bool:
    """Whether the backslash-newline at ``join`` joins a word (the line is then made opaque): it does unless the
    innermost node still open there (``stack``: end byte, keeps) keeps it as text."""
    while stack and stack[-1][0] <= join:
        stack.pop()
    if stack and stack[-1][1]:
        return False
    state.add_opaque("a line continuation joins a word bash reads as one (a backslash-newline)")
    return True


def _visit(state: _State, node: Any, origin: str) -> None:
    if len(state.segments) > MAX_SEGMENTS:
        state.add_opaque(f"the command has more than {MAX_SEGMENTS} simple commands")
        return
    if not node.is_named:
        return  # keywords and operators: ;, &&, |, then, done...
    if not state.step():
        return
    if state.nesting >= MAX_SYNTAX_DEPTH:
        state.add_opaque(f"the command nests more than {MAX_SYNTAX_DEPTH} levels deep")
        return
    state.nesting += 1
    try:
        _visit_node(state, node, origin)
    finally:
        state.nesting -= 1


def _flattened(node: Any) -> list[Any]:
    """The operands of a chain of ``&&``/``||`` (the grammar nests it to the left, one level per
    operator), without recursion."""
    out: list[Any] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == "list":
            stack.extend(reversed(current.children))
        else:
            out.append(current)
    return out


def _visit_node(state: _State, node: Any, origin: str) -> None:
    kind = node.type
    if kind == "compound_statement" and node.children and node.children[0].type == "((":
        state.add_opaque("it evaluates arithmetic (which can run substitutions hidden in variables)")
    elif kind == "list":
        for child in _flattened(node):
            _visit(state, child, origin)
    elif kind in _TRANSPARENT:
        for child in node.children:
            _visit(state, child, origin)
    elif kind == "command":
        _command(state, node, origin, ())
    elif kind == "redirected_statement":
        body = node.child_by_field_name("body")
        redirects = [child for child in node.children if child.type in _REDIRECTS]
        for child in node.children:
            if child.is_named and child.type not in _REDIRECTS and child != body:
                _visit(state, child, origin)
        _redirected(state, body, redirects, origin)
    elif kind in _REDIRECTS:
        for redirect, extra in _redirects(state, node, origin):
            if extra:
                state.add_opaque("words after a redirection outside a command")
            _record_write(state, redirect)
    elif kind == "heredoc_body":
        _words(state, node, origin)
    elif kind in ("variable_assignment", "variable_assignments"):
        for name in _assigned_names(node):
            state.add_dynamic(f"it assigns the shell variable {name} (which can change what later commands run)")
        _assignments(state, node, origin)
        _words(state, node, origin)
    elif kind in ("declaration_command", "unset_command"):
        words = [child for child in node.children if child.type != "variable_assignment"]
        state.add_dynamic(f"it runs {_text(node.children[0])}, which changes shell variables or functions")
        _assignments(state, node, origin)
        _words(state, node, origin)
        literal_words = tuple(literal(w) if w.is_named else _text(w) for w in words)
        _name_builtin(state, literal_words)
        state.segments.append(Segment(literal_words, _snippet(state, node), origin=origin, cwds=tuple(state.cwds),
                                      notes=("it changes shell variables or functions",)))
    elif kind == "function_definition":
        name = node.child_by_field_name("name")
        state.add_dynamic(f"it defines the shell function {_text(name) if name else '?'}")
        body = node.child_by_field_name("body")
        if body is not None:
            _visit(state, body, "function body")
    elif kind == "test_command":
        _test(state, node, origin)
    elif kind == "c_style_for_statement" or kind == "arithmetic_expansion":
        state.add_opaque("it evaluates arithmetic (which can run substitutions hidden in variables)")
    elif kind in _WORDS:
        _words(state, node, origin)
    elif kind in ("heredoc_start", "heredoc_end", "heredoc_content", "file_descriptor"):
        return
    else:
        state.add_opaque(f"it uses shell syntax Peon does not analyse ({kind})")


def _redirected(state: _State, body: Any, redirect_nodes: list[Any], origin: str) -> None:
    """Redirections written after a statement. Bash binds them to the last simple command (``cd a &&
    make > f`` redirects ``make``), which the grammar attaches to the whole list or pipeline."""
    if body is not None and body.type == "command":
        _command(state, body, origin, redirect_nodes)
        return
    if body is not None and body.type in ("list", "pipeline"):
        named = [child for child in body.children if child.is_named and child.type != "comment"]
        last = named[-1] if named else None
        for child in body.children:
            if child != last:
                _visit(state, child, origin)
        _redirected(state, last, redirect_nodes, origin)
        return
    if body is not None:
        _visit(state, body, origin)
    for child in redirect_nodes:
        for redirect, extra in _redirects(state, child, origin):
            if extra:
                state.add_opaque("words after a redirection of a compound command")
            _record_write(state, redirect)


def _assignments(state: _State, node: Any, origin: str) -> None:
    """Assignments in ``node`` (itself, or its direct children) of variables whose value runs as code."""
    if node.type == "variable_assignment":
        found = [node]
    else:
        found = [child for child in node.children if child.type == "variable_assignment"]
    for item in found:
        name = item.child_by_field_name("name")
        value = item.child_by_field_name("value")
        appends = any(_text(c) == "+=" for c in item.children if not c.is_named)
        if name is not None:
            _assigned(state, _text(name), None if value is None or appends else literal(value), origin,
                      empty=value is None)


def _assigned(state: _State, name: str, value: str | None, origin: str, *, empty: bool = False) -> None:
    """One assignment: a variable bash or a program runs as code is opaque, unless its value is a literal
    command line, which is analysed like ``sh -c``."""
    if code_variable(name):
        state.add_opaque(f"it assigns {name}, whose value bash or a program it starts runs as code")
    elif name in COMMAND_VARIABLES and not empty:
        if value is None:
            state.add_opaque(f"it gives {name} (a command line programs run) a value computed at run time")
        else:
            _nested_script(state, value, name)


def _name_builtin(state: _State, words: tuple[str | None, ...]) -> None:
    """Builtins that take variable names: a subscripted name is evaluated as arithmetic (``printf -v
    'a[$(cmd)]'``), integer and reference attributes make later assignments code, and some read into a
    variable whose value runs as code."""
    program = words[0] if words else None
    if program is None or program not in NAME_BUILTINS:
        return
    arguments = words[1:]
    if program in ("test", "[") and not any(w in ("-v", "-R") for w in arguments):
        return
    for word in arguments:
        if word is None:
            continue
        if _SUBSCRIPTED_NAME.match(word):
            state.add_opaque(f"{program} evaluates the subscript of a variable name as arithmetic (which can run "
                             "commands)")
            return
        if program in ("declare", "typeset", "local") and word.startswith(("-", "+")) and set(word[1:]) & set("in"):
            state.add_opaque(f"{program} {word} makes later assignments evaluated (integer or reference variables)")
            return
        if program in ("read", "printf", "getopts", "wait", "mapfile", "readarray") and (
                code_variable(word) or word in COMMAND_VARIABLES):
            state.add_opaque(f"{program} sets {word}, whose value runs as code, from input")
            return
        declares = program in ("export", "declare", "typeset", "local", "readonly")
        if declares and "=" in word and not word.startswith("-"):
            name, _, value = word.partition("=")
            _assigned(state, name, value, program)


def _assigned_names(node: Any) -> list[str]:
    found = node.children if node.type == "variable_assignments" else [node]
    names = []
    for item in found:
        name = item.child_by_field_name("name")
        if name is not None:
            names.append(_text(name))
    return names


def _test(state: _State, node: Any, origin: str) -> None:
    if _snippet(state, node, 2) == "((":
        state.add_opaque("it evaluates arithmetic (which can run substitutions hidden in variables)")
        return
    names_variable = False
    subscripted = False
    for child in _descendants(node):
        if not state.step():
            return
        if child.type == "test_operator":
            operator = _text(child)
            names_variable = names_variable or operator in ("-v", "-R")
            if operator in _ARITHMETIC_TEST and _snippet(state, node, 2) == "[[":
                state.add_opaque("[[ ... -eq ... ]] evaluates arithmetic (which can run substitutions)")
        elif child.type in ("word", "raw_string", "string", "concatenation", "ansi_c_string"):
            value = literal(child)
            subscripted = subscripted or (value is not None and _SUBSCRIPTED_NAME.match(value) is not None)
    if names_variable and subscripted:
        state.add_opaque("-v evaluates the subscript of a variable name as arithmetic (which can run commands)")
    _words(state, node, origin)


def _words(state: _State, node: Any, origin: str) -> None:
    """Substitutions, arithmetic and subscripts anywhere inside a word-like node."""
    stack = list(node.children)
    while stack:
        child = stack.pop()
        if not state.step():
            return
        if child.type in ("command_substitution", "process_substitution"):
            what = "command substitution" if child.type == "command_substitution" else "process substitution"
            state.add_dynamic(f"it uses {what} ({_short(_snippet(state, child, 80))})")
            for inner in child.children:
                _visit(state, inner, what)
        elif child.type == "arithmetic_expansion":
            state.add_opaque("it evaluates arithmetic (which can run substitutions hidden in variables)")
        elif child.type == "subscript":
            state.add_opaque("it uses an array subscript (evaluated as arithmetic)")
        elif child.type == "expansion":
            reason = _arithmetic_in_expansion(child) or _indirect_expansion(state, child)
            if reason:
                state.add_opaque(reason)
            stack.extend(child.children)
        else:
            stack.extend(child.children)


def _indirect_expansion(state: _State, node: Any) -> str | None:
    """``${!x}`` expands the variable x names, and a name with a subscript (``a[$(cmd)]``) is evaluated
    as arithmetic; listing names or keys (``${!p*}``, ``${!a[@]}``) evaluates nothing."""
    text = _snippet(state, node, 8)
    if not text.startswith("${!"):
        return None
    whole = _text(node) if node.end_byte - node.start_byte < 200 else ""
    if whole.endswith(("[@]}", "[*]}", "*}", "@}")):
        return None
    return "${!name} expands a variable named at run time (a subscript in it is evaluated as arithmetic)"


def _arithmetic_in_expansion(node: Any) -> str | None:
    """``${x@P}`` expands a prompt string (running its substitutions); ``${x:offset}`` and ``${x[i]}``
    evaluate arithmetic, which runs substitutions hidden in a variable's value."""
    children = node.children
    for index, child in enumerate(children):
        following = children[index + 1] if index + 1 < len(children) else None
        if child.type == "@" and following is not None and _text(following) == "P":
            return "${...@P} expands a prompt string, which can run substitutions"
        if child.type == ":" and following is not None and following.is_named and following.type != "number":
            return "${...:offset} evaluates arithmetic (which can run substitutions hidden in variables)"
    return None


def _short(text: str, limit: int = 60) -> str:
    text = text.replace("\n", "\\n")
    return shorten(text, limit)


def _redirects(state: _State, node: Any, origin: str) -> list[tuple[Redirect, list[Any]]]:
    """The redirections in a redirect node (a here-document's line may carry more), each with the
    words the grammar attached after its target (``cmd >f arg``: ``arg`` is the command's argument)."""
    kind = node.type
    if kind == "heredoc_redirect":
        found: list[tuple[Redirect, list[Any]]] = [(Redirect("<<", None, False), [])]
        for child in node.children:
            if child.type in _REDIRECTS:
                found.extend(_redirects(state, child, origin))
            elif child.type == "heredoc_body":
                _words(state, _Holder(child), origin)
        return found
    _words(state, node, origin)
    if kind == "herestring_redirect":
        return [(Redirect("<<<", None, False), [])]
    operator = next((_text(child) for child in node.children if not child.is_named), "")
    destinations = [node.children[i] for i in range(len(node.children))
                    if node.field_name_for_child(i) == "destination"]
    if not destinations:
        return [(Redirect(operator, None, operator in _WRITE_OPERATORS), [])]
    target = literal(destinations[0])
    duplicate = operator in (">&", "<&") and target is not None and (target.isdigit() or target == "-")
    writes = operator in _WRITE_OPERATORS and not duplicate
    return [(Redirect(operator, target, writes), destinations[1:])]


def _record_write(state: _State, redirect: Redirect) -> None:
    if redirect.writes:
        state.writes.append(Write(redirect.target, tuple(state.cwds)))


_COVERING = frozenset({"heredoc_body", "string", "translated_string"})  # their text is theirs, children or not
_SEPARATORS = re.compile(rb"(?:[ \t\n]|\\\n)*")


def _check_coverage(state: _State, root: Any) -> None:
    """Every byte between the grammar's tokens must be a blank or a line continuation: text the grammar
    skipped (it drops a leading escaped blank, which bash keeps) is text whose meaning Peon did not see."""
    source = state.source
    position = 0
    cursor = root.walk()
    descend = True
    while True:
        node = cursor.node
        if descend and node.child_count and node.type not in _COVERING and cursor.goto_first_child():
            continue
        if descend and node.type != "program":  # a token, or a node whose text is all its own
            start = node.start_byte
            if start > position and not _SEPARATORS.fullmatch(source, position, start):
                gap = source[position:start].decode("utf-8", "replace")
                state.add_opaque(f"the grammar skipped text it did not understand ({_short(gap)!r})")
                return
            position = max(position, node.end_byte)
        if cursor.goto_next_sibling():
            descend = True
            continue
        if not cursor.goto_parent():
            break
        descend = False
    if position < len(source) and not _SEPARATORS.fullmatch(source, position, len(source)):
        state.add_opaque("the grammar skipped text at the end of the command")


def _check_heredocs(state: _State, root: Any) -> None:
    """Bash ends a here-document at the first line equal to its delimiter; if the grammar ended it
    anywhere else, commands could hide in (or out of) the body, so the command is opaque."""
    lines = state.source.split(b"\n")
    offsets = []
    position = 0
    for line in lines:
        offsets.append(position)
        position += len(line) + 1
    for node in _descendants(root):
        if node.type != "heredoc_redirect":
            continue
        start = next((c for c in node.children if c.type == "heredoc_start"), None)
        end = next((c for c in node.children if c.type == "heredoc_end"), None)
        strip_tabs = any(_text(c) == "<<-" for c in node.children if not c.is_named)
        if start is None or end is None:
            state.add_opaque("a here-document has no end line")
            continue
        delimiter = _heredoc_delimiter(_text(start))
        if delimiter is None:
            state.add_opaque("a here-document's delimiter is computed at run time")
            continue
        body = next((c for c in node.children if c.type == "heredoc_body"), None)
        first_line = (body.start_point[0] if body is not None else end.start_point[0])
        end_line = end.start_point[0]
        for number in range(first_line, end_line + 1):
            line = lines[number] if number < len(lines) else b""
            if strip_tabs:
                line = line.lstrip(b"\t")
            if line == delimiter.encode("utf-8", "surrogatepass"):
                if number != end_line:
                    state.add_opaque("a here-document ends earlier than the grammar says")
                break
        else:
            state.add_opaque("a here-document's end line does not match its delimiter")


def _heredoc_delimiter(word: str) -> str | None:
    if "$" in word or "`" in word:
        return None
    out, quote = [], ""
    i = 0
    while i < len(word):
        ch = word[i]
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\" and quote == '"' and i + 1 < len(word):
                i += 1
                out.append(word[i])
            else:
                out.append(ch)
        elif ch in "'\"":
            quote = ch
        elif ch == "\\" and i + 1 < len(word):
            i += 1
            out.append(word[i])
        else:
            out.append(ch)
        i += 1
    return "".join(out)


# -- one simple command ------------------------------------------------------------------------------


def _command(state: _State, node: Any, origin: str, outer_redirects: Any) -> None:
    """A ``command`` node; ``outer_redirects`` are those written after it (``cmd > f``)."""
    assignments: list[str] = []
    word_nodes: list[Any] = []
    redirects: list[Redirect] = []
    redirect_nodes = []
    for index, child in enumerate(node.children):
        field_name = node.field_name_for_child(index)
        if child.type == "variable_assignment":
            assignments.extend(_assigned_names(child))
            _assignments(state, child, origin)
            _words(state, child, origin)
        elif child.type == "command_name":
            word_nodes.extend(child.named_children)
        elif child.type in _REDIRECTS:
            redirect_nodes.append(child)
        elif field_name == "argument" or child.type in _WORDS:
            word_nodes.append(child)
        elif child.is_named and child.type != "comment":
            state.add_opaque(f"it uses shell syntax Peon does not analyse ({child.type})")
    for child in [*redirect_nodes, *outer_redirects]:
        for redirect, extra in _redirects(state, child, origin):
            redirects.append(redirect)
            _record_write(state, redirect)
            word_nodes.extend(extra)  # bash: `rm >/dev/null -rf x` runs `rm -rf x`
    word_nodes.sort(key=lambda w: w.start_byte)
    for word in word_nodes:
        _words(state, _Holder(word), origin)
    words = tuple(_joined_words(word_nodes))
    _add_segment(state, words, _snippet(state, node), tuple(assignments), tuple(redirects), origin)


def _joined_words(nodes: list[Any]) -> list[str | None]:
    """Literal words; nodes with nothing between them are one word to bash (the grammar sometimes
    splits ``$'a'b`` in two)."""
    words: list[str | None] = []
    previous_end = -1
    for node in nodes:
        value = literal(node)
        if node.start_byte == previous_end and words:
            last = words[-1]
            words[-1] = None if last is None or value is None else last + value
        else:
            words.append(value)
        previous_end = node.end_byte
    return words


class _Holder:
    """Lets :func:`_words` look at a node itself, not only at its children."""

    def __init__(self, node: Any):
        self.children = [node]


def _add_segment(state: _State, words: tuple[str | None, ...], source: str, assignments: tuple[str, ...],
                 redirects: tuple[Redirect, ...], origin: str) -> None:
    notes: list[str] = []
    if assignments:
        notes.append(f"it sets {', '.join(assignments)} for the command (which can change what it runs)")
    wrappers: list[str] = []
    rest = list(words)
    while rest:
        name = rest[0]
        if name is None:
            state.add_opaque(f"a command name is computed at run time ({_short(source)})")
            break
        base = posixpath.basename(name) or name
        if base in OPAQUE_BUILTINS:
            state.add_opaque(OPAQUE_BUILTINS[base])
            break
        if base in RUNNERS and len(rest) > 1:
            state.add_opaque(f"{base} runs a command given in its arguments, which Peon does not follow")
            break
        wrapper = WRAPPERS.get(base)
        if wrapper is None:
            break
        unwrapped = _unwrap(base, wrapper, rest[1:])
        if isinstance(unwrapped, str):
            state.add_opaque(unwrapped)
            # The wrapper itself is still a segment deny rules can see.
            break
        inner, wrapper_notes, skipped_assignments = unwrapped
        if wrapper_notes:
            notes.extend(wrapper_notes)
        if skipped_assignments:
            names = [assigned for assigned, _ in skipped_assignments]
            notes.append(f"it sets {', '.join(names)} for the command (which can change what it runs)")
            for assigned, value in skipped_assignments:
                _assigned(state, assigned, value, base)
        if base == "coproc" and any(w in _RESERVED_WORDS for w in inner[:2]):
            state.add_opaque("coproc runs a compound command the grammar does not read")
            break
        wrappers.append(base)
        if not inner:
            if wrapper.default:
                inner = list(wrapper.default)
            else:
                rest = [name]  # `exec >f`, `command` alone: the wrapper is the command
                wrappers.pop()
                break
        rest = inner
    if not rest:
        return
    _program_checks(state, tuple(rest))
    for name in wrappers:
        if WRAPPERS[name].note:
            notes.append(WRAPPERS[name].note)
    segment = Segment(tuple(rest), source, tuple(wrappers), assignments, redirects, origin, tuple(state.cwds),
                      tuple(dict.fromkeys(notes)))
    state.segments.append(segment)
    _follow(state, segment)


def _program_checks(state: _State, words: tuple[str | None, ...]) -> None:
    """Programs whose own arguments make bash (or them) run code the segments do not show."""
    first = words[0]
    if first is None:
        return
    if first in _RESERVED_WORDS:
        state.add_opaque(f"the grammar read the reserved word {first!r} as a command name")
        return
    program = posixpath.basename(first) or first
    if program == "jobs":
        for word in words[1:]:
            if word is None or (word.startswith("-") and "x" in word):
                state.add_opaque("jobs -x runs a command given in its arguments")
                return
            if not word.startswith("-"):
                break
    _name_builtin(state, (program, *words[1:]))


def _unwrap(name: str, wrapper: Wrapper, args: list[str | None]
            ) -> str | tuple[list[str | None], list[str], list[tuple[str, str]]]:
    """The command a wrapper runs, notes about the wrapper's options, and assignments it makes; or a
    reason the command cannot be found statically."""
    notes: list[str] = []
    assigned: list[tuple[str, str]] = []
    operands = wrapper.operands
    i = 0
    while i < len(args):
        word = args[i]
        if word is None:
            return f"an operand of {name} is computed at run time"
        if word == "--" and name != "sudo":
            i += 1
            break
        if word.startswith("-") and word != "-" and operands == wrapper.operands:
            option, _, attached = word.partition("=") if word.startswith("--") else (word[:2], "", word[2:])
            if option in wrapper.opaque or (word.startswith("-") and not word.startswith("--")
                                            and any(f"-{c}" in wrapper.opaque for c in word[1:])):
                return f"{name} {option} runs a command Peon cannot see"
            if option in wrapper.unsafe:
                notes.append(f"{name} {option} writes to a file")
            if option in wrapper.with_value or option in wrapper.unsafe:
                if name == "env" and option in ("-C", "--chdir"):
                    notes.append("env --chdir runs the command in another directory")
                if not attached and not (word.startswith("--") and "=" in word):
                    i += 1
                i += 1
                continue
            if option in wrapper.flags or word in wrapper.flags:
                if not word.startswith("--") and len(word) > 2:
                    bundled = [f"-{c}" for c in word[1:]]
                    if any(flag in wrapper.opaque for flag in bundled):
                        return f"{name} {word} runs a command Peon cannot see"
                    if not all(flag in wrapper.flags for flag in bundled):
                        return f"{name} {word}: an option Peon does not know"
                i += 1
                continue
            if wrapper.numeric_flag and word[1:].isdigit():
                i += 1
                continue
            return f"{name} {word}: an option Peon does not know, so the command it runs is unknown"
        if wrapper.assignments and "=" in word:  # env takes any NAME=VALUE, even BASH_FUNC_f%%=...
            variable, _, value = word.partition("=")
            assigned.append((variable, value))
            i += 1
            continue
        if operands:
            operands -= 1
            i += 1
            continue
        break
    return args[i:], notes, assigned


# -- commands that run other commands ----------------------------------------------------------------


def _follow(state: _State, segment: Segment) -> None:
    """Commands hidden in arguments: bash -c '...', find -exec ... ;, and the directory cd moves to."""
    program = segment.program
    words = segment.words
    if program == "cd" or program in ("pushd", "popd"):
        operands = [w for w in words[1:] if w is None or not w.startswith("-")]
        if program == "cd" and len(operands) == 1 and operands[0] is not None and operands[0] != "-":
            _change_directory(state, operands[0])
        else:
            state.cwds = [*state.cwds, None] if None not in state.cwds else state.cwds
        return
    if program in SHELLS:
        _nested_shell(state, segment)
        return
    exec_options = EXEC_OPTIONS.get(program or "")
    if exec_options:
        i = 1
        while i < len(words):
            if words[i] in exec_options:
                inner: list[str | None] = []
                i += 1
                while i < len(words) and words[i] not in (";", "+"):
                    inner.append(words[i])
                    i += 1
                if inner:
                    _add_segment(state, tuple(inner), segment.source, (), (), f"{program} {words[i - len(inner) - 1]}")
                    state.segments[-1] = _with_note(state.segments[-1], f"{program} runs it for each file found")
            i += 1


def _with_note(segment: Segment, note: str) -> Segment:
    from dataclasses import replace

    return replace(segment, notes=(*segment.notes, note))


def _change_directory(state: _State, target: str) -> None:
    new: list[str | None] = []
    for cwd in state.cwds:
        if cwd is None or target.startswith("/") or target.startswith("~"):
            joined = None if cwd is None or target.startswith("~") else posixpath.normpath(target)
        else:
            joined = posixpath.normpath(posixpath.join(cwd, target))
        if joined not in new:
            new.append(joined)
    # cd may fail (and the line go on), so the old directories stay possible.
    state.cwds = list(dict.fromkeys([*state.cwds, *new]))


_SHELL_OPTIONS_WITH_VALUE = frozenset({"--rcfile", "--init-file"})


def _reads_input(path: str) -> bool:
    """A script-file operand that is the shell's input or a descriptor (``bash /dev/stdin <<<...``)."""
    return path == "-" or path.startswith(("/dev/", "/proc/"))


def _nested_shell(state: _State, segment: Segment) -> None:
    """``bash [options] -c SCRIPT``: bash reads every option before the script (``bash -c -e S``,
    ``bash -c -- S``, ``bash -c +x S``), and ``-o``/``-O`` take a value wherever they are."""
    words = segment.words
    command_mode = False
    i = 1
    operand = None
    while i < len(words):
        word = words[i]
        if word is None:
            state.add_opaque(f"an argument of {segment.program} is computed at run time")
            return
        if word == "--" or word == "-":
            i += 1
            break
        if word in _SHELL_OPTIONS_WITH_VALUE:
            i += 2
            continue
        if word.startswith("--"):
            i += 1
            continue
        if word.startswith(("-", "+")) and len(word) > 1:
            letters = word[1:]
            command_mode = command_mode or "c" in letters
            i += 1 + sum(1 for letter in letters if letter in "oO")
            continue
        break
    if i < len(words):
        operand = words[i]
    if not command_mode:
        if operand is None and i >= len(words):
            state.add_opaque(f"{segment.program} reads the commands it runs from its input")
        elif operand is None:
            state.add_opaque(f"the script file given to {segment.program} is computed at run time")
        elif _reads_input(operand):
            state.add_opaque(f"{segment.program} reads the commands it runs from {operand}")
        # any other script file: what it runs is the file's business, as for any program
        return
    if operand is None:
        state.add_opaque(f"the script given to {segment.program} -c is computed at run time")
        return
    _nested_script(state, operand, f"{segment.program} -c")


def _nested_script(state: _State, script: str, origin: str) -> None:
    """A literal command line another shell runs, analysed into the same result."""
    if state.depth >= MAX_NESTING:
        state.add_opaque(f"shells nested more than {MAX_NESTING} deep")
        return
    state.depth += 1
    saved_cwds = state.cwds
    saved_nesting = state.nesting
    try:
        _analyze_into(state, script, origin)
    finally:
        state.depth -= 1
        state.nesting = saved_nesting
        state.cwds = list(dict.fromkeys([*saved_cwds, *state.cwds]))
