"""What really runs when an agent adapter starts its executable, and keeping it the approved one.

Promises:

* :func:`resolve_program` follows a script's ``#!`` line the way the kernel does — the interpreter,
  its one optional argument, up to :data:`MAX_INTERPRETER_DEPTH` nested interpreters — but looks a
  program named through ``env`` (``#!/usr/bin/env node``, ``#!/usr/bin/env -S node --flag``) up in the
  **absolute** entries of the given ``PATH`` only, and refuses a relative interpreter path; so a ``node``
  planted in the workspace never runs, and the argument vector it returns starts with the binary that
  actually runs (``/usr/bin/node``, not ``codex.js``), which is what the approver is shown;
* env is not started at all: the argument vector names the resolved interpreter directly, followed by
  its arguments and the script's real path, exactly as ``env`` would have passed them;
* every file of the chain is identified by device, inode, size, modification time and (on request)
  the SHA-256 of its content; :func:`pinned` reopens them immediately before the start, refuses with
  ``adapter_unavailable`` if any differs from what was approved, and hands back a ``/proc/self/fd/N``
  path of the still-open binary, so the binary executed is the very inode that was checked even if its
  path is re-pointed afterwards (the descriptor is close-on-exec: the program never inherits it).
  Scripts are read by their interpreter by path after the start, so for them the check is immediately
  before the start, not at the instant the interpreter opens them; modules a script loads in turn are
  not covered at all;
* nothing is executed to find any of this: files are only opened (regular files only, without blocking)
  and read.

:func:`parse_shebang` and :func:`env_command` are pure.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from dataclasses import dataclass
from typing import Any
from collections.abc import Iterator, Mapping, Sequence

from peon.core.environment import split_search_path
from peon.core.errors import ErrorCode, ToolError
from peon.core.statefile import RefusedFile, kind_of

BINPRM_BUF_SIZE = 256  # how much of a file the kernel reads to find its "#!" line
MAX_INTERPRETER_DEPTH = 4  # the kernel's limit on nested interpreters
_SHELL_SPECIALS = set("\"'\\$`")
_hash_cache: dict[tuple[int, int, int, int, int], str] = {}


class LaunchRefused(Exception):
    """The program cannot be started the contained way; the message says why."""


# -- pure ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shebang:
    interpreter: str  # as written
    argument: str | None  # the kernel passes everything after the interpreter as ONE argument
    line: str


def parse_shebang(head: bytes) -> Shebang | None:
    """The ``#!`` line at the start of ``head`` (the first :data:`BINPRM_BUF_SIZE` bytes of a file), or
    ``None`` when the file is not a script. Raises :class:`LaunchRefused` for a line the kernel would
    cut short."""
    if not head.startswith(b"#!"):
        return None
    end = head.find(b"\n")
    if end < 0:
        if len(head) >= BINPRM_BUF_SIZE:
            raise LaunchRefused(f"its '#!' line is longer than the {BINPRM_BUF_SIZE} bytes the kernel reads")
        end = len(head)
    line = head[:end].decode("utf-8", "surrogateescape")
    rest = line[2:].strip(" \t")
    if not rest:
        raise LaunchRefused("its '#!' line names no interpreter")
    interpreter, _, argument = rest.replace("\t", " ").partition(" ")
    argument = argument.strip(" \t")
    return Shebang(interpreter, argument or None, line)


def env_command(argument: str | None) -> tuple[str, tuple[str, ...]]:
    """(program, its arguments) that ``#!/usr/bin/env <argument>`` would run, for the forms Peon
    follows: a bare program name, or ``-S`` followed by a program and plain words."""
    if argument is None:
        raise LaunchRefused("'#!/usr/bin/env' names no program")
    if argument.startswith("-S"):
        words = argument[2:].split()
        if not words:
            raise LaunchRefused("'#!/usr/bin/env -S' names no program")
        if any(_SHELL_SPECIALS & set(word) for word in words):
            raise LaunchRefused(f"'#!/usr/bin/env {argument}' uses quoting or variables, which Peon does not interpret")
    elif any(c.isspace() for c in argument):
        raise LaunchRefused(f"'#!/usr/bin/env {argument}': env would look for a program of that whole name")
    else:
        words = [argument]
    program, *rest = words
    if program.startswith("-") or "=" in program:
        raise LaunchRefused(f"'#!/usr/bin/env {argument}' sets options or variables before the program, "
                            "which Peon does not follow")
    return program, tuple(rest)


# -- files -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileIdentity:
    path: str  # the real path, no symbolic link left in it
    device: int
    inode: int
    size: int
    mtime_ns: int
    sha256: str | None = None

    def same_file(self, other: FileIdentity) -> bool:
        return (self.path, self.device, self.inode, self.size, self.mtime_ns) == (
            other.path, other.device, other.inode, other.size, other.mtime_ns)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "device": self.device, "inode": self.inode, "size": self.size,
                "mtime_ns": self.mtime_ns, "sha256": self.sha256}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FileIdentity:
        return cls(str(data["path"]), int(data["device"]), int(data["inode"]), int(data["size"]),
                   int(data["mtime_ns"]), data.get("sha256"))


def _open_regular(path: str) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular, executable file at ``path`` (links already resolved)."""
    pinned = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(pinned)
        if not stat.S_ISREG(info.st_mode):
            raise RefusedFile(path, f"is {kind_of(info.st_mode)}, not a regular file")
        fd = os.open(f"/proc/self/fd/{pinned}", os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    finally:
        os.close(pinned)
    return fd, info


def _digest(fd: int, info: os.stat_result) -> str:
    key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    cached = _hash_cache.get(key)
    if cached is None:
        with os.fdopen(os.dup(fd), "rb") as f:
            cached = hashlib.file_digest(f, "sha256").hexdigest()
        if len(_hash_cache) > 64:
            _hash_cache.clear()
        _hash_cache[key] = cached
    return cached


def _identify(path: str, with_hash: bool) -> tuple[FileIdentity, bytes]:
    real = os.path.realpath(path)
    try:
        fd, info = _open_regular(real)
    except (OSError, RefusedFile) as exc:
        raise LaunchRefused(f"{real} cannot be opened: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        if not info.st_mode & 0o111:
            raise LaunchRefused(f"{real} is not executable")
        head = os.pread(fd, BINPRM_BUF_SIZE, 0)
        digest = _digest(fd, info) if with_hash else None
    finally:
        os.close(fd)
    return FileIdentity(real, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, digest), head


def find_in_path(name: str, search_path: str) -> str | None:
    """The first ``name`` in the absolute entries of ``search_path`` that is an executable regular file."""
    for directory in split_search_path(search_path)[0]:
        candidate = os.path.normpath(os.path.join(directory, name))
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


# -- programs ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Program:
    """How ``executable`` runs: ``argv_prefix`` comes before the adapter's fixed arguments."""

    executable: str  # the absolute path that was asked for (as found on PATH)
    argv_prefix: tuple[str, ...]  # [binary as named, *interpreter arguments, script paths...]
    binary: FileIdentity  # started by descriptor
    scripts: tuple[FileIdentity, ...]  # outermost interpreter's script first, the executable's last
    shebangs: tuple[str, ...]  # the "#!" lines followed, the executable's first

    @property
    def interpreter(self) -> str | None:
        return self.argv_prefix[0] if self.scripts else None

    def files(self) -> tuple[FileIdentity, ...]:
        return (self.binary, *self.scripts)

    def pins(self) -> dict[str, Any]:
        return {"binary": self.binary.to_dict(), "scripts": [s.to_dict() for s in self.scripts]}


def resolve_program(executable: str, search_path: str, *, with_hash: bool = True) -> Program:
    """Follow ``executable``'s ``#!`` chain; raises :class:`LaunchRefused` naming what is wrong."""
    return _resolve(executable, search_path, with_hash, depth=0)


def _resolve(path: str, search_path: str, with_hash: bool, depth: int) -> Program:
    identity, head = _identify(path, with_hash)
    shebang = parse_shebang(head)
    if shebang is None:
        return Program(path, (path,), identity, (), ())
    if depth >= MAX_INTERPRETER_DEPTH:
        raise LaunchRefused(f"{identity.path} is interpreted by more than {MAX_INTERPRETER_DEPTH} nested scripts")
    interpreter = shebang.interpreter
    extra: tuple[str, ...] = (shebang.argument,) if shebang.argument else ()
    if not os.path.isabs(interpreter):
        raise LaunchRefused(f"{identity.path} names a relative interpreter {interpreter!r} ('{shebang.line}'), "
                            "which would be looked up from the workspace")
    if os.path.basename(interpreter) == "env":
        name, extra = env_command(shebang.argument)
        if "/" in name:
            if not os.path.isabs(name):
                raise LaunchRefused(f"'{shebang.line}' in {identity.path} names a relative program {name!r}")
            interpreter = name
        else:
            found = find_in_path(name, search_path)
            if found is None:
                ignored = split_search_path(search_path)[1]
                note = f" (relative entries are not searched: {ignored})" if ignored else ""
                raise LaunchRefused(f"{identity.path} runs {name!r} ('{shebang.line}'), and there is no executable "
                                    f"{name!r} in the absolute entries of PATH {search_path!r}{note}")
            interpreter = found
    inner = _resolve(interpreter, search_path, with_hash, depth + 1)
    return Program(path, (*inner.argv_prefix, *extra, identity.path), inner.binary, (*inner.scripts, identity),
                   (shebang.line, *inner.shebangs))


@contextlib.contextmanager
def pinned(program: Program, approved: Mapping[str, Any] | None) -> Iterator[str]:
    """Reopen the program's files, insist they are the approved ones (``approved`` is
    :meth:`Program.pins` of the approved program, or ``None`` to insist on ``program`` itself), and
    yield the path to execute: ``/proc/self/fd/N`` of the open binary."""
    expected_binary = FileIdentity.from_dict(approved["binary"]) if approved else program.binary
    expected_scripts = [FileIdentity.from_dict(s) for s in approved["scripts"]] if approved else list(program.scripts)
    fd = _check(expected_binary, keep_open=True)
    try:
        for script in expected_scripts:
            _check(script, keep_open=False)
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def _check(expected: FileIdentity, keep_open: bool) -> int:
    try:
        fd, info = _open_regular(expected.path)
    except (OSError, RefusedFile) as exc:
        raise _changed(expected.path, f"it cannot be opened ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        now = FileIdentity(expected.path, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        if not now.same_file(expected):
            raise _changed(expected.path, "it is no longer the same file (device, inode, size or modification time)")
        if expected.sha256 is not None and _digest(fd, info) != expected.sha256:
            raise _changed(expected.path, "its content is not the approved content (SHA-256)")
    except BaseException:
        os.close(fd)
        raise
    if not keep_open:
        os.close(fd)
    return fd


def _changed(path: str, why: str) -> ToolError:
    return ToolError(ErrorCode.ADAPTER_UNAVAILABLE, f"{path} changed since it was approved: {why}; nothing was started",
                     {"rule": "pinned", "file": path})


def argv_for(program: Program, fixed_args: Sequence[str], prompt: str) -> tuple[str, ...]:
    return (*program.argv_prefix, *fixed_args, prompt)
