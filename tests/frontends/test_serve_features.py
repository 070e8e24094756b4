"""Prompts, resources and completion over ``peon serve`` (the official Python SDK client, both eras), and
jobs belonging to the MCP session that started them (raw HTTP)."""

from __future__ import annotations

import asyncio
import http.client
import json

import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from helpers import living, wait_for
from helpers.serve import HANDSHAKE, SharedServer, add_skill, initialize, modern_post, post, sse_messages

MODES = ["legacy", "auto"]


def run(coro):
    async def bounded():
        return await asyncio.wait_for(coro, 60)

    return asyncio.run(bounded())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    shared = SharedServer(tmp_path_factory, "features", "--allow", "process", prepare=add_skill)
    yield shared
    shared.close()


@pytest.mark.parametrize("mode", MODES)
def test_sdk_gets_prompts_resources_and_completions(server, mode):
    (server.workspace / f"notes-{mode}.txt").write_text("hello\n")

    async def scenario():
        async with Client(server.url, mode=mode) as c:
            capabilities = c.server_capabilities
            assert capabilities.prompts is not None and capabilities.completions is not None
            assert not capabilities.resources.subscribe  # no standalone stream to send updates on
            assert not capabilities.prompts.list_changed  # ... nor to say the prompts changed
            assert (capabilities.logging is not None) == (mode == "legacy")  # on the stream of a call
            assert [p.name for p in (await c.list_prompts()).prompts] == ["release-checks"]
            got = await c.get_prompt("release-checks")
            assert "untrusted" in got.messages[0].content.text and "Run the tests" in got.messages[0].content.text
            assert "skill://release-checks" in {str(r.uri) for r in (await c.list_resources()).resources}
            notes = (await c.read_resource(f"file:///notes-{mode}.txt")).contents[0]
            assert notes.text == "hello\n"
            from mcp_types import ResourceTemplateReference

            done = await c.complete(ResourceTemplateReference(type="ref/resource", uri="file:///{path}"),
                                    {"name": "path", "value": f"notes-{mode}"})
            assert done.completion.values == [f"notes-{mode}.txt"]
            with pytest.raises(MCPError) as missing:
                await c.read_resource("skill://no-such-skill")
            assert missing.value.error.code == -32002

    run(scenario())


def test_log_messages_travel_with_their_calls(server):
    logs: list = []

    async def on_log(params):
        logs.append(params)

    async def scenario():
        async with Client(server.url, mode="legacy", logging_callback=on_log) as c:
            await c.set_logging_level("info")
            slow = await c.call_tool("bash", {"command": "sleep 30", "timeout_seconds": 0.3})
            assert slow.structured_content["timed_out"] is True
            denied = await c.call_tool("write", {"path": "x.txt", "content": "x", "mode": "create"})
            assert denied.is_error

    run(scenario())
    events = [(log.level, log.data.get("event"), log.data.get("code")) for log in logs]
    assert ("warning", "killed", None) in events and ("notice", "call_failed", "denied") in events, events
    assert "sleep" not in json.dumps([log.data for log in logs])


def call(port: int, session: str | None, request_id: int, name: str, arguments: dict) -> dict:
    params = {"name": name, "arguments": arguments}
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    if session is None:
        status, _, data = modern_post(port, request_id, "tools/call", {"name": name, "arguments": arguments})
    else:
        status, _, data = post(port, body, {"mcp-session-id": session, "mcp-protocol-version": HANDSHAKE})
    assert status == 200, data
    messages = sse_messages(data) if data.startswith(b":") or data.startswith(b"data") else [json.loads(data)]
    return messages[-1]["result"]


def error_code(result: dict) -> str | None:
    return result["_meta"]["peon/error"]["code"] if result.get("isError") else None


def test_a_job_belongs_to_the_mcp_session_that_started_it(server):
    port = server.port
    pid_file = server.workspace / "job.pid"
    first, second = initialize(port), initialize(port)
    started = call(port, first, 1, "bash", {"command": f"echo $$ > {pid_file}; echo started; exec sleep 300",
                                           "background": True})
    job_id = started["structuredContent"]["job_id"]
    assert wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 30)
    pid = int(pid_file.read_text())

    # The session that started it sees it, on a new HTTP connection (every POST is one).
    own = call(port, first, 2, "job_output", {"job_id": job_id, "wait_seconds": 5})
    assert error_code(own) is None and own["structuredContent"]["state"] == "running"
    assert job_id in [job["job_id"] for job in call(port, first, 3, "job_list", {})["structuredContent"]["jobs"]]

    # Another session, and the stateless revision, see nothing of it and cannot stop it.
    for session in (second, None):
        assert error_code(call(port, session, 4, "job_output", {"job_id": job_id})) == "unknown_job"
        assert error_code(call(port, session, 5, "job_stop", {"job_id": job_id})) == "unknown_job"
        assert error_code(call(port, session, 5, "job_write", {"job_id": job_id, "text": "x"})) == "unknown_job"
        assert call(port, session, 6, "job_list", {})["structuredContent"]["jobs"] == []
    assert living([pid])

    # Ending the session stops its job.
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("DELETE", "/mcp", headers={"mcp-session-id": first})
    assert conn.getresponse().status == 204
    conn.close()
    assert wait_for(lambda: not living([pid]), 30), "the job outlived its MCP session"


