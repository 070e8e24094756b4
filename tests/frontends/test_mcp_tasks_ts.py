"""MCP tasks (2025-11-25, experimental) through `peon mcp`, driven by the official TypeScript SDK client's own
task API (`client.experimental.tasks`, tests/js/tasks_driver.mjs): the task handle at once, its status polled
and its result collected by the SDK, a cancel that ends its command with nothing left, the tasks listed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path


from helpers import living
from helpers.mcp import JS, NEEDS_TS_SDK, NODE, server_command

pytestmark = NEEDS_TS_SDK


def test_tasks_through_the_typescript_sdk(workspace: Path, env: dict, tmp_path: Path) -> None:
    command = server_command(workspace, "--allow", "process")
    config = {"command": command[0], "args": command[1:], "env": env, "cwd": str(workspace),
              "pidFile": str(workspace / "pid")}
    assert NODE is not None
    done = subprocess.run([NODE, str(JS / "tasks_driver.mjs"), json.dumps(config)], capture_output=True, cwd=JS,
                          env=env, timeout=120)
    report = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert "failure" not in report, report["failure"] + done.stderr.decode()[-2000:]
    assert report["capabilities"]["tasks"]["requests"] == {"tools": {"call": {}}}
    kinds = [message["type"] for message in report["first"]]
    assert kinds[0] == "taskCreated" and report["first"][0]["status"] == "working"
    assert report["first"][1] == {"type": "taskStatus", "status": "working",  # polled before the command ended
                                  "taskId": report["first"][0]["taskId"]}
    assert kinds[-2:] == ["taskStatus", "result"] and report["first"][-2]["status"] == "completed"
    result = report["first"][-1]["result"]
    assert result["structuredContent"]["output"] == "done\n" and result["isError"] is False
    cancel = report["cancel"]
    assert cancel["created"] == "taskCreated" and cancel["answer"] == "cancelled" and cancel["after"] == "cancelled"
    assert cancel["pid"] and living([cancel["pid"]]) == []
    assert report["list"] == ["completed", "cancelled"]
