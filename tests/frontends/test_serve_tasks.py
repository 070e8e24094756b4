"""MCP tasks through `peon serve` (2026-07-28's io.modelcontextprotocol/tasks over HTTP): a command's call from
a request declaring the extension answers at once with its task, tasks/get collects the result, tasks/cancel
ends the command with nothing left, an approval is the task's input request answered by tasks/update, and a
2025-11-25 session is offered no tasks (the plain call)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import living, pids_in, wait_for
from helpers.serve import ServeProcess, initialize, modern_headers, modern_post, modern_request, post, serve_env

TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
ASKING = {**TASKS, "elicitation": {"form": {}}}


def answer(response) -> dict:
    status, headers, body = response
    assert status == 200 or (status == 400 and b'"error"' in body), body  # an error answer is a 400 here
    if headers.get("content-type", "").startswith("text/event-stream"):
        return [json.loads(line[5:]) for line in body.decode().splitlines() if line.startswith("data:")][-1]
    return json.loads(body)


def task_call(port: int, request_id, command: str, capabilities=TASKS) -> dict:
    return answer(modern_post(port, request_id, "tools/call", {"name": "bash", "arguments": {"command": command}},
                              capabilities=capabilities))["result"]


def task_request(port: int, request_id, method: str, params: dict, capabilities=TASKS) -> dict:
    return answer(post(port, modern_request(request_id, method, params, capabilities),
                       modern_headers(method, params.get("taskId"))))


def output_of(result: dict) -> str:
    return json.loads(result["content"][0]["text"])["output"]


@pytest.fixture
def env(leftovers, tmp_path):
    return serve_env(leftovers, tmp_path)


def test_tasks_over_http(workspace: Path, env: dict, tmp_path: Path) -> None:
    server = ServeProcess(workspace, env, tmp_path, "--allow", "process")
    try:
        port = server.port
        discovered = answer(modern_post(port, 0, "server/discover", capabilities=TASKS))["result"]
        assert discovered["capabilities"]["extensions"] == {"io.modelcontextprotocol/tasks": {}}
        created = task_call(port, 1, "sleep 3; echo done")
        assert created["resultType"] == "task" and created["status"] == "working"
        task_id = created["taskId"]
        first = task_request(port, 2, "tasks/get", {"taskId": task_id})["result"]
        assert first["status"] == "working"  # before its command ended
        done = wait_for(lambda: (got := task_request(port, 3, "tasks/get", {"taskId": task_id})["result"])
                        ["status"] == "completed" and got, 30)
        assert done and output_of(done["result"]) == "done\n"

        stopped = task_call(port, 4, "echo $$ > pid; exec sleep 300")["taskId"]
        pids = wait_for(lambda: pids_in(workspace / "pid"), 30)
        assert pids and living(pids)
        assert task_request(port, 5, "tasks/cancel", {"taskId": stopped})["result"]["resultType"] == "complete"
        assert wait_for(lambda: not living(pids), 15)
        assert wait_for(lambda: task_request(port, 6, "tasks/get", {"taskId": stopped})["result"]["status"]
                        == "cancelled", 15)
        unknown = task_request(port, 7, "tasks/get", {"taskId": "no-such-task"})
        assert unknown["error"]["code"] == -32602

        plain = task_call(port, 8, "echo plain", capabilities={})  # no extension: the plain call
        assert plain["resultType"] == "complete" and output_of(plain) == "plain\n"

        # A 2025-11-25 session is offered no tasks: params.task is ignored, tasks/* is not a method.
        session_id = initialize(port)
        status, _, body = post(port, {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                                      "params": {"name": "bash", "arguments": {"command": "echo old"}, "task": {}}},
                               {"mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"})
        old = answer((status, {}, body) if body.startswith(b"{") else (status, {"content-type": "text/event-stream"},
                                                                        body))["result"]
        assert "task" not in old and output_of(old) == "old\n"
    finally:
        server.stop()


def test_a_task_asks_its_approval_as_an_input_request(workspace: Path, env: dict, tmp_path: Path) -> None:
    server = ServeProcess(workspace, env, tmp_path)
    try:
        port = server.port
        task_id = task_call(port, 1, "echo approved", capabilities=ASKING)["taskId"]
        asking = wait_for(lambda: (got := task_request(port, 2, "tasks/get", {"taskId": task_id}, ASKING)["result"])
                          ["status"] == "input_required" and got, 30)
        assert asking and asking["inputRequests"]["approval"]["method"] == "elicitation/create"
        updated = task_request(port, 3, "tasks/update", {"taskId": task_id, "inputResponses": {
            "approval": {"action": "accept", "content": {"decision": "allow_once"}}}}, ASKING)
        assert updated["result"]["resultType"] == "complete"
        done = wait_for(lambda: (got := task_request(port, 4, "tasks/get", {"taskId": task_id}, ASKING)["result"])
                        ["status"] == "completed" and got, 30)
        assert done and output_of(done["result"]) == "approved\n"
    finally:
        server.stop()
