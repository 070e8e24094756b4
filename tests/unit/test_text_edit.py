"""peon.tools.shared.text_edit and peon.tools.shared.unified_diff: the pure logic beneath ``edit`` (no processes, no
files)."""

from __future__ import annotations

import difflib
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peon.core.errors import ToolError
from peon.tools.shared.text_edit import Edit, apply_edits, line_ending_of
from peon.tools.shared.unified_diff import unified_diff


def fails(text: str, *edits: Edit) -> ToolError:
    with pytest.raises(ToolError) as caught:
        apply_edits(text, edits, "path 'f'")
    return caught.value


def test_edits_apply_in_order_each_to_the_previous_result():
    applied = apply_edits("a = 1\nb = 2\n", [Edit("a = 1", "a = 10"), Edit("a = 10\nb", "a = 11\nc")], "f")
    assert applied.text == "a = 11\nc = 2\n" and applied.replacements == 2 and applied.line_ending == "lf"


def test_replace_all_counts_every_occurrence():
    applied = apply_edits("x x x\n", [Edit("x", "y", replace_all=True)], "f")
    assert applied.text == "y y y\n" and applied.replacements == 3


def test_ambiguous_names_the_edit_and_every_line():
    error = fails("x\nfoo\ny\nfoo\nfoo bar\n", Edit("q", "b"))
    assert error.code.value == "not_found"
    error = fails("x\nfoo\ny\nfoo\nfoo bar\n", Edit("x", "z"), Edit("foo", "bar"))
    assert error.code.value == "ambiguous" and error.details == {"edit": 1, "occurrences": 3, "lines": [2, 4, 5]}
    assert "edit 1" in error.message and "lines 2, 4, 5" in error.message


def test_not_found_gives_the_closest_match_and_its_line():
    text = "def alpha():\n    return 1\n\ndef beta():\n    return 2\n"
    error = fails(text, Edit("def beta():\n    return 3\n", "x"))
    assert error.code.value == "not_found" and error.details["edit"] == 0
    assert error.details["closest_line"] == 4 and error.details["closest_match"] == "def beta():\n    return 2"
    assert 0.8 < error.details["similarity"] < 1 and "hint" not in error.details


def test_crlf_files_match_lf_strings_and_keep_crlf():
    text = "one\r\ntwo\r\nthree\r\n"
    assert line_ending_of(text) == "crlf"
    applied = apply_edits(text, [Edit("one\ntwo\n", "uno\ndos\n"), Edit("three\r\n", "tres\r\nfour\n")], "f")
    assert applied.text == "uno\r\ndos\r\ntres\r\nfour\r\n" and applied.line_ending == "crlf"


def test_mixed_line_endings_are_matched_byte_for_byte():
    text = "one\r\ntwo\nthree\n"
    assert line_ending_of(text) == "lf"
    assert fails(text, Edit("one\ntwo", "x")).code.value == "not_found"
    assert apply_edits(text, [Edit("one\r\ntwo", "x")], "f").text == "x\nthree\n"


def test_line_number_prefixes_are_refused_with_a_hint():
    text = "import os\nprint(os.getcwd())\n"
    for numbered in ("     1\timport os\n     2\tprint(os.getcwd())", "1→import os\n2→print(os.getcwd())"):
        error = fails(text, Edit(numbered, "x"))
        assert error.code.value == "not_found" and error.details["rule"] == "line_number_prefix", numbered
        assert "line numbers" in error.message
    assert apply_edits(text, [Edit("import os", "import sys")], "f").text.startswith("import sys")


def test_trailing_whitespace_differences_are_refused_with_a_hint():
    text = "if x:  \n    go()\n"
    error = fails(text, Edit("if x:\n    go()", "y"))
    assert error.details["rule"] == "trailing_whitespace" and "trailing whitespace" in error.details["hint"]
    error = fails("three\n", Edit("thre  ", "x"))  # a prefix of a longer line is no whitespace slip
    assert "rule" not in error.details


def test_unicode_normalisation_differences_are_refused_with_a_hint():
    nfd = unicodedata.normalize("NFD", "café = 1\n")
    error = fails(nfd, Edit("café = 1", "tea = 1"))
    assert error.code.value == "not_found" and error.details["rule"] == "unicode_normalization"
    assert apply_edits(nfd, [Edit(unicodedata.normalize("NFD", "café"), "tea")], "f").text == "tea = 1\n"


def test_empty_and_unchanged_edits_are_invalid_input():
    assert fails("a\n", Edit("", "b")).details["rule"] == "old_string"
    assert fails("a\n", Edit("a", "a")).details["rule"] == "no_change"


# -- unified diffs ------------------------------------------------------------------------------------------


def apply_unified(old: str, diff: str) -> str:
    """Apply a unified diff with this test's own reader: proves headers, line numbers and bodies."""
    lines, out, index = diff.splitlines(keepends=True)[2:], [], 0
    source = old.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        header = lines[i]
        assert header.startswith("@@ -"), header
        start = int(header[4:].split(",")[0].split(" ")[0])
        length = header[4:].split(" ")[0]
        first = start - 1 if ("," not in length or int(length.split(",")[1]) > 0) else start
        out += source[index:first]
        index = first
        i += 1
        while i < len(lines) and not lines[i].startswith("@@ "):
            line = lines[i]
            body = line[1:]
            if i + 1 < len(lines) and lines[i + 1].startswith("\\ No newline"):
                body = body[:-1]
                i += 1
            if line[0] in " -":
                assert source[index] == body, (source[index], body)
                index += 1
            if line[0] in " +":
                out.append(body)
            i += 1
    return "".join(out + source[index:])


lines = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "dd\n", "e", "\n", "é\n"]), max_size=14)


@settings(max_examples=300, deadline=None)
@given(lines, lines)
def test_unified_diff_applies_back_to_the_new_text(old, new):
    old_text, new_text = "".join(old), "".join(new)
    diff = unified_diff("f", old_text, new_text)
    if old_text == new_text:
        assert diff.text == ""
        return
    assert diff.text.startswith("--- a/f\n+++ b/f\n@@ ") and not diff.truncated
    assert apply_unified(old_text, diff.text) == new_text
    reference = list(difflib.unified_diff(old_text.splitlines(True), new_text.splitlines(True)))
    assert diff.added - diff.removed == sum(r.startswith("+") for r in reference[2:]) - sum(
        r.startswith("-") for r in reference[2:])


def test_diff_of_one_line_in_a_large_text_shows_true_line_numbers_and_is_bounded():
    big = "".join(f"line {i}\n" for i in range(300_000))
    diff = unified_diff("big.txt", big, big.replace("line 200000\n", "changed\n"))
    assert "@@ -199998,7 +199998,7 @@\n line 199997\n line 199998\n line 199999\n-line 200000\n+changed\n" in diff.text
    assert (diff.added, diff.removed) == (1, 1)
    everything = unified_diff("big.txt", big, big.replace("line", "LINE"), max_bytes=4096)
    assert everything.truncated and len(everything.text.encode()) < 4200 and "bytes omitted" in everything.text
    assert everything.added == everything.removed == 300_000
