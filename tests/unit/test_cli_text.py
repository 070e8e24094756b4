"""What the ``peon`` command prints and what the docs tell people to type, without running it: a result rendered
for a person at a terminal, and every documented ``claude mcp add`` line naming the server before any option."""

from __future__ import annotations

import json
from pathlib import Path

from peon.cli.call import render_result


def test_documented_claude_mcp_add_lines_name_the_server_before_any_option():
    """``claude mcp add`` reads every word after ``-e`` as an environment variable up to the next option:
    a server name written after ``-e`` is taken for one ("Invalid environment variable format")."""
    import shlex

    root = Path(__file__).resolve().parent.parent.parent
    lines = [line.strip() for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
             for line in doc.read_text().splitlines() if line.strip().startswith("claude mcp add ")]
    assert lines, "the README shows how to add Peon to Claude Code"
    for line in lines:
        words = shlex.split(line)
        name, rest = words[3], words[4:]
        assert not name.startswith("-"), f"the server name must follow 'add' directly: {line}"
        assert "--" in rest and rest[rest.index("--") + 1:][:2] == ["peon", "mcp"], line


def test_render_result_for_people():
    value = {"exit_code": 3, "signal": None, "timed_out": False, "cancelled": False, "output": "hi",
             "output_bytes": 3, "output_kept_bytes": 3, "truncated": False, "duration_ms": 1234}
    assert render_result({"tool": "bash", "ok": True, "value": value}) == (
        "hi\n── bash: exit 3 · 1.2 s · 3 bytes of output\n", "")
    value.update(output="head…tail\n", output_bytes=8 << 20, output_kept_bytes=65536, truncated=True,
                 timed_out=True, timeout_seconds=0.5, exit_code=None, signal="SIGKILL", job_id="j1")
    out, _ = render_result({"tool": "bash", "ok": True, "value": value})
    # No "job j1": a one-shot call's session, and the job holding its retained output, end with the command.
    assert out == ("head…tail\n── bash: timed out after 0.5 s · killed by SIGKILL · 1.2 s · output truncated: "
                   "64.0 KiB of 8.0 MiB shown, the middle left out\n")
    read = {"content": "text", "total_bytes": 4, "truncated": True}
    assert render_result({"tool": "read", "ok": True,
                          "value": read}) == ("text\n── read: 4 bytes in total · truncated\n", "")
    write = {"path": "a.txt", "bytes_written": 1, "sha256": "ab", "created": True}
    assert json.loads(render_result({"tool": "write", "ok": True, "value": write})[0]) == write
    failed = {"tool": "bash", "ok": False, "error": {"code": "denied", "message": "bash was denied by policy"}}
    assert render_result(failed) == ("", "bash failed [denied]: bash was denied by policy\n")

