"""What ``grep`` and ``glob`` ask ripgrep and how they read its answer (pure: no processes, no files).

Promises:

* :func:`rg_base_argv` is the one set of options every ripgrep run starts with: no configuration file,
  no messages on stderr, hidden files included but ``.git`` never listed, symlinks never followed
  (ripgrep's default), ``.gitignore`` / ``.ignore`` / ``.rgignore`` respected with or without a git
  repository (``--no-ignore`` only when asked), binary files skipped.
* The readers (:class:`PathReader`, :class:`CountReader`, :class:`JsonLineReader`) take ripgrep's
  output in arbitrary chunks and turn it into entries; a record longer than :data:`MAX_RECORD_BYTES`
  is dropped and counted, never held whole, so memory is bounded whatever ripgrep prints. Paths are
  made workspace-relative (``prefix`` joined, ``./`` removed). Names are decided as bytes: a reader's
  ``accept`` test gets the exact path (:func:`exact_name`: each byte that is not UTF-8 one character,
  U+DC80..U+DCFF, which encodes back to that byte), the entry shows it with those bytes escaped
  (``\\xNN``, :func:`shown_name`) and flagged. :func:`literal_glob` is a ripgrep glob that names one
  exact path, byte for byte (a byte that is not UTF-8, which ripgrep cannot take in a glob, as ``?``:
  one byte to ripgrep).
* :class:`Page` keeps only the entries of one page (``offset``, ``limit``) in arrival order, counts
  every entry offered, and says when it has seen one entry past the page (``full``): the caller may
  then stop ripgrep, and ``next_offset`` is set. Lines of text are cut at :data:`MAX_LINE_CHARS`.
* :class:`SecretPrefilter` says quickly whether a path may be secret-like (a superset of what the
  secret-like path patterns match); the exact decision is :func:`peon.approval.secret_paths.secret_match`'s.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

MAX_RECORD_BYTES = 1 << 20  # one path or one JSON event of ripgrep's
MAX_LINE_CHARS = 500  # of a matching or context line returned
MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
TYPE_NAME = "peonglob"  # the file type a basename glob is added to ripgrep as


def rg_base_argv(rg: str, *, respect_ignore: bool = True) -> list[str]:
    argv = [rg, "--no-config", "--no-messages", "--hidden", "--glob", "!.git", "--no-require-git"]
    if not respect_ignore:
        argv.append("--no-ignore")
    return argv


def exact_name(raw: bytes) -> str:
    """A name as ripgrep printed it, every byte kept: one that is not UTF-8 becomes one lone surrogate."""
    return raw.decode("utf-8", "surrogateescape")


def shown_name(exact: str) -> tuple[str, bool]:
    """An exact name (or any text holding one) as shown: bytes that are not UTF-8 escaped (``\\xNN``), and
    whether there were any."""
    try:
        exact.encode("utf-8")
        return exact, False
    except UnicodeEncodeError:
        return exact.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"), True


def show_name(raw: bytes) -> tuple[str, bool]:
    """(the name as text, whether it was not UTF-8 and had bytes escaped)."""
    return shown_name(exact_name(raw))


_GLOB_SPECIAL = frozenset("*?[]{}\\!")


def literal_glob(exact: str) -> str:
    """A ripgrep glob that matches the exact path ``exact`` (relative, ``/``-separated) and, where it holds
    bytes that are not UTF-8, only paths that differ from it in those bytes."""
    out = []
    for char in exact:
        if "\udc80" <= char <= "\udcff":
            out.append("?")
        elif char in _GLOB_SPECIAL:
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def workspace_path(prefix: str, shown: str) -> str:
    """A path ripgrep printed relative to the directory it searched, made workspace-relative."""
    while shown.startswith("./"):
        shown = shown[2:]
    if not prefix or prefix == ".":
        return shown
    return f"{prefix}/{shown}" if shown and shown != "." else prefix


def cut_line(text: str) -> tuple[str, bool]:
    """The line without its line break, cut at :data:`MAX_LINE_CHARS` (and whether it was)."""
    text = text.rstrip("\r\n")
    if len(text) <= MAX_LINE_CHARS:
        return text, False
    return text[:MAX_LINE_CHARS], True


@dataclass
class Page:
    """One page of entries, from ``offset``, at most ``limit``; see the module's promises."""

    offset: int
    limit: int
    entries: list[dict[str, Any]] = field(default_factory=list)
    seen: int = 0

    def offer(self, entry: dict[str, Any]) -> None:
        if self.offset <= self.seen < self.offset + self.limit:
            self.entries.append(entry)
        self.seen += 1

    @property
    def full(self) -> bool:
        """An entry past this page exists: there is a next page."""
        return self.seen > self.offset + self.limit

    @property
    def next_offset(self) -> int | None:
        return self.offset + self.limit if self.full else None


