"""The agent adapters' pure pieces: a prompt bounded head and tail for the approval request, the search path
without relative entries, ``@`` mentions found as Claude reads them, which pi releases end options at ``--``,
and shebang lines parsed as the kernel reads them."""

from __future__ import annotations

import os

import pytest

from helpers.agents import install_fake_agents
from peon.tools.shared.agent import (
    at_mentions, bound_prompt, resolve_executable, split_search_path,
)
from peon.tools.agent_pi import supports_double_dash
from peon.tools.shared.launch import LaunchRefused, Shebang, env_command, parse_shebang


# -- pure pieces ---------------------------------------------------------------------------------------


def test_bound_prompt_keeps_head_and_tail():
    assert bound_prompt("short", 10) == ("short", False)
    shown, truncated = bound_prompt("a" * 50 + "MIDDLE" + "z" * 50, 20)
    assert truncated and shown.startswith("a" * 10) and shown.endswith("z" * 10)
    assert "[... 86 characters omitted ...]" in shown and "MIDDLE" not in shown
    assert bound_prompt("abcdef", 1) == ("a\n[... 5 characters omitted ...]\n", True)


def test_search_path_ignores_relative_entries(tmp_path):
    assert split_search_path("/a::b:/c:.") == (["/a", "/c"], ["", "b", "."])
    install_fake_agents(tmp_path / "bin", ["claude"])
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "claude").write_text("not executable")
    (tmp_path / "dir" / "claude").mkdir(parents=True)
    path = f"{tmp_path / 'plain'}:{tmp_path / 'dir'}:{tmp_path / 'bin'}/"
    assert resolve_executable("claude", path) == str(tmp_path / "bin" / "claude")
    assert resolve_executable("claude", f"{tmp_path / 'plain'}:{tmp_path / 'dir'}") is None
    assert resolve_executable(str(tmp_path / "bin" / "claude"), "") == str(tmp_path / "bin" / "claude")
    assert resolve_executable("bin/claude", str(tmp_path)) is None  # relative paths are never resolved
    old = os.getcwd()
    os.chdir(tmp_path / "bin")
    try:
        assert resolve_executable("claude", ":.") is None  # not even when the cwd holds it
    finally:
        os.chdir(old)


def test_at_mentions_are_found_as_claude_reads_them():
    mentions = at_mentions("@a b@c.d @@e\t@f#L1-2 (@g) x@y @\"q r\" @\"unclosed")
    assert mentions == ["a", "@e", "f#L1-2", "q r", '"unclosed']
    assert at_mentions("") == [] and at_mentions("no mentions @") == []


# -- pi releases before and after "--" ---------------------------------------------------------------------


def test_which_pi_releases_end_options_at_double_dash():
    assert [supports_double_dash(v) for v in ("0.84.3", "0.84.4", "0.85.0", "1.0.0", "0.84.3+build.5")] == [True] * 5
    assert [supports_double_dash(v) for v in ("0.84.2", "0.80.3", "0.73.1", "0.84.3-beta.1", "", None, "latest",
                                              "0.84")] == [False] * 8


# -- interpreters of script executables ---------------------------------------------------------------------


def test_shebang_lines_parse_as_the_kernel_reads_them():
    assert parse_shebang(b"\x7fELF\x02\x01") is None and parse_shebang(b"") is None
    expected = Shebang("/usr/bin/env", "node", "#!/usr/bin/env node")
    assert parse_shebang(b"#!/usr/bin/env node\nconsole.log(1)") == expected
    assert parse_shebang(b"#! /bin/sh  -e  -x \n") == Shebang("/bin/sh", "-e  -x", "#! /bin/sh  -e  -x ")
    assert parse_shebang(b"#!/usr/bin/python3\t-u\n").argument == "-u"
    assert parse_shebang(b"#!/bin/sh") == Shebang("/bin/sh", None, "#!/bin/sh")
    for bad, why in [(b"#!\n", "names no interpreter"), (b"#!/x/" + b"y" * 300, "longer than the 256 bytes")]:
        with pytest.raises(LaunchRefused, match=why):
            parse_shebang(bad[:256])
    assert env_command("node") == ("node", ())
    assert env_command("-S node --no-warnings -e") == ("node", ("--no-warnings", "-e"))
    for bad, why in [(None, "names no program"), ("-S", "names no program"), ("node --flag", "whole name"),
                     ("-S node '$x'", "quoting or variables"), ("-i node", "whole name"),
                     ("A=1", "options or variables"),
                     ("-S -i node", "options or variables"), ("-S A=1 node", "options or variables")]:
        with pytest.raises(LaunchRefused, match=why):
            env_command(bad)

