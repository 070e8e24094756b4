"""peon.core.paths: lexical path rules (pure, no processes, no files)."""

from __future__ import annotations

import pytest

from peon.core.errors import ToolError
from peon.core.paths import (
    NAME_MAX_BYTES,
    PATH_MAX_BYTES,
    TEMP_PREFIX,
    is_temp_name,
    normalize_workspace_path,
    parse_file_path,
    parse_workspace_path,
    printable,
)


def fails(text, code):
    with pytest.raises(ToolError) as info:
        parse_file_path(text)
    assert info.value.code.value == code, info.value
    return info.value


# -- lexical rules ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, parts", [
    ("a", ("a",)),
    ("src/main.rs", ("src", "main.rs")),
    ("./a//b/./c", ("a", "b", "c")),
    ("a/b/../c", ("a", "c")),
    ("a/../b", ("b",)),
    ("a/b/c/../../d", ("a", "d")),
    ("x/..foo", ("x", "..foo")),  # only an exact '..' component climbs
    ("...", ("...",)),
    ("héllo/wörld 😀", ("héllo", "wörld 😀")),
    ("back\\slash", ("back\\slash",)),
    (" spaced ", (" spaced ",)),
])
def test_normalization(text, parts):
    path = parse_file_path(text)
    assert path.parts == parts
    assert path.normalized == "/".join(parts)
    assert path.text == text


def test_dotdot_above_root_names_rule_and_value():
    err = fails("a/../../x", "outside_workspace")
    assert err.message == "path 'a/../../x' leaves the workspace ('..' above the root)"
    for text in ("..", "../x", "./../x", "a/b/../../../x", "../ws/x"):
        assert "'..' above the root" in fails(text, "outside_workspace").message


def test_absolute_path_refused():
    err = fails("/etc/passwd", "invalid_path")
    assert "'/etc/passwd' is absolute" in err.message
    fails("//x", "invalid_path")


def test_empty_path_refused():
    assert "empty" in fails("", "invalid_path").message


def test_nul_byte_position_is_named():
    err = fails("ab\0c", "invalid_path")
    assert "NUL" in err.message and "index 2" in err.message
    assert err.details["index"] == 2


def test_lone_surrogate_is_not_utf8():
    err = fails("a\ud800b", "invalid_path")
    assert "not valid UTF-8" in err.message and "U+D800" in err.message and "index 1" in err.message


def test_length_limits():
    fails("a/" * 2047 + "bb", "invalid_path")  # 4096 bytes
    ok = "a/" * 2046 + "bbb"  # 4095 bytes
    assert len(ok.encode()) == PATH_MAX_BYTES
    parse_file_path(ok)
    parse_file_path("x" * NAME_MAX_BYTES)
    err = fails("d/" + "é" * 128, "invalid_path")  # 256 bytes in one component
    assert "256 bytes" in err.message and str(NAME_MAX_BYTES) in err.message


@pytest.mark.parametrize("text", [".", "./", "a/..", "a/b/", "a/.", "a/b/..", "src/"])
def test_directory_forms_are_not_file_paths(text):
    fails(text, "invalid_path")
    assert parse_workspace_path(text).names_directory


def test_non_string_refused():
    with pytest.raises(ToolError) as info:
        parse_workspace_path(3)
    assert info.value.code.value == "invalid_path"


def test_temp_names_are_strict():
    assert is_temp_name(TEMP_PREFIX + "0123456789abcdef")
    for name in (TEMP_PREFIX + "notes", TEMP_PREFIX + "0123456789ABCDEF", TEMP_PREFIX + "0123456789abcdef0",
                 "x" + TEMP_PREFIX + "0123456789abcdef", TEMP_PREFIX + "0123456789abcdef.txt"):
        assert not is_temp_name(name), name


@pytest.mark.parametrize("text, normal", [
    ("a/b", "a/b"), ("./a//b/", "a/b"), ("a/../b", "b"), (".", "."), ("a/..", "."), ("./", "."),
    ("", None), ("/a", None), ("../a", None), ("a/../..", None), ("a\0b", None), ("a\ud800", None),
    ("x" * 256, None), (7, None),
])
def test_one_normal_form_for_comparing_paths(text, normal):
    assert normalize_workspace_path(text) == normal


def test_printable_names_are_valid_text():
    assert printable("plain/é") == "plain/é"
    assert printable("caf\udcff") == "caf\\xff"  # a byte that is not UTF-8, as os decodes it
    assert printable("a\ud800") == "a\\ud800"  # a lone surrogate from JSON
    for name in ("caf\udcff", "a\ud800"):
        printable(name).encode("utf-8")