class _Records:
    """Split a byte stream into records at ``separator``, bounded (see the module's promises)."""

    def __init__(self, separator: bytes, on_record: Callable[[bytes], None]) -> None:
        self.separator = separator
        self.on_record = on_record
        self.pending = bytearray()
        self.dropping = False  # inside a record that went over the bound
        self.dropped = 0

    def feed(self, data: bytes | memoryview) -> None:
        pieces = bytes(data).split(self.separator)  # one pass in C; the last piece is incomplete
        for index, piece in enumerate(pieces[:-1]):
            if index == 0 and (self.dropping or self.pending):
                if self.dropping or len(self.pending) + len(piece) > MAX_RECORD_BYTES:
                    self.dropped += not self.dropping
                    self.dropping = False
                    self.pending.clear()
                    continue
                self.pending += piece
                piece = bytes(self.pending)
                self.pending.clear()
            elif len(piece) > MAX_RECORD_BYTES:
                self.dropped += 1
                continue
            self.on_record(piece)
        rest = pieces[-1]
        if len(pieces) > 1:
            self.dropping = False
        if self.dropping:
            return
        if len(self.pending) + len(rest) > MAX_RECORD_BYTES:
            self.pending.clear()
            self.dropping = True
            self.dropped += 1
        else:
            self.pending += rest

    def finish(self) -> bytes:
        """What followed the last separator: ripgrep ends every record with one, so this is its error text."""
        rest = b"" if self.dropping else bytes(self.pending)
        self.pending.clear()
        return rest


class _RecordReader:
    """A reader of ripgrep's records: whatever follows the last separator at the end is ripgrep's error text."""

    records: _Records
    errors: list[str]

    def finish(self) -> None:
        rest = self.records.finish()
        if rest.strip():
            self.errors.append(show_name(rest[:1000])[0])


class PathReader(_RecordReader):
    """``rg --files --null`` / ``--files-with-matches --null``: one path per NUL-terminated record, given to
    ``on_path`` as shown (or, with ``exact``, as the exact name)."""

    def __init__(self, prefix: str, accept: Callable[[str], bool], on_path: Callable[[str, bool], None],
                 *, exact: bool = False) -> None:
        self.prefix, self.accept, self.on_path, self.exact = prefix, accept, on_path, exact
        self.records = _Records(b"\0", self._record)
        self.errors = []

    def _record(self, raw: bytes) -> None:
        if not raw:
            return
        path = workspace_path(self.prefix, exact_name(raw))
        if self.accept(path):
            if self.exact:
                self.on_path(path, False)
            else:
                self.on_path(*shown_name(path))


class CountReader(_RecordReader):
    """``rg --count --null``: ``path NUL count NEWLINE`` per file."""

    def __init__(self, prefix: str, accept: Callable[[str], bool], on_count: Callable[[str, int], None]) -> None:
        self.prefix, self.accept, self.on_count = prefix, accept, on_count
        self.records = _Records(b"\n", self._record)
        self.errors = []

    def _record(self, raw: bytes) -> None:
        name, sep, count = raw.rpartition(b"\0")
        if not sep or not count.isdigit():
            self.errors.append(show_name(raw[:300])[0])
            return
        path = workspace_path(self.prefix, exact_name(name))
        if self.accept(path):
            self.on_count(shown_name(path)[0], int(count))


def _text(value: Any, *, exact: bool = False) -> tuple[str, bool]:
    """A JSON "arbitrary data" object of ripgrep's ({"text"} or {"bytes": base64}) as text: shown, or with
    ``exact`` every byte kept (:func:`exact_name`)."""
    if not isinstance(value, dict):
        return "", False
    if isinstance(value.get("text"), str):
        return value["text"], False
    import base64

    try:
        raw = base64.b64decode(value.get("bytes", ""), validate=False)
    except ValueError:
        return "", True
    return (exact_name(raw) if exact else show_name(raw)[0]), True


