"""Finding secrets in bytes and replacing each with ``«redacted:KIND:abcd»``.

Promise: :meth:`Redactor.redact` returns its input with every secret it knows replaced, and how many
it replaced of each kind (never the values). It knows the session's own secrets (``literals``: exact
values, such as a secret-like variable's, each with its kind) and the well-known formats of
:data:`peon.core.redaction.rules.FORMAT_RULES`. The ``abcd`` is a short hash of the value keyed by the
session (:func:`value_hash`): stable within a session, so two secrets stay distinguishable and the
same one is recognised again, and different in another session, so a hash says nothing across
sessions. A value that an ``allow`` pattern of its kind matches entirely is kept.

Cost: linear in the input. Each literal is looked for with ``bytes.find``, each format's pattern
from its literal start (which the engine finds at ``find`` speed). Matches never overlap: the earliest wins, and of
two starting together the longer.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from peon.core.redaction.rules import FORMAT_PREFIXES, FORMAT_RULES, TOKEN_BYTES, FormatRule
from peon.core.redaction.scan import FormatScanner, default_scanner

MARKER_OPEN = "«redacted:"
_JSON_ESCAPED = frozenset(b'"\\' + bytes(range(32)))
SHORT_BYTES = 256  # below this, one search for every rule's anchor decides whether the rules run at all
MIN_MATCH_BYTES = 5  # the shortest text any rule matches (a one-letter password in a URL)
# Every match of every format rule holds one of these (each rule's literal start, and the URL's ``://``).
_ANCHOR_LIST = (*FORMAT_PREFIXES, b"://", b"earer", b"uthorization:")
_ANCHORS = re.compile(b"|".join(re.escape(anchor) for anchor in _ANCHOR_LIST))
_ANCHOR_TEXT = re.compile(_ANCHORS.pattern.decode())  # the same, for text (its every anchor is ASCII)
HASH_CHARS = 4
_BEGINNING_BYTES = 256  # a session secret's first bytes up to this are looked up at once; a longer one's, one by one

# Values a format's context finds that are examples, not secrets (``postgres://user:password@host``).
_PLACEHOLDER = re.compile(rb"(?i)(?:pass(?:word|wd)?|secret|token|changeme|example|x+|\*+|\.+|[$%{<\[].*)")


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    kind: str


def value_hash(key: bytes, value: bytes) -> str:
    """The short hash that stands for ``value`` in session ``key``."""
    return hmac.new(key, value, hashlib.sha256).hexdigest()[:HASH_CHARS]


def marker(kind: str, key: bytes, value: bytes) -> bytes:
    return f"«redacted:{kind}:{value_hash(key, value)}»".encode()


@dataclass(frozen=True)
class Redaction:
    """Redacted bytes and what was redacted in them."""

    data: bytes
    counts: Counter[str] = field(default_factory=Counter)


class Redactor:
    """Finds and replaces the secrets of one session; immutable once built, shared by every stream."""

    def __init__(self, literals: Mapping[bytes, str] = {}, *, key: bytes = b"",
                 rules: Iterable[FormatRule] = FORMAT_RULES, allow: Mapping[str, Iterable[str]] = {}):
        self.key = key
        self.rules = tuple(rules)
        self.scanner = default_scanner() if self.rules == FORMAT_RULES else FormatScanner(self.rules)
        self.allow = {kind: tuple(re.compile(pattern.encode(), re.DOTALL) for pattern in patterns)
                      for kind, patterns in allow.items()}
        # A session secret its kind's allow patterns keep is kept whatever rule would find it.
        self.kept = frozenset(value for value, kind in literals.items() if self._allowed_value(kind, value))
        # Longest first: a value that contains another is replaced whole.
        self.literals = tuple(sorted(((value, kind) for value, kind in literals.items()
                                      if value and value not in self.kept), key=lambda item: -len(item[0])))
        self._literal_texts = tuple(value.decode("utf-8", "surrogateescape") for value, _ in self.literals)
        # Whether every literal reads the same inside a JSON string (no quote, backslash or control byte
        # that JSON would escape): then one scan of a value's JSON text tells whether it holds a secret.
        self._json_safe = not any(byte in _JSON_ESCAPED for value, _ in self.literals for byte in value)
        # The first bytes of every anchor and session secret (not the whole): a stream ending with one of
        # these may be ending with the start of a secret (:meth:`forming_from`).
        beginnings = {anchor[:k] for anchor in _ANCHOR_LIST for k in range(1, len(anchor))}
        beginnings.update(value[:k] for value, _ in self.literals for k in range(1, min(len(value), _BEGINNING_BYTES)))
        self._beginnings = frozenset(beginnings)
        self._longest_beginning = max(map(len, beginnings), default=0)
        self._long_literals = tuple(value for value, _ in self.literals if len(value) > _BEGINNING_BYTES)

    def spans(self, data: bytes) -> list[Span]:
        """Where the secrets in ``data`` are, in order, none overlapping another."""
        found: list[Span] = []
        if len(data) < MIN_MATCH_BYTES or (self.scanner.engine == "python" and len(data) <= SHORT_BYTES
                                           and not self._may_hold_one(data)):
            return found
        for value, kind in self.literals:
            start = data.find(value)
            while start >= 0:
                found.append(Span(start, start + len(value), kind))
                start = data.find(value, start + len(value))
        for rule, match in self.scanner.matches(data):
            start, end = match.span(rule.group)
            if rule.edge and start > 0 and data[start - 1] in TOKEN_BYTES:
                continue
            if rule.group and _PLACEHOLDER.fullmatch(data, start, end):
                continue
            found.append(Span(start, end, rule.kind_of(data, start) if rule.kinds else rule.kind))
        if self.allow:
            found = [span for span in found if not self._allowed_value(span.kind, data[span.start:span.end])
                     and data[span.start:span.end] not in self.kept]
        if len(found) > 1:
            found.sort(key=lambda span: (span.start, -span.end))
            kept: list[Span] = []
            for span in found:
                if not kept or span.start >= kept[-1].end:
                    kept.append(span)
            found = kept
        return found

    def forming_from(self, tail: bytes) -> int:
        """Where in ``tail`` — the unfinished end of a stream, more to come — a secret may still be forming:
        the byte before the first anchor in it (a format's match may start there and go on; the byte
        before is kept with it, as a format that must not continue a word looks at it), or before the
        first bytes of an anchor or of a session secret that end it. ``len(tail)`` when none: all of it
        may go out now (a prompt, a line being typed)."""
        found = _ANCHORS.search(tail)
        start = found.start() if found is not None else len(tail)
        for size in range(min(self._longest_beginning, len(tail)), 0, -1):
            if len(tail) - size >= start:
                break
            if tail[-size:] in self._beginnings:
                start = len(tail) - size
                break
        for value in self._long_literals:  # secrets longer than the beginnings kept: looked at one by one
            for size in range(min(len(value) - 1, len(tail)), _BEGINNING_BYTES - 1, -1):
                if len(tail) - size < start and tail.endswith(value[:size]):
                    start = len(tail) - size
                    break
        return max(0, start - 1) if start < len(tail) else start

    def _may_hold_one(self, data: bytes) -> bool:
        """Whether short ``data`` may hold a secret: one anchor search (a single pass of an alternation
        is cheaper than one pass per rule below :data:`SHORT_BYTES`, and dearer above)."""
        if len(data) < MIN_MATCH_BYTES:
            return False
        return _ANCHORS.search(data) is not None or any(value in data for value, _ in self.literals)

    def _allowed_value(self, kind: str, value: bytes) -> bool:
        """Whether ``[redaction] allow`` keeps ``value`` of ``kind`` (patterns of the kind itself, e.g.
        ``env:CI_TOKEN``, or of its family, ``env``)."""
        patterns = (*self.allow.get(kind, ()), *self.allow.get(kind.split(":", 1)[0], ())) if ":" in kind \
            else self.allow.get(kind, ())
        return any(pattern.fullmatch(value) for pattern in patterns)

    def replace(self, data: bytes, spans: list[Span], counts: Counter[str]) -> bytes:
        """``data`` with each of ``spans`` replaced by its marker, counted in ``counts``."""
        if not spans:
            return data
        pieces: list[bytes] = []
        at = 0
        for span in spans:
            pieces.append(data[at:span.start])
            pieces.append(marker(span.kind, self.key, data[span.start:span.end]))
            counts[span.kind] += 1
            at = span.end
        pieces.append(data[at:])
        return b"".join(pieces)

    def redact(self, data: bytes) -> Redaction:
        """``data`` with every secret replaced."""
        counts: Counter[str] = Counter()
        return Redaction(self.replace(data, self.spans(data), counts), counts)

    def redact_text(self, text: str, counts: Counter[str] | None = None) -> str:
        """``text`` with every secret replaced, counted in ``counts`` when given."""
        if len(text) < MIN_MATCH_BYTES:
            return text
        if len(text) <= SHORT_BYTES // 4 and _ANCHOR_TEXT.search(text) is None \
                and not any(value in text for value in self._literal_texts):
            return text  # the common case, decided without encoding: an id, a name, a short message
        data = text.encode("utf-8", "surrogatepass")
        spans = self.spans(data)
        if not spans:
            return text
        return self.replace(data, spans, counts if counts is not None else Counter()).decode("utf-8", "surrogatepass")

    def finds_any(self, value: object) -> bool:
        """Whether the JSON ``value`` may hold something to redact: one scan of its JSON text (cheaper
        than a scan per string for a value of many small ones); True when that cannot tell."""
        if not self._json_safe:
            return True
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
        except (TypeError, ValueError):
            return True
        return bool(self.spans(text.encode("utf-8", "surrogatepass")))

    def redact_value(self, value: object, counts: Counter[str] | None = None, depth: int = 0) -> object:
        """A JSON value with every string in it (keys too) redacted; other values as they are."""
        if isinstance(value, str):
            return self.redact_text(value, counts)
        if depth > 64:
            return value
        if isinstance(value, dict):
            return {self.redact_text(k, counts) if isinstance(k, str) else k: self.redact_value(v, counts, depth + 1)
                    for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.redact_value(item, counts, depth + 1) for item in value]
        return value


def summary(counts: Counter[str]) -> dict[str, object]:
    """What a result says of its redaction: how many values, of which kinds."""
    return {"count": sum(counts.values()), "kinds": dict(sorted(counts.items()))}


_FORMATS_ONLY: list[Redactor] = []


def formats_only() -> Redactor:
    """A redactor of the well-known formats alone, for a process that does not hold a session's secrets
    (the MCP server's log messages, OpenTelemetry attributes): built once, on first use."""
    if not _FORMATS_ONLY:
        _FORMATS_ONLY.append(Redactor(key=b"peon"))
    return _FORMATS_ONLY[0]
