"""The secret-like path heuristic: which workspace paths look like they hold credentials.

Promises:

* :func:`parse_secret_patterns` turns the text of a ``secret_paths.txt`` file into patterns or raises
  :class:`~peon.core.errors.ConfigError` naming the file and line; :func:`classify_secret` says which
  pattern, if any, makes a path secret-like. Both are pure. Matching is case-insensitive, per
  component, and backup copies (``.bak``, ``.old``, ``~``) match what their base name matches.
* :func:`secret_patterns` is the one place the lists are loaded: the shipped
  ``config/secret_paths.txt``, then the user's ``<user peon dir>/secret_paths.txt`` (re-read when it
  changes; opened only when it is a regular file of at most 1 MiB, so a FIFO there never blocks;
  unreadable, not regular or invalid is a ``config_invalid`` error naming the file, never ignored).
  ``read`` and ``write`` both rate paths with :func:`secret_match`.

This heuristic gives visibility (such reads need approval); it is not a confidentiality boundary.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase, translate
from functools import cache
from importlib import resources
from pathlib import Path

from peon.core.errors import ConfigError
from peon.core.statefile import RefusedFile, read_regular_file
from peon.core.userdir import user_peon_dir

BACKUP_SUFFIXES = (".bak", ".old", "~")
SECRET_PATTERNS_FILE = "secret_paths.txt"
MAX_SECRET_PATTERNS_BYTES = 1 << 20

# -- patterns and matching (pure) ---------------------------------------------------------------------


@dataclass(frozen=True)
class SecretPattern:
    text: str  # the line as written
    source: str  # "file:line"
    globs: tuple[str, ...]  # lower-cased, one per component
    directory: bool  # trailing '/': the last component must be a directory on the way
    exception: bool  # '!' line


@dataclass(frozen=True)
class SecretMatch:
    pattern: SecretPattern
    component: str  # the path component (as given) that matched, or the run of components

    def reason(self) -> str:
        return (f"secret-like path: {self.component!r} matches {self.pattern.text!r} "
                f"({self.pattern.source})")


def parse_secret_patterns(text: str, source: str) -> tuple[SecretPattern, ...]:
    patterns = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}:{number}"
        exception = line.startswith("!")
        body = line[1:] if exception else line
        directory = body.endswith("/")
        body = body.rstrip("/") if directory else body
        if body.startswith("/"):
            raise ConfigError(f"{where}: pattern {line!r} is absolute; patterns match path components, "
                              "anywhere in a workspace-relative path", {"file": source, "line": number})
        globs = tuple(body.lower().split("/"))
        if any(g in ("", ".", "..") for g in globs):
            raise ConfigError(f"{where}: pattern {line!r} has an empty, '.' or '..' component",
                              {"file": source, "line": number})
        if exception and len(globs) > 1:
            raise ConfigError(f"{where}: exception {line!r} must be a single component (no '/' inside)",
                              {"file": source, "line": number})
        patterns.append(SecretPattern(line, where, globs, directory, exception))
    return tuple(patterns)


def backup_variants(component: str) -> list[str]:
    """The component and its names with backup suffixes removed, lower-cased."""
    name = component.lower()
    variants = [name]
    while True:
        for suffix in BACKUP_SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)]
                variants.append(name)
                break
        else:
            return variants


def _decide(variant: str, final: bool, singles: Sequence[SecretPattern]) -> SecretPattern | None:
    """Last matching single-component line decides (gitignore order)."""
    decided = None
    for pattern in singles:
        if pattern.directory and final:
            continue
        if fnmatchcase(variant, pattern.globs[0]):
            decided = pattern
    return None if decided is None or decided.exception else decided


def _run_matches(variants: Sequence[list[str]], start: int, pattern: SecretPattern) -> bool:
    end = start + len(pattern.globs)
    if end > len(variants) or (pattern.directory and end >= len(variants)):
        return False
    return all(any(fnmatchcase(v, g) for v in variants[start + i]) for i, g in enumerate(pattern.globs))


@dataclass(frozen=True)
class _Prepared:
    singles: tuple[SecretPattern, ...]
    runs: tuple[SecretPattern, ...]
    any_single: re.Pattern[str]  # matches a component that at least one single-component glob matches
    any_run_start: re.Pattern[str]  # matches a component that the first glob of at least one run matches


_last_prepared: tuple[tuple[SecretPattern, ...], _Prepared] | None = None


def _prepared(patterns: tuple[SecretPattern, ...]) -> _Prepared:
    """The patterns split by kind, with one compiled regex of every single-component glob: most components
    match none, and one regex in C says so at once (the line-by-line ``fnmatch`` took ~190 µs a path)."""
    global _last_prepared
    last = _last_prepared
    if last is not None and last[0] is patterns:
        return last[1]
    singles = tuple(p for p in patterns if len(p.globs) == 1)
    runs = tuple(p for p in patterns if len(p.globs) > 1)
    any_single = re.compile("|".join(translate(p.globs[0]) for p in singles) or "(?!)")
    any_run_start = re.compile("|".join(translate(p.globs[0]) for p in runs) or "(?!)")
    prepared = _Prepared(singles, runs, any_single, any_run_start)
    _last_prepared = (patterns, prepared)
    return prepared


def classify_secret(parts: Sequence[str], patterns: Iterable[SecretPattern]) -> SecretMatch | None:
    """The first (outermost) component or run of components that makes ``parts`` secret-like."""
    prepared = _prepared(patterns if isinstance(patterns, tuple) else tuple(patterns))
    singles, runs = prepared.singles, prepared.runs
    variants = [backup_variants(c) for c in parts]
    last = len(parts) - 1
    for index, component in enumerate(parts):
        for variant in variants[index]:
            if not prepared.any_single.match(variant):
                continue  # no single-component line matches it: none can decide it
            found = _decide(variant, index == last, singles)
            if found is not None:
                return SecretMatch(found, component)
        if not any(prepared.any_run_start.match(v) for v in variants[index]):
            continue  # no run of components starts here
        for pattern in runs:
            if _run_matches(variants, index, pattern):
                return SecretMatch(pattern, "/".join(parts[index: index + len(pattern.globs)]))
    return None


# -- the lists: the shipped file, then the user's (I/O) ---------------------------------------------------


@cache
def shipped_secret_patterns() -> tuple[SecretPattern, ...]:
    text = resources.files("peon._config").joinpath(SECRET_PATTERNS_FILE).read_text(encoding="utf-8")
    return parse_secret_patterns(text, f"config/{SECRET_PATTERNS_FILE}")


def user_secret_patterns_file(env: Mapping[str, str]) -> Path | None:
    directory = user_peon_dir(env)
    return directory / SECRET_PATTERNS_FILE if directory else None


_user_cache: dict[str, tuple[tuple[int, int, int], tuple[SecretPattern, ...]]] = {}


def secret_patterns(env: Mapping[str, str]) -> tuple[SecretPattern, ...]:
    """The shipped patterns followed by the user's (re-read when that file changes)."""
    path = user_secret_patterns_file(env)
    if path is None:
        return shipped_secret_patterns()
    try:
        st = path.stat()
    except FileNotFoundError:
        return shipped_secret_patterns()
    except OSError as exc:
        raise ConfigError(f"secret path list {path} cannot be read: {exc.strerror}", {"file": str(path)}) from None
    key = (st.st_mtime_ns, st.st_size, st.st_ino)
    cached = _user_cache.get(str(path))
    if cached is None or cached[0] != key:
        try:  # never opened unless a regular file: a FIFO here must not block the supervisor
            text = read_regular_file(path, max_bytes=MAX_SECRET_PATTERNS_BYTES, follow_symlinks=True).decode("utf-8")
        except RefusedFile as exc:
            raise ConfigError(f"secret path list {exc}", {"file": str(path)}) from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"secret path list {path} is not UTF-8 (byte offset {exc.start})",
                              {"file": str(path)}) from None
        except OSError as exc:
            raise ConfigError(f"secret path list {path} cannot be read: {exc.strerror}", {"file": str(path)}) from None
        cached = (key, shipped_secret_patterns() + parse_secret_patterns(text, str(path)))
        _user_cache[str(path)] = cached
    return cached[1]  # the same tuple while the file is unchanged (classify_secret prepares it once)


def secret_match(parts: Sequence[str], env: Mapping[str, str]) -> SecretMatch | None:
    """What makes the path with normalized components ``parts`` secret-like, with the session's lists."""
    return classify_secret(parts, secret_patterns(env))
