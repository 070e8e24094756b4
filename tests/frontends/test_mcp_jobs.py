"""Jobs through `peon mcp`, driven by the official MCP Python SDK client: a background server answers a
later call and job_stop ends it, a truncated result is recovered through job_output, and progress
notifications carry the command's newest output lines."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

from helpers import living
from helpers.mcp import client, run


def value_of(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content or json.loads(result.content[0].text)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_jobs_through_mcp(workspace: Path, env: dict) -> None:
    (workspace / "index.html").write_text("hello over mcp\n")
    port = free_port()
    server_pid: list[int] = []

    async def scenario() -> None:
        async with client(workspace, env, "--allow", "process") as c:
            names = {tool.name for tool in (await c.list_tools()).tools}
            assert {"job_output", "job_stop", "job_list"} <= names
            started = value_of(await c.call_tool(
                "bash", {"command": f"echo pid $$; exec python3 -u -m http.server {port} --bind 127.0.0.1",
                         "background": True}))
            job, text, offset = started["job_id"], "", 0
            while "Serving HTTP" not in text:
                page = value_of(await c.call_tool("job_output", {"job_id": job, "offset": offset, "wait_seconds": 5}))
                assert page["state"] == "running", page
                text, offset = text + page["output"], page["next_offset"]
            server_pid.append(int(text.split()[1]))
            fetched = value_of(await c.call_tool("bash", {"command": f"curl -s --max-time 10 http://127.0.0.1:{port}/"}))
            assert fetched["output"] == "hello over mcp\n"
            stopped = value_of(await c.call_tool("job_stop", {"job_id": job}))
            assert stopped["state"] == "killed"
            assert living(server_pid) == []

            long = value_of(await c.call_tool("bash", {"command": "seq 1 300000"}))
            assert long["truncated"] is True
            recovered, offset = b"", 0
            while True:
                page = value_of(await c.call_tool("job_output", {"job_id": long["job_id"], "offset": offset,
                                                                 "limit": 1 << 20}))
                if not page["returned_bytes"]:
                    break
                recovered, offset = recovered + page["output"].encode(), page["next_offset"]
            assert recovered == b"".join(b"%d\n" % i for i in range(1, 300001))

            messages: list[str] = []

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                messages.append(message or "")
                if "compiling unit 3" in (message or ""):
                    (workspace / "go").touch()

            command = ("for i in 1 2 3; do printf '\\033[1mcompiling unit %s\\033[0m\\n' $i; done; "
                       "while [ ! -e go ]; do sleep 0.05; done")
            result = value_of(await c.call_tool("bash", {"command": command, "timeout_seconds": 30},
                                                progress_callback=on_progress))
            assert result["exit_code"] == 0
            assert any(re.search(r"running for .*\ncompiling unit 1\ncompiling unit 2\ncompiling unit 3$", m)
                       for m in messages), messages

    run(scenario())
    assert living(server_pid) == []
