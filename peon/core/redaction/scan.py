"""Finding every well-known format's matches in bytes with one compiled pass, not one pass per rule.

Promise: :meth:`FormatScanner.matches` returns, rule by rule in the order given, exactly the matches
``rule.pattern.finditer(data)`` yields. With Hyperscan loaded (:func:`engine` says ``"hyperscan"``) one
pass over ``data`` finds every occurrence of every rule's start literals
(:attr:`peon.core.redaction.rules.FormatRule.starts`) at GB/s, and each rule's own pattern is tried only
there, from the left, resuming past each match as ``finditer`` does: the rules stay the one source of
truth, Hyperscan only says where to look. Text holding no start literal costs that one pass and no
rule's work. Without Hyperscan (no wheel for this platform, a CPU it does not support, or a start it
cannot compile) every rule runs its ``finditer`` — the same matches, one pass per rule at about
100 MiB/s — and :func:`engine` says ``"python"`` and why. Thread-safe:
each thread scans with its own Hyperscan scratch space. Pure: no I/O.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any

from peon.core.redaction.rules import FORMAT_RULES, FormatRule

FALLBACK_REASON = ""
_hyperscan: Any
try:
    import hyperscan as _hyperscan
except Exception as error:  # any failure to load means the pure-Python path
    _hyperscan = None
    FALLBACK_REASON = f"hyperscan cannot be loaded ({type(error).__name__}: {error})"

Found = list[tuple[FormatRule, "re.Match[bytes]"]]


class FormatScanner:
    """The matches of a fixed list of format rules; built once per list of rules, shared by every thread."""

    def __init__(self, rules: Sequence[FormatRule]):
        self.rules = tuple(rules)
        self.engine = "python"
        self._database: Any = None
        self._scratch = threading.local()
        starts = sorted({start for rule in self.rules for start in rule.starts})
        # Which rules (by index) each start literal may begin a match of.
        self._rules_of = [tuple(index for index, rule in enumerate(self.rules) if start in rule.starts)
                          for start in starts]
        self._lengths = [len(start) for start in starts]
        if _hyperscan is None or not starts or any(not rule.starts for rule in self.rules):
            return
        try:
            database = _hyperscan.Database()
            database.compile(expressions=starts, ids=list(range(len(starts))), elements=len(starts), literal=True)
        except Exception:  # a start it cannot compile: the pure-Python path serves
            return
        self._database = database
        self.engine = "hyperscan"

    def matches(self, data: bytes) -> Found:
        """Each rule's matches in ``data``, rule by rule, as its ``finditer`` finds them."""
        if self._database is None:
            return [(rule, match) for rule in self.rules for match in rule.pattern.finditer(data)]
        hits: list[tuple[int, int]] = []
        self._database.scan(data, match_event_handler=_collect, context=hits, scratch=self._thread_scratch())
        if not hits:
            return []
        candidates: list[list[int]] = [[] for _ in self.rules]
        for start_id, end in hits:
            start = end - self._lengths[start_id]
            for index in self._rules_of[start_id]:
                candidates[index].append(start)
        found: Found = []
        for index, starts in enumerate(candidates):
            if not starts:
                continue
            pattern = self.rules[index].pattern
            resume = 0  # finditer looks for the next match from the end of the last one
            for start in sorted(set(starts)):
                if start < resume:
                    continue
                match = pattern.match(data, start)
                if match is not None:
                    found.append((self.rules[index], match))
                    resume = match.end()
        return found

    def _thread_scratch(self) -> Any:
        scratch = getattr(self._scratch, "space", None)
        if scratch is None:
            scratch = self._scratch.space = _hyperscan.Scratch(self._database)
        return scratch


def _collect(start_id: int, _from: int, end: int, _flags: int, hits: list[tuple[int, int]]) -> None:
    hits.append((start_id, end))


_DEFAULT: list[FormatScanner] = []


def default_scanner() -> FormatScanner:
    """The scanner of :data:`~peon.core.redaction.rules.FORMAT_RULES`: compiled once per process, on first use."""
    if not _DEFAULT:
        _DEFAULT.append(FormatScanner(FORMAT_RULES))
    return _DEFAULT[0]


def engine() -> str:
    """What finds the formats in this process: ``"hyperscan"``, or ``"python"`` (and why, after a colon)."""
    scanner = default_scanner()
    if scanner.engine == "hyperscan":
        return "hyperscan"
    return "python: " + (FALLBACK_REASON or "hyperscan cannot compile the formats' starts")
