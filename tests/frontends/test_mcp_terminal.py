"""Programs that talk back through `peon mcp`, driven by the official MCP Python SDK client: bash's stdin,
a python REPL and vim on terminal jobs typed into with job_write and seen with job_output's screen, and a
line typed into a shell that a deny rule refuses."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from helpers.mcp import client, error_code, run, write_config


def value_of(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content or json.loads(result.content[0].text)


def test_a_repl_driven_through_mcp(workspace: Path, env: dict) -> None:
    async def scenario() -> None:
        async with client(workspace, env, "--allow", "process") as c:
            assert "job_write" in {tool.name for tool in (await c.list_tools()).tools}
            counted = value_of(await c.call_tool("bash", {"command": "wc -c", "stdin": "hello"}))
            assert counted["output"].strip() == "5"
            job = value_of(await c.call_tool("bash", {"command": "exec python3 -i -q", "background": True,
                                                      "tty": True}))["job_id"]
            text, offset = "", 0
            while ">>> " not in text:
                page = value_of(await c.call_tool("job_output", {"job_id": job, "offset": offset, "wait_seconds": 5}))
                assert page["state"] == "running", page
                text, offset = text + page["output"], page["next_offset"]
            written = value_of(await c.call_tool("job_write", {"job_id": job, "text": "print(6*7)\n"}))
            text, offset = written["output"], written["next_offset"]
            while "42" not in text:
                page = value_of(await c.call_tool("job_output", {"job_id": job, "offset": offset, "wait_seconds": 5}))
                text, offset = text + page["output"], page["next_offset"]
            screen = value_of(await c.call_tool("job_output", {"job_id": job, "screen": True}))["screen"]
            assert "42" in screen["lines"]
            stopped = value_of(await c.call_tool("job_stop", {"job_id": job}))
            assert stopped["state"] != "running"

    run(scenario())


def test_a_deny_rule_holds_for_a_line_typed_into_a_shell_through_mcp(workspace: Path, env: dict, tmp_path: Path):
    (workspace / "target").mkdir()
    config = write_config(tmp_path, '[[approval.rules]]\ntool = "bash"\ncommand_prefix = "rm -rf"\ndecision = "deny"\n')

    async def scenario() -> None:
        async with client(workspace, env, "--allow", "process", "--config", config) as c:
            job = value_of(await c.call_tool("bash", {"command": "exec bash --norc -i", "background": True,
                                                      "tty": True}))["job_id"]
            refused = await c.call_tool("job_write", {"job_id": job, "text": "rm -rf target\n"})
            assert error_code(refused) == "denied"
            await c.call_tool("job_stop", {"job_id": job})

    run(scenario())
    assert (workspace / "target").is_dir()


@pytest.mark.skipif(shutil.which("vim") is None, reason="vim is not installed")
def test_an_editor_driven_through_mcp(workspace: Path, env: dict) -> None:
    async def screen(c, job: str) -> dict:
        return value_of(await c.call_tool("job_output", {"job_id": job, "screen": True}))["screen"]

    async def until(c, job: str, predicate) -> dict:
        for _ in range(100):
            shown = await screen(c, job)
            if predicate(shown):
                return shown
            await asyncio.sleep(0.2)
        raise AssertionError(f"the screen never showed it: {shown}")

    async def scenario() -> None:
        async with client(workspace, env, "--allow", "process") as c:
            job = value_of(await c.call_tool("bash", {"command": "exec vim -u NONE f.txt", "background": True,
                                                      "tty": True, "rows": 12, "cols": 50}))["job_id"]
            await until(c, job, lambda s: '"f.txt"' in "".join(s["lines"]))
            value_of(await c.call_tool("job_write", {"job_id": job, "keys": ["i", "hello", "Escape"]}))
            shown = await until(c, job, lambda s: s["lines"][0] == "hello")
            assert shown["rows"] == 12 and shown["cols"] == 50
            value_of(await c.call_tool("job_write", {"job_id": job, "keys": [":wq", "Enter"], "wait_seconds": 5}))
            for _ in range(100):
                page = value_of(await c.call_tool("job_output", {"job_id": job, "wait_seconds": 1}))
                if page["state"] != "running":
                    break
            assert page["state"] == "exited" and page["exit_code"] == 0

    run(scenario())
    assert (workspace / "f.txt").read_text() == "hello\n"
