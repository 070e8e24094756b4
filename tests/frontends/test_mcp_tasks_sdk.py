"""MCP tasks (2026-07-28's io.modelcontextprotocol/tasks) through `peon mcp`, driven by the official MCP Python
SDK client with the extension declared: a command's call answers at once with a task handle, the handle
resolves to the call's result through tasks/get, tasks/cancel ends the command with nothing left, and a
client without the extension gets the plain call."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Literal

from mcp.client.extension import ClientExtension, ResultClaim
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict

from helpers import living, pids_in
from helpers.mcp import client, run


class TaskHandle(Result):
    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: str


class TaskState(Result):
    model_config = ConfigDict(extra="allow")
    status: str
    result: dict[str, Any] | None = None


class TaskParams(RequestParams):
    task_id: str


class GetTask(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class CancelTask(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


async def task_state(session, task_id: str) -> TaskState:
    return await session.send_request(GetTask(params=TaskParams(task_id=task_id)), TaskState)


async def resolve(handle: TaskHandle, ctx) -> CallToolResult:
    while True:
        state = await task_state(ctx.session, handle.task_id)
        if state.status not in ("working", "input_required"):
            assert state.status == "completed", state
            return CallToolResult.model_validate(state.result)
        await asyncio.sleep(0.2)


class Tasks(ClientExtension):
    identifier = "io.modelcontextprotocol/tasks"

    def claims(self):
        return (ResultClaim(result_type="task", model=TaskHandle, resolve=resolve),)


def output_of(result: CallToolResult) -> str:
    assert not result.is_error, result.content
    return (result.structured_content or json.loads(result.content[0].text))["output"]


def test_tasks_through_the_python_sdk(workspace: Path, env: dict) -> None:
    pids: list[int] = []

    async def scenario() -> None:
        async with client(workspace, env, "--allow", "process", mode="auto", extensions=[Tasks()]) as c:
            handle = await c.session.call_tool("bash", {"command": "sleep 3; echo done"}, allow_claimed=True)
            assert isinstance(handle, TaskHandle) and handle.status == "working"
            assert (await task_state(c.session, handle.task_id)).status == "working"  # before its command ended
            assert output_of(await resolve(handle, type("Ctx", (), {"session": c.session}))) == "done\n"
            # The client's own call_tool resolves a handle through the extension.
            assert output_of(await c.call_tool("bash", {"command": "echo resolved"})) == "resolved\n"

            stopped = await c.session.call_tool("bash", {"command": "echo $$ > pid; exec sleep 300"},
                                                allow_claimed=True)
            assert isinstance(stopped, TaskHandle)
            for _ in range(300):
                if pids_in(workspace / "pid"):
                    break
                await asyncio.sleep(0.1)
            pids.extend(pids_in(workspace / "pid"))
            assert pids and living(pids)
            await c.session.send_request(CancelTask(params=TaskParams(task_id=stopped.task_id)), Result)
            for _ in range(150):
                if (await task_state(c.session, stopped.task_id)).status != "working":
                    break
                await asyncio.sleep(0.1)
            assert (await task_state(c.session, stopped.task_id)).status == "cancelled"
            assert living(pids) == []

        async with client(workspace, env, "--allow", "process", mode="auto") as c:  # no extension: plain calls
            assert output_of(await c.call_tool("bash", {"command": "echo plain"})) == "plain\n"

    run(scenario())
    assert living(pids) == []
