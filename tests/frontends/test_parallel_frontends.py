"""Calls issued together through every front end run side by side and are answered as each ends: ``peon mcp``
(official MCP Python SDK client, out of order per JSON-RPC id), ``peon serve`` with several clients at once,
and ``RemoteSession`` from threads.

Overlap is asserted with events: each call waits for a file the test creates only once every call has
started. The deadlines only detect hangs.
"""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import pytest
from mcp.client import Client

import peon
from helpers import wait_for
from helpers.mcp import MODES, client, run
from helpers.serve import SharedServer

HANG_SECONDS = 40


def gate_command(tag: str, gate: str = "go") -> str:
    """Record ``started-<tag>``, then wait (bounded) for ``gate``; exit 0 once it exists, 9 on a hang."""
    return (f"touch started-{tag}; for n in $(seq 800); do [ -e {gate} ] && echo {tag} && exit 0; sleep 0.05; "
            "done; exit 9")


def all_started(workspace: Path, tags) -> bool:
    return all((workspace / f"started-{tag}").exists() for tag in tags)


async def open_gate_once_started(workspace: Path, tags, gate: str = "go") -> None:
    with anyio.fail_after(HANG_SECONDS):
        while not all_started(workspace, tags):
            await anyio.sleep(0.02)
    (workspace / gate).touch()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    shared = SharedServer(tmp_path_factory, "parallel", "--allow", "process", "--allow", "filesystem")
    yield shared
    shared.close()


@pytest.mark.parametrize("mode", MODES)
def test_four_calls_through_peon_mcp_run_at_once_and_are_answered_as_each_ends(workspace, env, mode):
    tags = ["a", "b", "c", "d"]

    async def scenario():
        async with client(workspace, env, "--allow", "process", mode=mode) as c:
            finished: list[str] = []
            outputs: dict[str, str] = {}

            async def call(tag: str) -> None:
                result = await c.call_tool("bash", {"command": gate_command(tag, gate=f"go-{tag}")})
                outputs[tag] = result.structured_content["output"]
                finished.append(tag)

            async with anyio.create_task_group() as group:
                for tag in tags:
                    group.start_soon(call, tag)
                with anyio.fail_after(HANG_SECONDS):
                    while not all_started(workspace, tags):
                        await anyio.sleep(0.02)
                for tag in reversed(tags):  # let go in reverse order: each is answered as it ends
                    (workspace / f"go-{tag}").touch()
                    with anyio.fail_after(HANG_SECONDS):
                        while tag not in finished:
                            await anyio.sleep(0.02)
            return finished, outputs

    finished, outputs = run(scenario())
    assert finished == ["d", "c", "b", "a"]
    assert outputs == {tag: f"{tag}\n" for tag in tags}


@pytest.mark.parametrize("mode", MODES)
def test_a_read_through_peon_mcp_is_answered_while_a_long_command_runs(workspace, env, mode):
    (workspace / "notes.txt").write_text("hello\n")

    async def scenario():
        async with client(workspace, env, "--allow", "process", mode=mode) as c:
            outcome = {}

            async def long() -> None:
                outcome["long"] = await c.call_tool("bash", {"command": gate_command("long")})

            async with anyio.create_task_group() as group:
                group.start_soon(long)
                with anyio.fail_after(HANG_SECONDS):
                    while not all_started(workspace, ["long"]):
                        await anyio.sleep(0.02)
                read = await c.call_tool("read", {"path": "notes.txt"})
                outcome["long done before the read"] = "long" in outcome
                (workspace / "go").touch()
            return read, outcome

    read, outcome = run(scenario())
    assert not read.is_error and "hello" in read.structured_content["content"]
    assert outcome["long done before the read"] is False
    assert outcome["long"].structured_content["output"] == "long\n"


def test_one_peon_serve_runs_the_calls_of_several_clients_at_once(server):
    workspace = server.workspace
    tags = ["s1", "s2", "s3", "s4"]

    async def scenario():
        outputs: dict[str, str] = {}

        async def agent(tag: str, mode: str) -> None:
            async with Client(server.url, mode=mode) as c:
                result = await c.call_tool("bash", {"command": gate_command(tag, gate="go-serve")})
                outputs[tag] = result.structured_content["output"]

        async with anyio.create_task_group() as group:
            for i, tag in enumerate(tags):
                group.start_soon(agent, tag, MODES[i % 2])
            await open_gate_once_started(workspace, tags, gate="go-serve")
        return outputs

    assert run(scenario()) == {tag: f"{tag}\n" for tag in tags}


def test_remote_session_calls_from_threads_run_at_once(server):
    workspace = server.workspace
    tags = ["r1", "r2", "r3", "r4"]
    results: dict[str, peon.ToolResult] = {}
    with peon.RemoteSession(server.url) as session:
        def call(tag: str) -> None:
            results[tag] = session.call("bash", {"command": gate_command(tag, gate="go-remote")})

        threads = [threading.Thread(target=call, args=(tag,)) for tag in tags]
        for thread in threads:
            thread.start()
        try:
            assert wait_for(lambda: all_started(workspace, tags), HANG_SECONDS), "the calls did not all start"
        finally:
            (workspace / "go-remote").touch()
        for thread in threads:
            thread.join(HANG_SECONDS)
    assert {tag: results[tag].value["output"] for tag in tags} == {tag: f"{tag}\n" for tag in tags}


def test_async_remote_session_calls_run_at_once(server):
    workspace = server.workspace
    tags = ["ar1", "ar2", "ar3"]

    async def scenario():
        async with peon.AsyncRemoteSession(server.url) as session:
            async with anyio.create_task_group() as group:
                results: dict[str, peon.ToolResult] = {}

                async def call(tag: str) -> None:
                    results[tag] = await session.call("bash", {"command": gate_command(tag, gate="go-async")})

                for tag in tags:
                    group.start_soon(call, tag)
                await open_gate_once_started(workspace, tags, gate="go-async")
            return results

    results = run(scenario())
    assert {tag: results[tag].value["output"] for tag in tags} == {tag: f"{tag}\n" for tag in tags}
