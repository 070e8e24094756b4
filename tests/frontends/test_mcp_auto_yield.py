"""Auto-yield through `peon mcp`, driven by the official MCP Python SDK client: with
``limits.yield_after_seconds = 1`` a command still running is answered with its output so far and its
``job_id`` before it ends, and ``job_output`` collects the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.mcp import MODES, client, run, write_config


def value_of(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content or json.loads(result.content[0].text)


@pytest.mark.parametrize("mode", MODES)
def test_a_long_command_yields_through_mcp(workspace: Path, env: dict, tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, "[limits]\nyield_after_seconds = 1.0\n")

    async def scenario() -> None:
        async with client(workspace, env, "--config", config, "--allow", "process", mode=mode) as c:
            answer = value_of(await c.call_tool("bash", {"command": "echo start; sleep 4; echo done"}))
            # Answered while the command still ran: before its last line.
            assert answer["yielded"] is True and answer["state"] == "running", answer
            assert answer["output"] == "start\n"
            text, offset = "", 0
            while True:
                page = value_of(await c.call_tool("job_output", {"job_id": answer["job_id"], "offset": offset,
                                                                 "wait_seconds": 5}))
                text, offset = text + page["output"], page["next_offset"]
                if page["state"] != "running":
                    break
            assert text == "start\ndone\n" and page["exit_code"] == 0
            quick = value_of(await c.call_tool("bash", {"command": "echo quick"}))
            assert "yielded" not in quick and quick["exit_code"] == 0

    run(scenario())
