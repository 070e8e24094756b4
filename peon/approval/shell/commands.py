"""What each simple command runs: wrappers taken off, the commands other commands run followed.

Promises:

* :func:`add_segment` records one simple command normalised: leading assignments and the wrappers in
  :data:`WRAPPERS` (with their own options) removed and recorded, so ``env -i nice -n5 rm x`` is the
  segment ``rm x``; a wrapper option it does not know, or an operand computed at run time, makes the
  line opaque rather than guessing what runs;
* commands hidden in arguments are followed into segments of their own: ``bash -c '<literal>'`` and the
  other :data:`SHELLS` (at most :data:`MAX_NESTING` deep), ``find -exec``/``fd -x`` (:data:`EXEC_OPTIONS`),
  ``xargs``, and a literal command line assigned to a variable programs run (:data:`COMMAND_VARIABLES`);
* what runs code no segment shows is opaque: the builtins in :data:`OPAQUE_BUILTINS`, the programs in
  :data:`RUNNERS`, assignments of :data:`CODE_VARIABLES`, subscripted names given to
  :data:`NAME_BUILTINS`; ``cd`` with a literal operand adds the directory it may move to, any other
  ``cd``/``pushd``/``popd`` makes the working directory unknown.

Owns these tables and what they mean for a segment; the syntax around commands is
:mod:`peon.approval.shell.walk`'s.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, replace

from peon.approval.shell.result import Redirect, Segment, one_line
from peon.approval.shell.state import State

MAX_NESTING = 4  # bash -c 'bash -c "..."' deeper than this is opaque


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
SUBSCRIPTED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\[")
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


def check_assignment(state: State, name: str, value: str | None, origin: str, *, empty: bool = False) -> None:
    """One assignment: a variable bash or a program runs as code is opaque, unless its value is a literal
    command line, which is analysed like ``sh -c``."""
    if code_variable(name):
        state.add_opaque(f"it assigns {name}, whose value bash or a program it starts runs as code")
    elif name in COMMAND_VARIABLES and not empty:
        if value is None:
            state.add_opaque(f"it gives {name} (a command line programs run) a value computed at run time")
        else:
            _nested_script(state, value, name)


def check_name_builtin(state: State, words: tuple[str | None, ...]) -> None:
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
        if SUBSCRIPTED_NAME.match(word):
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
            check_assignment(state, name, value, program)


def add_segment(state: State, words: tuple[str | None, ...], source: str, assignments: tuple[str, ...],
                 redirects: tuple[Redirect, ...], origin: str, *, written: tuple[str, ...] = ()) -> None:
    """``written`` holds each of ``words`` as typed; it is kept for the words the segment runs (a suffix of
    ``words`` once wrappers are removed) so an approver sees a computed word as written."""
    notes: list[str] = []
    if assignments:
        notes.append(f"it sets {', '.join(assignments)} for the command (which can change what it runs)")
    wrappers: list[str] = []
    rest = list(words)
    while rest:
        name = rest[0]
        if name is None:
            state.add_opaque(f"a command name is computed at run time ({one_line(source)})")
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
                check_assignment(state, assigned, value, base)
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
    kept = len(rest)
    shown = written[-kept:] if len(written) == len(words) and tuple(words[-kept:]) == tuple(rest) else ()
    segment = Segment(tuple(rest), source, tuple(wrappers), assignments, redirects, origin, tuple(state.cwds),
                      tuple(dict.fromkeys(notes)), written=shown)
    state.segments.append(segment)
    _follow(state, segment)


def _program_checks(state: State, words: tuple[str | None, ...]) -> None:
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
    check_name_builtin(state, (program, *words[1:]))


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


def _follow(state: State, segment: Segment) -> None:
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
                    add_segment(state, tuple(inner), segment.source, (), (), f"{program} {words[i - len(inner) - 1]}")
                    state.segments[-1] = _with_note(state.segments[-1], f"{program} runs it for each file found")
            i += 1


def _with_note(segment: Segment, note: str) -> Segment:
    return replace(segment, notes=(*segment.notes, note))


def _change_directory(state: State, target: str) -> None:
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


def _nested_shell(state: State, segment: Segment) -> None:
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


def _nested_script(state: State, script: str, origin: str) -> None:
    """A literal command line another shell runs, analysed into the same result."""
    if state.depth >= MAX_NESTING:
        state.add_opaque(f"shells nested more than {MAX_NESTING} deep")
        return
    state.depth += 1
    saved_cwds = state.cwds
    saved_nesting = state.nesting
    try:
        state.walk_script(state, script, origin)
    finally:
        state.depth -= 1
        state.nesting = saved_nesting
        state.cwds = list(dict.fromkeys([*saved_cwds, *state.cwds]))
