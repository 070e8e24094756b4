"""The one-pass scanner of credential formats finds exactly what each rule's own pattern finds."""

from __future__ import annotations

import dataclasses
import random

import pytest

from peon.core.redaction.redactor import Redactor
from peon.core.redaction.rules import FORMAT_RULES
from peon.core.redaction.scan import FormatScanner, default_scanner, engine

# Pieces that start, nearly start, overlap and repeat the formats' start literals.
PIECES = (
    b"ghp_" + b"A1" * 20, b"ghp_ghp_", b"github_pat_" + b"a_" * 12, b"AKIAABCDEFGHIJKLMNOP", b"AKIA",
    b"AIza" + b"B" * 35, b"aws_secret_access_key = " + b"a1" * 20, b"SecretAccessKey: " + b"Z" * 40,
    b"AWS_SECRET_ACCESS_KEY='" + b"Q/" * 20 + b"'",
    b"postgres://u:pw1@host", b"://", b"Authorization: Bearer abcdef0123456789xyz", b"bearer", b"Bearer 1",
    b"eyJabcdefghij.eyJabcdefghij.abcdefghij", b"eyJ", b"-----BEGIN RSA PRIVATE KEY-----\nabc\n",
    b"-----END RSA PRIVATE KEY-----", b"sk-proj-ABCDEFGH1234567890abcd", b"sk-ant-" + b"x9" * 12, b"disk-",
    b"xoxb-1234567890-abc", b"https://hooks.slack.com/services/" + b"A" * 44, b"sk_live_" + b"a" * 20,
    b"rk_test_" + b"b" * 16, b"glpat-" + b"x" * 20, b" ", b"\n", b"x", b"_", b"-", b"=", b"'",
)


def pure_python() -> FormatScanner:
    return FormatScanner([dataclasses.replace(rule, starts=()) for rule in FORMAT_RULES])


def finditer_matches(data: bytes) -> list[tuple[str, tuple[int, int]]]:
    return [(rule.kind, match.span()) for rule in FORMAT_RULES for match in rule.pattern.finditer(data)]


def test_the_scanner_finds_what_every_rule_finditer_finds() -> None:
    if default_scanner().engine != "hyperscan":
        pytest.skip(engine())
    scanner = FormatScanner(FORMAT_RULES)
    chance = random.Random(53)
    for _ in range(3000):
        data = b"".join(chance.choice(PIECES) for _ in range(chance.randint(0, 40)))
        assert [(rule.kind, match.span()) for rule, match in scanner.matches(data)] == finditer_matches(data), data


def test_rules_without_start_literals_take_the_pure_python_path() -> None:
    scanner = pure_python()
    assert scanner.engine == "python"
    data = b" \n".join(PIECES)
    assert [(rule.kind, match.span()) for rule, match in scanner.matches(data)] == finditer_matches(data)
    redactor = Redactor(key=b"k", rules=scanner.rules)
    assert b"ghp_" + b"A1" * 20 not in redactor.redact(data).data
    assert redactor.redact(data).data == Redactor(key=b"k").redact(data).data


def test_every_rule_names_its_start_literals_and_each_starts_a_match_of_it() -> None:
    for rule in FORMAT_RULES:
        assert rule.starts, rule.kind
        assert any(rule.pattern.match(piece, piece.find(start)) for start in rule.starts for piece in PIECES
                   if start in piece), rule.kind


def test_engine_says_which_scanner_runs() -> None:
    assert engine() == "hyperscan" or engine().startswith("python: ")


def test_without_hyperscan_the_rules_run_in_python_and_say_why(monkeypatch) -> None:
    import importlib
    import sys

    from peon.core.redaction import scan

    monkeypatch.setitem(sys.modules, "hyperscan", None)  # an import of it fails
    try:
        fallback = importlib.reload(scan)
        assert fallback.engine().startswith("python: hyperscan cannot be loaded (ModuleNotFoundError")
        scanner = fallback.default_scanner()
        assert scanner.engine == "python"
        data = b" \n".join(PIECES)
        assert [(rule.kind, match.span()) for rule, match in scanner.matches(data)] == finditer_matches(data)
    finally:
        monkeypatch.undo()
        importlib.reload(scan)
    assert scan.engine() == "hyperscan"
