"""peon.tools.shared.patch: the apply_patch format's grammar and hunk application, case by case (no processes, no
files).

The cases follow the grammar in peon/tools/shared/patch.py's docstring: each production, each leniency Codex's own
parser has, and each way a patch can break it.
"""

from __future__ import annotations

import pytest

from peon.core.errors import ToolError
from peon.tools.shared.patch import apply_hunks, parse_patch


def patch(*body: str) -> str:
    return "*** Begin Patch\n" + "".join(line + "\n" for line in body) + "*** End Patch\n"


def invalid(text: str) -> ToolError:
    with pytest.raises(ToolError) as caught:
        parse_patch(text)
    assert caught.value.code.value in ("invalid_patch",), caught.value
    return caught.value


def update(text: str, *body: str) -> str:
    (op,) = parse_patch(patch("*** Update File: f.txt", *body))
    return apply_hunks(text, op.hunks, "f.txt").text


def test_add_delete_update_and_move_parse_into_operations():
    ops = parse_patch(patch("*** Add File: src/new.py", "+print('hi')", "+", "*** Delete File: old.txt",
                            "*** Update File: a.txt", "*** Move to: b/a.txt", "@@", " keep", "-old", "+new"))
    assert [(op.action, op.path.normalized) for op in ops] == [("add", "src/new.py"), ("delete", "old.txt"),
                                                               ("update", "a.txt")]
    assert ops[0].content == "print('hi')\n\n" and ops[2].move_to is not None and ops[2].move_to.normalized == "b/a.txt"
    hunk = ops[2].hunks[0]
    assert (hunk.header, hunk.old, hunk.new, hunk.end_of_file) == (None, ("keep", "old"), ("keep", "new"), False)


def test_an_add_with_no_lines_creates_an_empty_file():
    (op,) = parse_patch(patch("*** Add File: empty.txt"))
    assert op.action == "add" and op.content == ""


def test_leniencies_of_codex_parser():
    # surrounding blank space, a shell here-document around it, no '@@' before the first hunk
    text = "<<'EOF'\n  *** Begin Patch\n*** Update File: f.txt\n-a\n+b\n*** End Patch  \nEOF\n"
    (op,) = parse_patch(text)
    assert op.hunks[0].old == ("a",) and op.hunks[0].new == ("b",)
    # an empty line inside a hunk is an empty context line
    assert update("x\n\ny\n", " x", "", "-y", "+z") == "x\n\nz\n"


def test_header_lines_are_found_before_the_hunk():
    text = "def a():\n    return 1\n\ndef b():\n    return 1\n"
    assert update(text, "@@ def b():", "-    return 1", "+    return 2") == text[:-2] + "2\n"


def test_several_hunks_apply_in_order_each_after_the_previous():
    text = "".join(f"{i}\n" for i in range(10))
    result = update(text, "@@", " 1", "-2", "+two", "@@", " 7", "-8", "+eight")
    assert result == "0\n1\ntwo\n3\n4\n5\n6\n7\neight\n9\n"


def test_end_of_file_anchors_the_hunk_at_the_end():
    text = "x\nend\nx\nend\n"
    assert update(text, " x", "-end", "+END", "*** End of File") == "x\nend\nx\nEND\n"
    assert update(text, " x", "-end", "+END") == "x\nEND\nx\nend\n"


def test_a_hunk_that_only_adds_appends_at_the_end():
    assert update("a\n", "+b", "+c") == "a\nb\nc\n"


def test_whitespace_fuzz_as_codex_and_counted():
    (op,) = parse_patch(patch("*** Update File: f.txt", " a", "-b", "+c"))
    updated = apply_hunks("a   \nb\n", op.hunks, "f.txt")
    assert updated.text == "a   \nc\n" and updated.fuzzy_hunks == 1
    assert apply_hunks("a\nb\n", op.hunks, "f.txt").fuzzy_hunks == 0


def test_crlf_files_keep_crlf_and_a_final_newline_is_added():
    assert update("a\r\nb\r\n", " a", "-b", "+c") == "a\r\nc\r\n"
    assert update("a\nb", " a", "-b", "+c") == "a\nc\n"


def test_hunks_that_do_not_match_name_the_file_the_hunk_and_its_line():
    (op,) = parse_patch(patch("*** Update File: f.txt", "@@", " a", "-b", "+c", "@@", " q", "-r", "+s"))
    with pytest.raises(ToolError) as caught:
        apply_hunks("a\nb\n", op.hunks, "f.txt")
    error = caught.value
    assert error.code.value == "not_found" and error.details["hunk"] == 1 and error.details["line"] == 7
    assert "f.txt" in error.message and "'q'" in error.message
    (op,) = parse_patch(patch("*** Update File: f.txt", "@@ class Missing:", "-b", "+c"))
    with pytest.raises(ToolError) as caught:
        apply_hunks("a\nb\n", op.hunks, "f.txt")
    assert caught.value.details["rule"] == "header"


@pytest.mark.parametrize(("text", "rule"), [
    ("", "begin"),
    ("*** Update File: a\n-a\n+b\n*** End Patch\n", "begin"),
    ("*** Begin Patch\n*** Add File: a\n+x\n", "end"),
    (patch("*** Rename File: a"), "operation"),
    (patch("just text"), "operation"),
    (patch("*** Update File: a.txt"), "empty_update"),
    (patch("*** Update File: a.txt", "@@", " only context"), "no_change"),
    (patch("*** Update File: a.txt", "-a", "+b", "x bad line"), "hunk_line"),
    (patch("*** Update File: a.txt", "-a", "+b", "@@", "*** End of File"), "empty_hunk"),
    (patch("*** Add File: /etc/passwd", "+x"), "path"),
    (patch("*** Delete File: "), "path"),
    (patch("*** Add File: a.txt", "+x", "*** Delete File: ./a.txt"), "duplicate_path"),
    (patch("*** Update File: a.txt", "*** Move to: b.txt", "-a", "+b", "*** Add File: b.txt", "+x"), "duplicate_path"),
])
def test_broken_patches_are_invalid_patch_naming_line_and_rule(text, rule):
    error = invalid(text)
    assert error.details["rule"] == rule and error.message.startswith("patch line "), error


def test_paths_that_climb_out_are_refused_when_parsed():
    error = invalid(patch("*** Add File: ../outside.txt", "+x"))
    assert error.details["rule"] == "path" and "outside.txt" in error.message