class JsonLineReader:
    """``rg --json``: ``match`` and ``context`` events become ``{"path", "line", "kind", "text"}`` entries."""

    def __init__(self, prefix: str, accept: Callable[[str], bool], on_line: Callable[[dict[str, Any]], None]) -> None:
        self.prefix, self.accept, self.on_line = prefix, accept, on_line
        self.records = _Records(b"\n", self._record)
        self.errors: list[str] = []
        self.cut_lines = 0

    def finish(self) -> None:
        rest = self.records.finish()
        if rest.strip():
            self._record(rest)

    def _record(self, raw: bytes) -> None:
        try:
            event = json.loads(raw)
        except ValueError:
            self.errors.append(show_name(raw[:300])[0])  # not an event: ripgrep's error text
            return
        kind = event.get("type") if isinstance(event, dict) else None
        if kind not in ("match", "context"):
            return
        data = event.get("data") or {}
        name, _ = _text(data.get("path"), exact=True)
        path = workspace_path(self.prefix, name)
        if not self.accept(path):
            return
        text, not_utf8 = _text(data.get("lines"))
        line, cut = cut_line(text)
        self.cut_lines += cut
        entry: dict[str, Any] = {"path": shown_name(path)[0], "line": data.get("line_number"), "kind": kind,
                                 "text": line}
        if cut:
            entry["text_truncated"] = True
        if not_utf8:
            entry["not_utf8"] = True
        self.on_line(entry)


# -- secret-like paths: a fast superset test ---------------------------------------------------------------

_WILDCARDS = re.compile(r"[*?\[]")
_BACKUP = re.compile(r"(?:\.bak|\.old|~)+\Z")


class SecretPrefilter:
    """Whether a path may be secret-like: true for every path :func:`peon.approval.secret_paths.secret_match` matches
    (each of its components is tested against every component glob of the non-exception patterns, with
    and without backup suffixes), false for almost all others; decided by set lookups and ``endswith`` /
    ``startswith`` for the usual globs (``name``, ``*.ext``, ``prefix*``) and one regex for the rest, with
    each component's answer cached (directory names repeat). The exact decision stays
    :func:`~peon.approval.secret_paths.secret_match`'s: this only spares it the paths that cannot match."""

    def __init__(self, patterns: Iterable[Any]) -> None:
        exact, suffixes, prefixes, others = set(), [], [], []
        for glob in {g for p in patterns if not p.exception for g in p.globs}:
            if not _WILDCARDS.search(glob):
                exact.add(glob)
            elif glob.startswith("*") and not _WILDCARDS.search(glob[1:]):
                suffixes.append(glob[1:])
            elif glob.endswith("*") and not _WILDCARDS.search(glob[:-1]):
                prefixes.append(glob[:-1])
            else:
                others.append(fnmatch.translate(glob))
        self.exact, self.suffixes, self.prefixes = exact, tuple(suffixes), tuple(prefixes)
        self.others = re.compile("|".join(others), re.DOTALL) if others else None
        self.cache: dict[str, bool] = {}

    def _component(self, name: str) -> bool:
        for candidate in {name, _BACKUP.sub("", name)}:
            if (candidate in self.exact or candidate.endswith(self.suffixes) or candidate.startswith(self.prefixes)
                    or (self.others is not None and self.others.match(candidate))):
                return True
        return False

    def __call__(self, path: str) -> bool:
        cache = self.cache
        for name in path.lower().split("/"):
            hit = cache.get(name)
            if hit is None:
                if len(cache) > 100_000:
                    cache.clear()
                hit = cache[name] = self._component(name)
            if hit:
                return True
        return False


def rg_error(errors: list[str], fallback: str) -> str:
    """ripgrep's own sentence about a failed run (its first lines), for a message."""
    text = "\n".join(e for e in errors if e.strip()).strip() or fallback.strip()
    return text[:1000]


def looks_like_pattern_error(text: str) -> bool:
    return "regex parse error" in text or "error parsing regex" in text or "error parsing glob" in text \
        or "unrecognized file type" in text or "the literal" in text
