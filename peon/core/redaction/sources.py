"""Where a session's own secrets come from: its environment's secret-like variables and the values
assigned in the workspace's environment files.

Promise: :func:`environment_secrets` takes, from an environment, the value of every variable whose
name is secret-like (:func:`peon.core.redaction.rules.secret_like_name`) and long enough to be one,
each of kind ``env:NAME``. :func:`workspace_secrets` reads the workspace's top-level environment files
(``.env``, ``.env.*`` but the committed templates, ``.envrc``: regular files of at most
:data:`MAX_FILE_BYTES`, opened without following a symlink and without blocking) and takes each value
assigned to a secret-like name, or long and varied enough to be a credential whatever its name, of
kind ``file:NAME``. What a file holds is cached by its identity, size and modification time, and
the list of files by the directory's, so a call that finds them unchanged reads nothing (a few
``stat`` calls); a time stamp is trusted only once it is older than the file system's clock could
give twice (:func:`settle_margin`: a second change within the same tick would not move it).
:func:`session_redactor` puts them together; nothing
here raises for a file it cannot read (it is skipped).
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from peon.core.redaction.redactor import Redactor
from peon.core.redaction.rules import long_enough, secret_like_name, variable_kind

MAX_FILE_BYTES = 256 << 10
MAX_FILES = 32
_TEMPLATES = ("example", "sample", "template", "dist", "defaults")
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.\-]*)\s*[=:]\s*(.*?)\s*$")
MIN_ANONYMOUS_LENGTH = 20  # a value under any name is taken for a credential when it is this long and varied


def environment_secrets(env: Mapping[str, str]) -> dict[bytes, str]:
    return {value.encode("utf-8", "surrogateescape"): variable_kind(name)
            for name, value in env.items() if secret_like_name(name) and long_enough(value)}


def is_environment_file(name: str) -> bool:
    lowered = name.lower()
    if lowered in (".env", ".envrc"):
        return True
    return lowered.startswith(".env.") and not any(word in lowered for word in _TEMPLATES)


def _looks_random(value: str) -> bool:
    classes = sum((any(c.islower() for c in value), any(c.isupper() for c in value), any(c.isdigit() for c in value)))
    return len(value) >= MIN_ANONYMOUS_LENGTH and classes >= 2 and not value.startswith(("/", "http://", "https://"))


def assigned_secrets(text: str) -> dict[bytes, str]:
    """The secret values assigned in the text of an environment file."""
    found: dict[bytes, str] = {}
    for line in text.splitlines():
        match = _ASSIGNMENT.match(line)
        if match is None:
            continue
        name, value = match.group(1), match.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        if long_enough(value) and (secret_like_name(name) or _looks_random(value)):
            found[value.encode("utf-8", "surrogateescape")] = "file:" + variable_kind(name)[4:]
    return found


@lru_cache(maxsize=64)
def _file_secrets(path: str, identity: tuple[int, int, int, int]) -> tuple[tuple[bytes, str], ...]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ()
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
            return ()
        data = os.read(fd, MAX_FILE_BYTES + 1)
    except OSError:
        return ()
    finally:
        os.close(fd)
    return tuple(assigned_secrets(data.decode("utf-8", "surrogateescape")).items())


SETTLED_NS = 2_000_000_000  # a stamp of a whole millisecond or coarser (FAT's 2 s, ext3's 1 s, exFAT's 10 ms)
FINE_SETTLED_NS = 20_000_000  # a finer stamp is the kernel's clock tick (10 ms at the slowest, HZ=100), or finer


def settle_margin(mtime_ns: int) -> int:
    """How much later than a time stamp ``mtime_ns`` a look at the file must be for a later change to be
    sure to move it: two of the clock ticks that made it. A stamp with a part below the millisecond
    comes from the kernel's clock (its tick at most 10 ms; since Linux 6.13 finer still, once read); a
    stamp that is a whole millisecond is taken to be of a coarse file system, and given 2 s."""
    return SETTLED_NS if mtime_ns % 1_000_000 == 0 else FINE_SETTLED_NS


def _settled(mtime_ns: int, at_ns: int | None = None) -> bool:
    return (time.time_ns() if at_ns is None else at_ns) - mtime_ns > settle_margin(mtime_ns)


# Per workspace: the directory's identity, when it was listed (time.time_ns) and the paths found.
_LISTINGS: dict[str, tuple[tuple[int, int, int], int, tuple[str, ...]]] = {}


def _environment_files(workspace: Path) -> tuple[str, ...]:
    """The paths of ``workspace``'s top-level environment files; listed again only when the directory
    changed (its modification time moves when an entry is added, removed or renamed). A listing is
    trusted only if it was taken :func:`settle_margin` after that time: one taken sooner may have missed
    a change within the same clock tick, which would not have moved it."""
    key = str(workspace)
    try:
        info = os.stat(workspace)
    except OSError:
        return ()
    identity = (info.st_dev, info.st_ino, info.st_mtime_ns)
    held = _LISTINGS.get(key)
    if held is not None and held[0] == identity and _settled(info.st_mtime_ns, held[1]):
        return held[2]
    listed_at = time.time_ns()
    try:
        names = os.listdir(workspace)  # names only: cheaper than scandir's entries, and all this needs
    except OSError:
        return ()
    paths = tuple(os.path.join(key, name) for name in names
                  if name[:1] == "." and is_environment_file(name))[:MAX_FILES]
    if len(_LISTINGS) >= 8:
        _LISTINGS.clear()
    _LISTINGS[key] = (identity, listed_at, paths)
    return paths


def _file_states(workspace: Path) -> tuple[tuple[str, tuple[int, int, int, int]], ...] | None:
    """Each of ``workspace``'s environment files that is a regular file, with its identity, size and
    modification time; None when one of them changed too recently to be told from its next change."""
    states = []
    for path in _environment_files(workspace):
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            if not _settled(info.st_mtime_ns):
                return None
            states.append((path, (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)))
    return tuple(states)


def workspace_secrets(workspace: Path) -> dict[bytes, str]:
    """The secrets assigned in ``workspace``'s top-level environment files, as they are now."""
    found: dict[bytes, str] = {}
    states = _file_states(workspace)
    if states is None:  # read them all again
        for path in _environment_files(workspace):
            found.update(_file_secrets.__wrapped__(path, (0, 0, 0, 0)))
        return found
    for path, identity in states:
        found.update(_file_secrets(path, identity))
    return found