def test_an_expired_session_stops_its_jobs(leftovers, workspace, tmp_path):
    from helpers.serve import ServeProcess, serve_env

    server = ServeProcess(workspace, serve_env(leftovers, tmp_path), tmp_path, "--allow", "process",
                          "--session-idle-seconds", "1")
    try:
        pid_file = workspace / "job.pid"
        session = initialize(server.port)
        call(server.port, session, 1, "bash", {"command": f"echo $$ > {pid_file}; exec sleep 300",
                                               "background": True})
        assert wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 30)
        pid = int(pid_file.read_text())
        # No request of any client: the server's own sweep ends the idle session and stops its job.
        assert wait_for(lambda: not living([pid]), 30), "the job outlived its expired session"
        status, _, _ = post(server.port, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                            {"mcp-session-id": session, "mcp-protocol-version": HANDSHAKE})
        assert status == 404
    finally:
        assert server.stop() == 0


def test_a_deleted_sessions_jobs_are_stopped_by_the_server_without_asking_anyone(leftovers, workspace, tmp_path):
    """With ``process = "ask"``, the server's own stops of a deleted session's jobs are approved by the server:
    they are never put to a client (the one that started the job is gone), so the job ends and the next
    client's calls do not wait behind questions nobody can answer."""
    import time

    import peon
    from peon.serve.calls import REGISTRATION_WAIT_SECONDS
    from helpers.serve import ServeProcess, serve_env

    config = tmp_path / "ask.toml"
    config.write_text('[approval]\nprocess = "ask"\n')
    server = ServeProcess(workspace, serve_env(leftovers, tmp_path), tmp_path, "--config", str(config))
    asked: list[str] = []

    def approver(request):
        asked.append(request["tool"])
        return "allow_once"

    try:
        url, pid_file = f"http://127.0.0.1:{server.port}/mcp", workspace / "job.pid"
        with peon.RemoteSession(url, approver=approver, protocol="2025-11-25") as first:
            assert first.call("bash", {"command": "true"}).ok  # a foreground job: it has ended already
            started = first.call("bash", {"command": f"echo $$ > {pid_file}; exec sleep 300", "background": True})
            assert started.ok, started.error
            assert wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 30)
            pid = int(pid_file.read_text())
        # DELETE ended the session: its running job is stopped, with no question to anyone.
        assert wait_for(lambda: not living([pid]), 30), "the job outlived its deleted session"
        with peon.RemoteSession(url, approver=approver, protocol="2026-07-28") as second:
            sent = time.monotonic()
            assert second.call("bash", {"command": "true"}).ok
            assert time.monotonic() - sent < REGISTRATION_WAIT_SECONDS  # not queued behind an unanswerable question
        assert asked == ["bash", "bash", "bash"], asked
    finally:
        assert server.stop() == 0


def test_prompts_follow_the_skills_a_new_supervisor_discovers(leftovers, workspace, tmp_path):
    import os
    import re
    import signal

    from helpers.serve import ServeProcess, serve_env

    add_skill(workspace)
    server = ServeProcess(workspace, serve_env(leftovers, tmp_path), tmp_path, "--allow", "process")
    try:
        def prompts() -> list[str]:
            status, _, body = modern_post(server.port, 1, "prompts/list")
            assert status == 200, body
            return [prompt["name"] for prompt in sse_or_json(body)["result"]["prompts"]]

        assert prompts() == ["release-checks"]
        deploy = workspace / ".peon" / "skills" / "deploy-notes"
        deploy.mkdir()
        (deploy / "SKILL.md").write_text("---\nname: deploy-notes\ndescription: How to deploy.\n---\n# Deploy\n")
        supervisor = int(re.search(r"supervisor_pid=(\d+)", server.log()).group(1))
        os.kill(supervisor, signal.SIGKILL)
        assert wait_for(lambda: not living([supervisor]), 20)

        def restarted_call() -> bool:  # the first call after the death may still meet the dying supervisor
            status, _, body = modern_post(server.port, 2, "tools/call", {"name": "bash",
                                                                        "arguments": {"command": "true"}})
            return status == 200 and sse_or_json(body)["result"].get("isError") is False

        assert wait_for(restarted_call, 30), server.log()
        assert prompts() == ["deploy-notes", "release-checks"]
    finally:
        assert server.stop() == 0


def sse_or_json(body: bytes) -> dict:
    return sse_messages(body)[-1] if body.startswith((b"event:", b"data:", b"id:")) else json.loads(body)
