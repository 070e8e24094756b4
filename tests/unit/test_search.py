"""peon.tools.shared.globs and peon.tools.shared.search: glob matching and the readers of ripgrep's output (pure: no
processes)."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peon.core.errors import ToolError
from peon.tools.shared.globs import compile_glob, ripgrep_agrees
from peon.tools.shared.search import (MAX_RECORD_BYTES, CountReader, JsonLineReader, Page, PathReader, SecretPrefilter,
                                      exact_name, literal_glob, shown_name)
from peon.approval.secret_paths import classify_secret, parse_secret_patterns


@pytest.mark.parametrize(("glob", "path", "matches"), [
    ("*.py", "a.py", True), ("*.py", "x/y/a.py", True), ("*.py", "a.pyc", False),
    ("src/*.py", "src/a.py", True), ("src/*.py", "src/x/a.py", False), ("src/*.py", "lib/src/a.py", False),
    ("src/**/*.py", "src/a.py", True), ("src/**/*.py", "src/x/y/a.py", True), ("**/test_*.py", "t/test_a.py", True),
    ("*.{ts,tsx}", "a/b.tsx", True), ("*.{ts,tsx}", "a/b.js", False), ("{src,lib}/**", "lib/a/b", True),
    ("a?c", "abc", True), ("a?c", "a/c", False), ("[!a]b", "cb", True), ("[!a]b", "ab", False),
    ("[a-c]x", "bx", True), ("[a-c]x", "dx", False), ("\\*.txt", "*.txt", True), ("\\*.txt", "a.txt", False),
    ("./src/*.py", "src/a.py", True), ("src/", "src", True), ("*", ".env", True), ("[ab", "[ab", True),
])
def test_glob_matching(glob, path, matches):
    assert compile_glob(glob)(path) is matches


@pytest.mark.parametrize(("glob", "rule"), [
    ("/etc/*", "absolute"), ("../x", "'..'"), ("a/../../b", "'..'"),
    ("", "1 to"), ("{" * 600 + "a,b" + "}" * 600, "1 to"), ("{1..100}{1..100}", "not a valid glob"),
])
def test_bad_globs_are_invalid_pattern(glob, rule):
    with pytest.raises(ToolError) as caught:
        compile_glob(glob)
    assert caught.value.code.value == "invalid_pattern" and rule in caught.value.message


@pytest.mark.parametrize(("glob", "agrees"), [
    ("*.py", True), ("Makefile", True), ("test_*", True), ("*.{ts,tsx}", True), ("{a,b}.txt", True),
    ("{*.env}", False), ("*.{env}", False), (".{env,}", False), ("{a,b}{c,d}", False), ("{a,{b,c}}", False),
    ("?.py", False), ("[.]env", False), ("[!a]b", False), ("\\*.txt", False), ("src/*.py", False),
    ("**/*.py", False), ("**", False), ("!x", False), ("{..,a}", False),
])
def test_ripgrep_filters_only_by_globs_its_engine_reads_as_peon_does(glob, agrees):
    assert ripgrep_agrees(glob) is agrees


def test_names_are_kept_byte_for_byte_and_named_exactly():
    exact = exact_name(b"d/caf\xe9/.env")
    assert exact == "d/caf\udce9/.env" and exact.encode("utf-8", "surrogateescape") == b"d/caf\xe9/.env"
    assert shown_name(exact) == ("d/caf\\xe9/.env", True) and shown_name("plain") == ("plain", False)
    assert literal_glob(exact) == "d/caf?/.env"  # ripgrep's '?' is one byte
    assert literal_glob("a*b/[x]{y}!\\z?") == "a\\*b/\\[x\\]\\{y\\}\\!\\\\z\\?"
    given: list[str] = []
    seen: list[tuple[str, bool]] = []
    reader = PathReader("", lambda p: given.append(p) is None, lambda p, escaped: seen.append((p, escaped)),
                        exact=True)
    reader.records.feed(b"./caf\xe9/.env\0")
    reader.finish()
    assert given == ["caf\udce9/.env"] and seen == [("caf\udce9/.env", False)]


def test_page_keeps_one_page_and_knows_there_is_more():
    page = Page(offset=2, limit=3)
    for i in range(5):
        page.offer({"i": i})
    assert [e["i"] for e in page.entries] == [2, 3, 4] and not page.full and page.next_offset is None
    page.offer({"i": 5})
    assert page.full and page.next_offset == 5 and len(page.entries) == 3


def test_path_reader_takes_arbitrary_chunks_and_bounds_records():
    got: list[tuple[str, bool]] = []
    reader = PathReader("sub", lambda p: not p.endswith(".skip"), lambda p, escaped: got.append((p, escaped)))
    stream = b"./a.txt\0./b.skip\0./dir/\xffname\0" + b"x" * (MAX_RECORD_BYTES + 10) + b"\0./c\0rg: an error\n"
    for i in range(0, len(stream), 7919):
        reader.records.feed(stream[i:i + 7919])
    reader.finish()
    assert got == [("sub/a.txt", False), ("sub/dir/\\xffname", True), ("sub/c", False)]
    assert reader.records.dropped == 1 and reader.errors == ["rg: an error\n"]


def test_count_and_json_readers():
    counts: list[tuple[str, int]] = []
    reader = CountReader("", lambda p: True, lambda p, n: counts.append((p, n)))
    reader.records.feed(b"./a\x003\n./b c\x0012\n")
    reader.finish()
    assert counts == [("a", 3), ("b c", 12)]

    lines: list[dict] = []
    events = [{"type": "begin", "data": {"path": {"text": "./f.py"}}},
              {"type": "match", "data": {"path": {"text": "./f.py"}, "lines": {"text": "x = 1\r\n"}, "line_number": 4}},
              {"type": "context", "data": {"path": {"text": "./f.py"},
                                           "lines": {"bytes": base64.b64encode(b"caf\xe9\n").decode()},
                                           "line_number": 5}},
              {"type": "match", "data": {"path": {"text": "./f.py"}, "lines": {"text": "y" * 900}, "line_number": 9}}]
    json_reader = JsonLineReader("", lambda p: True, lines.append)
    json_reader.records.feed("".join(json.dumps(e) + "\n" for e in events).encode())
    json_reader.finish()
    assert lines[0] == {"path": "f.py", "line": 4, "kind": "match", "text": "x = 1"}
    assert lines[1] == {"path": "f.py", "line": 5, "kind": "context", "text": "caf\\xe9", "not_utf8": True}
    assert len(lines[2]["text"]) == 500 and lines[2]["text_truncated"] is True and json_reader.cut_lines == 1


def test_secret_prefilter_admits_every_secret_like_path_and_few_others():
    patterns = parse_secret_patterns(".env\n.env.*\n!.env.*example\n.ssh/\nid_*\n*.pem\nconfig/*.key\n"
                                     "wg[0-9]*.conf\n", "test")
    prefilter = SecretPrefilter(patterns)
    secret = [".env", "app/.ENV.bak~", ".env.local", "home/.ssh/config", "k/id_rsa", "certs/a.PEM",
              "config/x.key", "vpn/wg0.conf"]
    plain = ["src/main.py", "README.md", "docs/env.txt", "keys/x.txt", "wg.conf"]
    for path in secret:
        assert classify_secret(tuple(path.split("/")), patterns) is not None, path
        assert prefilter(path), path
    assert not any(prefilter(path) for path in plain)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"bb", b"\0", b"x" * 7, b"\xff"]), max_size=40), st.integers(1, 9),
       st.integers(2, 12))
def test_records_are_the_same_however_the_stream_is_cut(pieces, cut, bound):
    from peon.tools.shared import search

    stream = b"".join(pieces)
    got: list[bytes] = []
    original = search.MAX_RECORD_BYTES
    search.MAX_RECORD_BYTES = bound
    try:
        records = search._Records(b"\0", got.append)
        for i in range(0, len(stream), cut):
            records.feed(stream[i:i + cut])
        rest = records.finish()
    finally:
        search.MAX_RECORD_BYTES = original
    *complete, last = stream.split(b"\0")
    assert got == [r for r in complete if len(r) <= bound]
    assert records.dropped == sum(len(r) > bound for r in complete) + (len(last) > bound)
    assert rest == (last if len(last) <= bound else b"")