# Keyed by the identity of the objects they were built from, each held beside what was built (and
# checked with ``is``), so an identity a freed object's successor reuses is never taken for it.
_REDACTORS: dict[tuple[object, ...], tuple[Mapping[str, str], Mapping[str, tuple[str, ...]], Redactor]] = {}
_ENVIRONMENTS: dict[tuple[str, int], tuple[Mapping[str, str], dict[bytes, str]]] = {}


def session_redactor(env: Mapping[str, str], workspace: Path | None, key: str,
                     allow: Mapping[str, tuple[str, ...]] = {}) -> Redactor:
    """The redactor of a session with environment ``env`` and ``workspace`` (its files as they are now),
    hashes keyed by ``key``; the same object while none of them changed (a few ``stat`` calls to know).
    The environment's secrets are taken once per session and environment object."""
    states = _file_states(workspace) if workspace is not None else ()
    cache_key = (key, id(env), id(allow), states)
    held = _REDACTORS.get(cache_key) if states is not None else None
    if held is not None and held[0] is env and held[1] is allow:
        return held[2]
    env_key = (key, id(env))
    known = _ENVIRONMENTS.get(env_key)
    if known is None or known[0] is not env:
        if len(_ENVIRONMENTS) >= 8:
            _ENVIRONMENTS.clear()
        known = _ENVIRONMENTS[env_key] = (env, environment_secrets(env))
    literals = known[1]
    if workspace is not None:
        files = workspace_secrets(workspace)
        if files:
            literals = {**files, **literals}
    redactor = Redactor(literals, key=key.encode(), allow=allow)
    if states is not None:
        if len(_REDACTORS) >= 8:
            _REDACTORS.clear()
        _REDACTORS[cache_key] = (env, allow, redactor)
    return redactor
