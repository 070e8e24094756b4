"""``peon serve`` as a real process on 127.0.0.1, driven by the official MCP Python SDK's Streamable HTTP
client (both eras: ``mode="legacy"`` is the 2025-11-25 handshake with ``Mcp-Session-Id``, ``mode="auto"``
probes ``server/discover`` and speaks the stateless 2026-07-28 revision) and by raw HTTP.

Servers that tests only read from are shared per module (each with its own process tag, checked at the
end); tests that change a server's life (signals, restarts) start their own.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import anyio
import psutil
import pytest
from mcp.client import Client
from mcp_types import ElicitResult

from helpers.serve import (
    HANDSHAKE, MODERN, TOKEN, ServeProcess, SseReader, alive, initialize, modern_post, modern_request,
    SharedServer, add_skill, modern_headers, post, serve_env, sse_messages, wait_until,
)
from helpers import pids_in

MODES = ["legacy", "auto"]
ERA = {"legacy": HANDSHAKE, "auto": MODERN}
TEST_TIMEOUT = 60


def run(coro):
    async def bounded():
        return await asyncio.wait_for(coro, TEST_TIMEOUT)

    return asyncio.run(bounded())


@pytest.fixture(scope="module")
def allow_server(tmp_path_factory):
    shared = SharedServer(tmp_path_factory, "allow", "--allow", "process", "--allow", "filesystem",
                          "--allow", "delegate", "--keepalive-seconds", "0.2", "--max-body-bytes", "65536",
                          prepare=add_skill)
    yield shared
    shared.close()


@pytest.fixture(scope="module")
def ask_server(tmp_path_factory):
    config = tmp_path_factory.mktemp("ask-config") / "peon.toml"
    config.write_text('[approval]\nprocess = "ask"\n')
    shared = SharedServer(tmp_path_factory, "ask", "--config", str(config))
    yield shared
    shared.close()


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    shared = SharedServer(tmp_path_factory, "token", "--allow", "process", "--max-connections", "2",
                          extra_env={"PEON_SERVE_TOKEN": TOKEN})
    yield shared
    shared.close()


@pytest.fixture
def env(leftovers, tmp_path) -> dict:
    return serve_env(leftovers, tmp_path)


def client(url: str, mode: str, **options) -> Client:
    return Client(url, mode=mode, **options)


# -- the official SDK client, both eras ----------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_sdk_lists_tools_and_calls_each(allow_server, mode):
    ws = allow_server.workspace

    async def scenario():
        async with client(allow_server.url, mode) as c:
            assert c.protocol_version == ERA[mode]
            listed = await c.list_tools()
            tools = {t.name: t for t in listed.tools}
            assert set(tools) == {"bash", "read", "write", "read_skill", "agent_claude", "agent_codex", "agent_pi",
                                  "job_output", "job_stop", "job_list", "edit", "apply_patch", "grep", "glob",
                                  "job_write", "changes", "rewind"}
            assert tools["bash"].meta["peon/risk"] == "process" and tools["agent_pi"].meta["peon/risk"] == "delegate"
            assert tools["read_skill"].input_schema["properties"]["name"]["enum"] == ["release-checks"]
            results = {
                "bash": await c.call_tool("bash", {"command": f"echo {mode}"}),
                "write": await c.call_tool("write", {"path": f"{mode}.txt", "content": "hello\n", "mode": "create"}),
                "read": await c.call_tool("read", {"path": f"{mode}.txt"}),
                "read_skill": await c.call_tool("read_skill", {"name": "release-checks"}),
            }
            for agent in ("agent_claude", "agent_codex", "agent_pi"):
                results[agent] = await c.call_tool(agent, {"prompt": f"review {mode}"})
            missing = await c.call_tool("read", {"path": "missing.txt"})
            return results, missing

    results, missing = run(scenario())
    assert all(not r.is_error for r in results.values()), {k: r.content for k, r in results.items() if r.is_error}
    assert results["bash"].structured_content["output"] == f"{mode}\n"
    assert results["read"].structured_content["content"] == "hello\n"
    assert (ws / f"{mode}.txt").read_text() == "hello\n"
    assert "Run the tests" in json.dumps(results["read_skill"].structured_content)
    for agent in ("agent_claude", "agent_codex", "agent_pi"):
        expected = f"received a prompt of {len(f'review {mode}')} bytes"
        assert expected in results[agent].structured_content["output"], results[agent].structured_content
    assert missing.is_error and missing.meta["peon/error"]["code"] == "not_found"


@pytest.mark.parametrize("mode", MODES)
def test_sdk_cancel_kills_the_calls_processes(allow_server, mode):
    pid_file = allow_server.workspace / f"pids-{mode}"
    command = (f"sleep 300 & echo $! >> {pid_file}; (sleep 300 & echo $! >> {pid_file}; wait) & "
               f"echo $$ >> {pid_file}; wait")

    async def scenario():
        async with client(allow_server.url, mode) as c:
            outcome = {}
            async with anyio.create_task_group() as tg:
                async def call():
                    outcome["result"] = await c.call_tool("bash", {"command": command})

                tg.start_soon(call)
                with anyio.fail_after(20):
                    while len(pids_in(pid_file)) < 3:
                        await anyio.sleep(0.05)
                tg.cancel_scope.cancel()
            assert "result" not in outcome
            pids = pids_in(pid_file)
            gone = await anyio.to_thread.run_sync(lambda: wait_until(lambda: not any(alive(p) for p in pids), 10))
            assert gone, f"still alive after cancel: {[p for p in pids if alive(p)]}"
            after = await c.call_tool("bash", {"command": "echo still serving"})
            assert after.structured_content["output"] == "still serving\n"

    run(scenario())


def answer_with(decision: str | None, seen: list):
    async def callback(context, params):
        seen.append(params)
        if decision is None:
            return ElicitResult(action="decline")
        return ElicitResult(action="accept", content={"decision": decision})

    return callback


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("decision", ["allow_once", None])
def test_sdk_receives_approval_requests(ask_server, mode, decision):
    marker = ask_server.workspace / f"marker-{mode}-{decision}"
    seen: list = []

    async def scenario():
        async with client(ask_server.url, mode, elicitation_callback=answer_with(decision, seen)) as c:
            return await c.call_tool("bash", {"command": f"echo approved > {marker.name}; echo done"})

    result = run(scenario())
    assert len(seen) == 1
    assert "bash" in seen[0].message and marker.name in seen[0].message
    request = seen[0].meta["peon/approval"]
    assert request["tool"] == "bash" and request["risk"] == "process" and marker.name in request["canonical_input"]
    if decision == "allow_once":
        assert not result.is_error and result.structured_content["output"] == "done\n"
        assert marker.read_text() == "approved\n"
    else:
        assert result.is_error and result.meta["peon/error"]["code"] == "denied"
        assert not marker.exists()


@pytest.mark.parametrize("mode", MODES)
def test_sdk_without_elicitation_is_denied(ask_server, mode):
    async def scenario():
        async with client(ask_server.url, mode) as c:
            return await c.call_tool("bash", {"command": "touch never"})

    result = run(scenario())
    assert result.is_error and result.meta["peon/error"]["code"] == "denied"
    assert not (ask_server.workspace / "never").exists()


@pytest.mark.parametrize("mode", MODES)
def test_sdk_progress(allow_server, mode):
    updates = []

    async def on_progress(progress, total, message):
        updates.append((progress, message))

    async def scenario():
        async with client(allow_server.url, mode) as c:
            return await c.call_tool("bash", {"command": "echo tick; sleep 1.2; echo tock"},
                                     progress_callback=on_progress)

    assert run(scenario()).structured_content["exit_code"] == 0
    values = [value for value, _ in updates]
    assert len(values) >= 2 and values == sorted(set(values)), updates


# -- the wire: streams, keep-alives, cancellation ------------------------------------------------------


def test_long_call_stream_carries_keepalives_and_progress(allow_server):
    stream = SseReader(allow_server.port, modern_request(1, "tools/call", {
        "name": "bash", "arguments": {"command": "sleep 1.2; echo done"}}, meta={"progressToken": "p"}),
        modern_headers("tools/call", "bash"))
    assert stream.status == 200 and stream.headers["content-type"].startswith("text/event-stream")
    assert stream.headers["x-accel-buffering"] == "no"
    messages = []
    while (message := stream.next_message()) is not None:
        messages.append(message)
    stream.close()
    assert stream.comments >= 2, "keep-alive comments every 0.2 s while the call runs"
    assert any(m.get("method") == "notifications/progress" for m in messages)
    final = messages[-1]
    assert final["id"] == 1 and final["result"]["structuredContent"]["output"] == "done\n"


@pytest.mark.parametrize("era", ["modern", "handshake"])
def test_closing_the_stream_cancels_the_call(allow_server, era):
    pid_file = allow_server.workspace / f"hangup-{era}"
    command = f"sleep 300 & echo $! >> {pid_file}; echo $$ >> {pid_file}; wait"
    if era == "modern":
        stream = SseReader(allow_server.port, modern_request(7, "tools/call", {
            "name": "bash", "arguments": {"command": command}}), modern_headers("tools/call", "bash"))
    else:
        session = initialize(allow_server.port)
        stream = SseReader(allow_server.port, {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "bash", "arguments": {"command": command}}}, {"mcp-session-id": session})
    assert wait_until(lambda: len(pids_in(pid_file)) == 2, 20)
    if era == "modern":
        assert stream.status == 200  # hang up after the stream started; the other era before its first byte
    stream.close()
    pids = pids_in(pid_file)
    assert wait_until(lambda: not any(alive(p) for p in pids), 10), f"still alive: {[p for p in pids if alive(p)]}"
    status, _, body = modern_post(allow_server.port, 8, "tools/call",
                                  {"name": "bash", "arguments": {"command": "echo next"}})
    assert status == 200 and final_message(body)["result"]["structuredContent"]["output"] == "next\n"


def test_notifications_cancelled_ends_the_stream_without_an_answer(allow_server):
    session = initialize(allow_server.port)
    pid_file = allow_server.workspace / "notified"
    stream = SseReader(allow_server.port, {"jsonrpc": "2.0", "id": "c1", "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": f"echo $$ > {pid_file}; sleep 300"}}}, {"mcp-session-id": session})
    assert wait_until(lambda: pids_in(pid_file), 20)
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "c1", "reason": "user"}}
    status, _, _ = post(allow_server.port, cancel, {"mcp-session-id": session})
    assert status == 202
    messages = []
    while (message := stream.next_message()) is not None:
        messages.append(message)
    stream.close()
    assert not [m for m in messages if m.get("id") == "c1"], "a cancelled request gets no response"
    assert not alive(pids_in(pid_file)[0])


# -- the wire: bad requests get a status and a JSON-RPC error ------------------------------------------


def error_of(body: bytes) -> dict:
    return json.loads(body)["error"]


def final_message(body: bytes) -> dict:
    """The answer in a JSON body or at the end of an SSE body."""
    messages = sse_messages(body)
    return messages[-1] if messages else json.loads(body)


@pytest.mark.parametrize("case, status, code", [
    ("not json", 400, -32700),
    ("batch", 400, -32600),
    ("no envelope, no session", 400, -32600),
    ("unknown session", 404, -32600),
    ("modern unknown method", 404, -32601),
    ("modern header mismatch", 400, -32020),
    ("modern missing Mcp-Name", 400, -32020),
    ("modern unsupported version", 400, -32022),
    ("modern unknown tool", 400, -32602),
    ("modern response posted", 400, -32600),
    ("bad idempotency key", 400, -32602),
])
def test_bad_requests_get_a_status_and_a_jsonrpc_error(allow_server, case, status, code):
    port = allow_server.port
    call = {"name": "bash", "arguments": {"command": "true"}}
    if case == "not json":
        got = post(port, None, raw=b"{nope")
    elif case == "batch":
        got = post(port, [modern_request(1, "tools/list")], modern_headers("tools/list"))
    elif case == "no envelope, no session":
        got = post(port, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    elif case == "unknown session":
        got = post(port, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, {"mcp-session-id": "nope"})
    elif case == "modern unknown method":
        got = modern_post(port, 1, "sampling/createMessage")
    elif case == "modern header mismatch":
        got = post(port, modern_request(1, "tools/call", call), modern_headers("tools/call", "read"))
    elif case == "modern missing Mcp-Name":
        got = post(port, modern_request(1, "tools/call", call), modern_headers("tools/call"))
    elif case == "modern unsupported version":
        body = modern_request(1, "tools/list")
        body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2030-01-01"
        got = post(port, body, {"mcp-protocol-version": "2030-01-01", "mcp-method": "tools/list"})
    elif case == "modern unknown tool":
        got = modern_post(port, 1, "tools/call", {"name": "nope", "arguments": {}})
    elif case == "modern response posted":
        got = post(port, {"jsonrpc": "2.0", "id": 1, "result": {}}, {"mcp-protocol-version": MODERN})
    else:
        got = modern_post(port, 1, "tools/call", call, meta={"peon/idempotencyKey": "has space"})
    assert (got[0], error_of(got[2])["code"]) == (status, code), got
    assert "Traceback" not in got[2].decode()


def test_http_level_refusals(allow_server):
    port = allow_server.port
    assert post(port, None, raw=b"x" * 70000)[0] == 413
    assert post(port, modern_request(1, "tools/list"), {"content-type": "text/plain"})[0] == 415
    assert post(port, modern_request(1, "tools/list"), {"accept": "application/json"})[0] == 406
    status, headers, _ = allow_server.server.get("/mcp")
    assert status == 405 and "POST" in headers["allow"]
    session = initialize(port)
    bad_version = post(port, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                       {"mcp-session-id": session, "mcp-protocol-version": "1999-01-01"})
    assert bad_version[0] == 400
    listed = post(port, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
                  {"mcp-session-id": session, "mcp-protocol-version": HANDSHAKE})
    assert listed[0] == 200 and json.loads(listed[2])["result"]["tools"]
    conn_delete = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn_delete.request("DELETE", "/mcp", headers={"mcp-session-id": session})
    assert conn_delete.getresponse().status == 204
    conn_delete.close()
    assert post(port, {"jsonrpc": "2.0", "id": 4, "method": "tools/list"}, {"mcp-session-id": session})[0] == 404


def test_dns_rebinding_is_refused(allow_server):
    port = allow_server.port
    evil = post(port, modern_request(1, "tools/list"), {**modern_headers("tools/list"), "host": "evil.example.com"})
    assert evil[0] == 421 and error_of(evil[2])["code"] == -32600
    origin = post(port, modern_request(1, "tools/list"), {**modern_headers("tools/list"),
                                                          "origin": "http://evil.example.com"})
    assert origin[0] == 403 and "Origin" in error_of(origin[2])["message"]
    local = post(port, modern_request(1, "tools/list"), {**modern_headers("tools/list"),
                                                         "host": f"localhost:{port}", "origin": f"http://localhost:{port}"})
    assert local[0] == 200


# -- idempotency ---------------------------------------------------------------------------------------


def test_a_retried_call_runs_once(allow_server):
    counter = allow_server.workspace / "counted"
    call = {"name": "bash", "arguments": {"command": f"echo run >> {counter.name}; cat {counter.name} | wc -l"}}
    meta = {"peon/idempotencyKey": "retry-1"}
    first = modern_post(allow_server.port, 1, "tools/call", call, meta=meta)
    second = modern_post(allow_server.port, 2, "tools/call", call, meta=meta)
    one, two = final_message(first[2]), final_message(second[2])
    assert one["result"]["structuredContent"] == two["result"]["structuredContent"]
    assert two["id"] == 2 and two["result"]["_meta"]["peon/idempotentReplay"] is True
    assert counter.read_text() == "run\n", "the retry must not run the command again"
    other = modern_post(allow_server.port, 3, "tools/call", {**call, "arguments": {"command": "true"}}, meta=meta)
    assert other[0] == 400 and "different call" in error_of(other[2])["message"]


def test_a_retry_while_the_call_runs_waits_for_it(allow_server):
    counter = allow_server.workspace / "concurrent"
    call = {"name": "bash", "arguments": {"command": f"echo run >> {counter.name}; sleep 1; echo finished"}}
    meta = {"peon/idempotencyKey": "retry-2"}
    answers = {}

    def send(request_id):
        answers[request_id] = modern_post(allow_server.port, request_id, "tools/call", call, meta=meta)

    first = threading.Thread(target=send, args=(1,))
    first.start()
    assert wait_until(lambda: counter.exists(), 20)
    send(2)
    first.join(30)
    results = {i: final_message(answers[i][2]) for i in (1, 2)}
    assert results[1]["result"]["structuredContent"]["output"] == "finished\n"
    assert results[2]["result"]["structuredContent"] == results[1]["result"]["structuredContent"]
    assert counter.read_text() == "run\n"


# -- authentication, probes, metrics -------------------------------------------------------------------


def test_bearer_token(token_server):
    port = token_server.port
    missing = post(port, modern_request(1, "tools/list"), modern_headers("tools/list"))
    assert missing[0] == 401 and missing[1]["www-authenticate"].startswith("Bearer")
    assert error_of(missing[2])["data"] == {"code": "unauthorized"}
    wrong = post(port, modern_request(1, "tools/list"), {**modern_headers("tools/list"),
                                                         "authorization": "Bearer not-the-token"})
    assert wrong[0] == 401 and TOKEN not in wrong[2].decode()
    right = post(port, modern_request(1, "tools/list"), {**modern_headers("tools/list"),
                                                         "authorization": f"Bearer {TOKEN}"})
    assert right[0] == 200
    assert token_server.server.get("/healthz")[0] == 200
    assert token_server.server.get("/readyz")[0] == 200
    assert token_server.server.get("/metrics")[0] == 401
    assert TOKEN not in token_server.server.log()


def bash_calls_ended(server) -> float:
    """How many bash calls the server has counted as ended, whatever their outcome."""
    text = server.get("/metrics", {"authorization": f"Bearer {TOKEN}"})[2].decode()
    return sum(value for (name, labels), value in metric_values(text).items()
               if name == "peon_calls_total" and dict(labels).get("tool") == "bash")


def test_concurrent_requests_are_bounded(token_server):
    auth = {"authorization": f"Bearer {TOKEN}"}
    ended = bash_calls_ended(token_server.server)
    call = modern_request(1, "tools/call", {"name": "bash", "arguments": {"command": "sleep 300"}})
    streams = [SseReader(token_server.port, call, {**modern_headers("tools/call", "bash"), **auth}) for _ in range(2)]
    try:
        refused = modern_post(token_server.port, 2, "tools/list", headers=auth)
        assert refused[0] == 503 and error_of(refused[2])["data"] == {"code": "busy"}
        assert token_server.server.get("/healthz")[0] == 200, "probes are always answered"
    finally:
        for stream in streams:
            stream.close()
    assert wait_until(lambda: modern_post(token_server.port, 3, "tools/list", headers=auth)[0] == 200, 20)
    # The two calls end with their requests (the client went away), each counted once it has ended.
    assert wait_until(lambda: bash_calls_ended(token_server.server) == ended + 2, 30)


def test_the_token_does_not_reach_commands(token_server):
    status, headers, body = modern_post(token_server.port, 1, "tools/call", {"name": "bash", "arguments": {
        "command": "env"}}, headers={"authorization": f"Bearer {TOKEN}"})
    assert headers["content-type"] == "application/json", "a call done within the keep-alive interval is plain JSON"
    output = final_message(body)["result"]["structuredContent"]["output"]
    assert status == 200 and "PEON_TEST_TAG" in output and TOKEN not in output and "PEON_SERVE_TOKEN" not in output


def metric_values(text: str) -> dict[tuple, float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_metrics_expose_the_counters(token_server):
    auth = {"authorization": f"Bearer {TOKEN}"}
    status, headers, body = token_server.server.get("/metrics", auth)
    assert status == 200 and headers["content-type"].startswith("text/plain")
    before = metric_values(body.decode())
    # Only the second call is meant to reach its deadline (a loaded machine may take a while to start bash).
    for command, timeout in (("true", 60), ("sleep 5", 1)):
        modern_post(token_server.port, 1, "tools/call", {"name": "bash", "arguments": {
            "command": command, "timeout_seconds": timeout}}, headers=auth)
    modern_post(token_server.port, 2, "tools/call", {"name": "read", "arguments": {"path": "nope"}}, headers=auth)
    text = token_server.server.get("/metrics", auth)[2].decode()
    after = metric_values(text)

    def grew(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert grew("peon_calls_total", tool="bash", outcome="ok") == 2
    assert grew("peon_calls_total", tool="read", outcome="not_found") == 1
    assert grew("peon_process_kills_total", reason="deadline") == 1
    assert grew("peon_limits_hit_total", limit="deadline") == 1
    assert grew("peon_call_duration_seconds_count", tool="bash") == 2
    assert after[("peon_queue_depth", ())] == 0
    assert ("peon_worker_failures_total", (("kind", "worker_crashed"),)) in after
    assert ("peon_approval_wait_seconds_count", ()) in after
    assert grew("peon_http_requests_total", endpoint="/mcp", status="200") >= 3
    containment = [key for key in after if key[0] == "peon_containment_info"]
    assert len(containment) == 1 and dict(containment[0][1])["kind"] in ("cgroup", "process-tree")


def test_non_loopback_without_token_is_refused(env, workspace):
    done = subprocess.run([sys.executable, "-m", "peon.cli", "serve", "-w", str(workspace), "--host", "0.0.0.0",
                           "--port", "0"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "not a loopback address" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1


# -- life cycle ----------------------------------------------------------------------------------------


def test_sigterm_drains_and_exits_cleanly(env, workspace, tmp_path, leftovers):
    state = tmp_path / "state"
    server = ServeProcess(workspace, env, tmp_path, "--allow", "process", "--log-format", "json",
                          "--drain-seconds", "1", "--state-dir", str(state))
    pid_file = workspace / "pids"
    stream = SseReader(server.port, modern_request(1, "tools/call", {
        "name": "bash", "arguments": {"command": f"sleep 300 & echo $! >> {pid_file}; echo $$ >> {pid_file}; wait"}}),
        modern_headers("tools/call", "bash"))
    assert wait_until(lambda: len(pids_in(pid_file)) == 2, 20)
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    assert wait_until(lambda: server.get("/readyz")[0] == 503, 5), "draining must make /readyz fail"
    final = None
    while (message := stream.next_message()) is not None:
        final = message
    stream.close()
    assert server.proc.wait(10) == 0
    elapsed = time.monotonic() - started
    assert elapsed < 10, elapsed
    assert final is not None and final["result"]["structuredContent"]["cancelled"] is True
    assert not leftovers.alive(), "nothing of the session may outlive the server"
    records = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    events = [r.get("event") for r in records]
    assert "draining" in events and "closed" in events
    assert all({"ts", "level", "message"} <= set(r) for r in records)
    assert any(r.get("mcp_method") == "tools/call" and r.get("status") == 200 for r in records)
    audit = [json.loads(line) for line in (state / "audit.jsonl").read_text().splitlines()]
    assert any(r.get("tool") == "bash" and "sleep 300" in json.dumps(r) for r in audit), "the audit log was flushed"
    server.stop()


def test_a_dead_supervisor_is_replaced(env, workspace, tmp_path):
    server = ServeProcess(workspace, env, tmp_path, "--allow", "process")
    try:
        first = final_message(modern_post(server.port, 1, "tools/call", {"name": "bash", "arguments": {
            "command": "true"}})[2])
        assert first["result"]["isError"] is False
        children = psutil.Process(server.proc.pid).children()
        supervisor = [c for c in children if "peon-supervisor" in " ".join(c.cmdline())]
        assert len(supervisor) == 1
        supervisor[0].kill()
        supervisor[0].wait(10)
        server.wait_ready()  # only once the server noticed and started a fresh supervisor
        again = modern_post(server.port, 2, "tools/call", {"name": "bash", "arguments": {"command": "echo back"}})
        assert final_message(again[2])["result"]["structuredContent"]["output"] == "back\n"
        assert b"peon_supervisor_restarts_total 1.0" in server.get("/metrics")[2]
    finally:
        assert server.stop() == 0


def test_a_read_only_cgroup_hierarchy_is_reported(env, workspace, tmp_path):
    """A pod's usual /sys/fs/cgroup is read-only: the server says it fell back to process-tree, and why."""
    from peon.workers import cgroup

    mount = cgroup.cgroup2_mount()
    if mount is None or os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root, unshare(1) and a cgroup2 mount to make read-only in a private mount namespace")
    wrapper = ("unshare", "--mount", "--propagation", "private", "sh", "-c",
               f'mount -o remount,bind,ro "{mount}" && exec "$@"', "sh")
    server = ServeProcess(workspace, env, tmp_path, "--allow", "process", "--log-format", "json", prefix=wrapper)
    try:
        text = server.get("/metrics")[2].decode()
        assert 'peon_containment_info{kind="process-tree"' in text, text
        ready = next(json.loads(line) for line in server.log().splitlines() if '"event": "ready"' in line)
        assert ready["containment"] == "process-tree" and "Read-only file system" in ready["containment_detail"]
        assert "sandbox" in ready and isinstance(ready["sandbox_not_enforced"], list)  # what the sandbox enforces
        done = final_message(modern_post(server.port, 1, "tools/call", {"name": "bash", "arguments": {
            "command": "sleep 300 & echo started"}})[2])
        assert done["result"]["structuredContent"]["output"] == "started\n"
    finally:
        assert server.stop() == 0


def test_peon_mcp_does_not_load_the_http_stack():
    code = ("import sys; from peon.cli import main as cli; cli.build_parser(); import peon.mcp.stdio; "
            "loaded = [m for m in ('starlette', 'uvicorn', 'prometheus_client', 'peon.serve.app', 'mcp') "
            "if m in sys.modules]; print(loaded); sys.exit(1 if loaded else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_missing_serve_extra_is_one_sentence(env, workspace, tmp_path):
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "uvicorn.py").write_text("raise ImportError('blocked', name='uvicorn')\n")
    done = subprocess.run([sys.executable, "-m", "peon.cli", "serve", "-w", str(workspace)],
                          env={**env, "PYTHONPATH": str(blocker)}, capture_output=True, text=True, timeout=60)
    from peon.client.install_hint import extra_command

    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert extra_command("serve") in done.stderr  # this Peon's own source, as a command to paste

