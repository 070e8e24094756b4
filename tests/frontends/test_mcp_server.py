"""``peon mcp`` as a subprocess, driven by the official MCP Python SDK client and by raw JSON lines.

Both protocol eras are exercised: ``mode="legacy"`` makes the SDK use the ``initialize`` handshake and
``mode="auto"`` makes it probe ``server/discover`` and speak the stateless 2026-07-28 revision.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitResult

from helpers import living, pids_in, wait_for, written
from helpers.mcp import MODES, client, error_code, isolated_env, raw_error_code, run, server_command, write_config

ERA = {"legacy": "2025-11-25", "auto": "2026-07-28"}
SERIAL = "[limits]\nmax_parallel_calls = 1\n"  # calls one at a time, in arrival order


def alive(pid: int) -> bool:
    return bool(living([pid]))


# -- the SDK client ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_lists_tools_with_schemas_and_annotations(workspace, env, mode):
    async def scenario():
        async with client(workspace, env, mode=mode) as c:
            assert c.protocol_version == ERA[mode]
            assert c.server_info is None or c.server_info.name == "peon"
            listed = await c.list_tools()
            tools = {t.name: t for t in listed.tools}
            assert listed.next_cursor is None
            bash = tools["bash"]
            assert bash.input_schema["required"] == ["command"]
            assert bash.output_schema["properties"]["exit_code"]
            hints = bash.annotations
            assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint, hints.open_world_hint) == \
                (False, True, False, True)
            return set(tools)

    names = run(scenario())
    assert "bash" in names


@pytest.mark.parametrize("mode", MODES)
def test_bash_results(workspace, env, mode):
    async def scenario():
        async with client(workspace, env, "--allow", "process", mode=mode) as c:
            ok = await c.call_tool("bash", {"command": "echo hello"})
            assert not ok.is_error
            assert ok.structured_content["exit_code"] == 0 and ok.structured_content["output"] == "hello\n"
            assert json.loads(ok.content[0].text) == ok.structured_content

            failed = await c.call_tool("bash", {"command": "echo out; echo err >&2; exit 3"})
            assert not failed.is_error  # a non-zero exit is a normal result with its flags
            assert failed.structured_content["exit_code"] == 3
            assert failed.structured_content["output"] == "out\nerr\n"

            slow = await c.call_tool("bash", {"command": "sleep 30", "timeout_seconds": 0.5})
            assert not slow.is_error
            assert slow.structured_content["timed_out"] is True and slow.structured_content["signal"] == "SIGKILL"

            invalid = await c.call_tool("bash", {"command": 7})
            assert error_code(invalid) == "invalid_input"

            with pytest.raises(MCPError) as unknown:
                await c.call_tool("no_such_tool", {})
            assert unknown.value.code == -32602

    run(scenario())


def test_every_tool_validates_its_input_through_mcp(workspace, env):
    async def scenario():
        async with client(workspace, env, *[f"--allow={r}" for r in ("filesystem", "process", "delegate")]) as c:
            tools = (await c.list_tools()).tools
            for tool in tools:
                result = await c.call_tool(tool.name, {"__unknown_field__": 1})
                assert error_code(result) == "invalid_input", (tool.name, result)
            return [t.name for t in tools]

    assert run(scenario())


def test_write_then_read(workspace, env):
    async def scenario():
        async with client(workspace, env, "--allow", "filesystem") as c:
            written = await c.call_tool("write", {"path": "a.txt", "content": "héllo\n", "mode": "create"})
            assert not written.is_error, written
            read = await c.call_tool("read", {"path": "a.txt"})
            assert not read.is_error, read
            assert "héllo" in json.dumps(read.structured_content, ensure_ascii=False)
            escape = await c.call_tool("read", {"path": "../outside"})
            assert escape.is_error

    run(scenario())


@pytest.mark.parametrize("mode", MODES)
def test_denied_call_is_an_error_result(workspace, env, tmp_path, mode):
    config = write_config(tmp_path, '[approval]\nprocess = "deny"\n')

    async def scenario():
        async with client(workspace, env, "--config", config, mode=mode) as c:
            result = await c.call_tool("bash", {"command": "touch ran"})
            assert error_code(result) == "denied"

    run(scenario())
    assert not (workspace / "ran").exists()


@pytest.mark.parametrize("mode", MODES)
def test_cancelled_call_kills_its_processes(workspace, env, mode):
    pid_file = workspace / "pids"
    command = (f"sleep 300 & echo $! >> {pid_file}; (sleep 300 & echo $! >> {pid_file}; wait) & "
               f"echo $$ >> {pid_file}; wait")

    async def scenario():
        async with client(workspace, env, "--allow", "process", mode=mode) as c:
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
            gone = await anyio.to_thread.run_sync(lambda: wait_for(lambda: not any(alive(p) for p in pids), 10))
            assert gone, f"still alive after cancel: {[p for p in pids if alive(p)]}"
            after = await c.call_tool("bash", {"command": "echo still serving"})
            assert after.structured_content["output"] == "still serving\n"

    run(scenario())


@pytest.mark.parametrize("mode", MODES)
def test_progress_stream(workspace, env, mode):
    updates = []

    async def on_progress(progress, total, message):
        updates.append((progress, message))

    async def scenario():
        async with client(workspace, env, "--allow", "process", mode=mode) as c:
            result = await c.call_tool("bash", {"command": "for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.4; done"},
                                       progress_callback=on_progress)
            assert not result.is_error and result.structured_content["exit_code"] == 0

    run(scenario())
    assert len(updates) >= 2, updates
    values = [value for value, _ in updates]
    assert values == sorted(set(values)), f"progress must strictly increase: {values}"
    assert all("running for" in message for _, message in updates)
    assert any(re.search(r"[1-9]\d* bytes of output", message) for _, message in updates), updates


def elicitation_answer(decision: str | None, seen: list):
    async def callback(context, params):
        seen.append(params)
        if decision is None:
            return ElicitResult(action="decline")
        return ElicitResult(action="accept", content={"decision": decision})

    return callback


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("decision", ["allow_once", "deny", None])
def test_elicitation_round_trip(workspace, env, tmp_path, mode, decision):
    config = write_config(tmp_path, '[approval]\nprocess = "ask"\n')
    seen = []

    async def scenario():
        async with client(workspace, env, "--config", config, mode=mode,
                          elicitation_callback=elicitation_answer(decision, seen)) as c:
            return await c.call_tool("bash", {"command": "echo approved > marker; echo done"})

    result = run(scenario())
    assert len(seen) == 1
    message = seen[0].message
    assert "bash" in message and "process" in message and "echo approved > marker" in message
    schema = seen[0].requested_schema
    assert schema["required"] == ["decision"]
    if decision == "allow_once":
        assert not result.is_error and result.structured_content["output"] == "done\n"
        assert (workspace / "marker").read_text() == "approved\n"
    else:
        assert error_code(result) == "denied"
        assert not (workspace / "marker").exists()


@pytest.mark.parametrize("mode", MODES)
def test_ask_without_elicitation_capability_is_denied(workspace, env, tmp_path, mode):
    config = write_config(tmp_path, '[approval]\nprocess = "ask"\n')

    async def scenario():
        async with client(workspace, env, "--config", config, mode=mode) as c:
            return await c.call_tool("bash", {"command": "touch ran"})

    result = run(scenario())
    assert error_code(result) == "denied"
    assert not (workspace / "ran").exists()


@pytest.mark.parametrize("mode", MODES)
def test_allow_for_this_session_is_asked_once(workspace, env, tmp_path, mode):
    config = write_config(tmp_path, '[approval]\nprocess = "ask"\n')
    seen = []

    async def answer(context, params):
        seen.append(params)
        return ElicitResult(action="accept", content={"decision": "allow_session", "scope": "tool"})

    async def scenario():
        async with client(workspace, env, "--config", config, mode=mode, elicitation_callback=answer) as c:
            first = await c.call_tool("bash", {"command": "echo one"})
            second = await c.call_tool("bash", {"command": "echo two"})
            return first, second

    first, second = run(scenario())
    assert first.structured_content["output"] == "one\n" and second.structured_content["output"] == "two\n"
    assert len(seen) == 1, "a session grant for the tool must not ask again"


def test_cancel_while_the_user_is_asked(workspace, env, tmp_path):
    config = write_config(tmp_path, '[approval]\nprocess = "ask"\n')
    asked, released = anyio.Event(), []

    async def never_answers(context, params):
        if asked.is_set():  # later calls are allowed
            return ElicitResult(action="accept", content={"decision": "allow_once"})
        asked.set()
        try:
            await anyio.sleep_forever()
        finally:
            released.append(True)  # the server withdrew its question (notifications/cancelled)

    async def scenario():
        async with client(workspace, env, "--config", config,
                          elicitation_callback=never_answers) as c:
            async with anyio.create_task_group() as tg:
                tg.start_soon(c.call_tool, "bash", {"command": "touch ran"})
                with anyio.fail_after(20):
                    await asked.wait()
                tg.cancel_scope.cancel()
            with anyio.fail_after(10):
                while not released:
                    await anyio.sleep(0.05)
            # The queue moved on: the cancelled call did not hold the session until the approval timeout.
            with anyio.fail_after(20):
                return await c.call_tool("bash", {"command": "echo next"})

    after = run(scenario())
    assert after.structured_content["output"] == "next\n"
    assert not (workspace / "ran").exists()


# -- raw JSON lines ------------------------------------------------------------------------------------


def test_malformed_line_then_keeps_serving(raw_server):
    server = raw_server()
    server.send(b"{this is not json")
    error = server.recv()
    assert error["id"] is None and error["error"]["code"] == -32700
    server.send(b'{"jsonrpc":"2.0","id":"x","method":5}')
    assert server.recv()["error"]["code"] == -32600
    assert server.initialize()["result"]["protocolVersion"] == "2025-11-25"
    server.request(2, "tools/list")
    assert any(t["name"] == "bash" for t in server.recv()["result"]["tools"])


def test_oversize_line_is_refused_without_being_held(raw_server, tmp_path):
    config = write_config(tmp_path, "[limits]\nmax_input_bytes = 4096\n")
    server = raw_server("--config", config)
    server.initialize()
    huge = b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"pad":"' + b"x" * (2 << 20) + b'"}}'
    server.send(huge)
    error = server.recv()
    assert error["id"] is None and error["error"]["code"] == -32600 and "exceeds the limit" in error["error"]["message"]
    server.request(10, "ping")
    assert server.recv() == {"jsonrpc": "2.0", "id": 10, "result": {}}


STRAY_OUTPUT_SERVER = """
import os, sys
import peon
from peon.mcp.protocol import ServerIdentity
from peon.mcp.stdio import serve

def open_session(approver):
    print("a stray print")
    os.write(1, b"stray bytes on file descriptor 1\\n")
    os.system("echo a child writing to its stdout")
    return peon.Session(sys.argv[1], {"approval": {"process": "allow"}}, approver=approver)

sys.exit(serve(open_session, ServerIdentity()))
"""


def test_stray_output_never_reaches_the_protocol_stream(raw_server, workspace):
    server = raw_server(command=[sys.executable, "-c", STRAY_OUTPUT_SERVER, str(workspace)])
    assert server.initialize()["result"]["serverInfo"]["name"] == "peon"
    server.request(2, "tools/call", {"name": "bash", "arguments": {"command": "echo from bash"}})
    assert server.recv()["result"]["structuredContent"]["output"] == "from bash\n"
    assert server.close() == 0  # close() also fails the test if stdout carried anything but JSON-RPC
    stderr = server.stderr_path.read_text()
    for stray in ("a stray print", "stray bytes on file descriptor 1", "a child writing to its stdout"):
        assert stray in stderr


GATED_SERVER = """
import sys, time
import peon
from peon.core.errors import ConfigError
from peon.mcp.protocol import ServerIdentity
from peon.mcp.stdio import serve

workspace, gate, outcome = sys.argv[1:4]

def open_session(approver):
    deadline = time.monotonic() + 60
    while not __import__("os").path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)  # the session starts only once the test opens the gate
    if outcome == "fail":
        raise ConfigError("limits.max_input_bytes must be an integer, got 'many'")
    return peon.Session(workspace, {"approval": {"process": "allow"}, "limits": {"max_input_bytes": 4096}},
                        approver=approver)

try:
    sys.exit(serve(open_session, ServerIdentity()))
except ConfigError as exc:  # raised once stdin closes, as peon mcp reports it
    print(f"peon: {exc.message}", file=sys.stderr)
    sys.exit(2)
"""


def gated_server(raw_server, workspace, tmp_path, outcome: str):
    script, gate = tmp_path / "gated.py", tmp_path / "gate"
    script.write_text(GATED_SERVER)
    return raw_server(command=[sys.executable, str(script), str(workspace), str(gate), outcome]), gate


def test_initialize_is_answered_while_the_session_starts(raw_server, workspace, tmp_path):
    """What does not need the session is answered at once; what does waits for it, in arrival order;
    a call cancelled while it waits is never submitted; a long line waits to be judged by the session's bound."""
    server, gate = gated_server(raw_server, workspace, tmp_path, "ok")
    assert server.initialize()["result"]["serverInfo"]["name"] == "peon"  # the session is not up: the gate is shut
    server.request(1, "ping")
    assert server.recv() == {"jsonrpc": "2.0", "id": 1, "result": {}}
    server.request(2, "tools/list")
    server.request(3, "tools/call", {"name": "bash", "arguments": {"command": "touch cancelled-ran"}})
    server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}})
    server.request(4, "ping")  # waits behind the tools/list, so answers keep their order

    def long_line_then_a_call() -> None:  # the server stops reading in the long line until the session is up
        server.send(b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"pad":"' + b"x" * (2 << 20) + b'"}}')
        server.request(6, "tools/call", {"name": "bash", "arguments": {"command": "echo up"}})

    writer = threading.Thread(target=long_line_then_a_call, daemon=True)
    writer.start()
    assert server.messages.empty()
    gate.touch()
    listed = server.recv()
    assert listed["id"] == 2 and any(t["name"] == "bash" for t in listed["result"]["tools"])
    assert server.recv() == {"jsonrpc": "2.0", "id": 4, "result": {}}
    oversize = server.recv()  # the session's bound is 4096 + 1 MiB: a 2 MiB line is refused, not answered
    assert oversize["id"] is None and "exceeds the limit" in oversize["error"]["message"], oversize
    called = server.recv()
    assert called["id"] == 6 and called["result"]["structuredContent"]["output"] == "up\n", called
    writer.join(10)
    assert not (workspace / "cancelled-ran").exists()


def test_what_waited_is_answered_when_stdin_closes_before_the_session_is_up(raw_server, workspace, tmp_path):
    """A client that pipes its requests and closes stdin gets the answers that need no call; the call
    that waited is cancelled with the rest of the session, so it never runs."""
    server, gate = gated_server(raw_server, workspace, tmp_path, "ok")
    assert server.initialize()["result"]["serverInfo"]["name"] == "peon"
    server.request(2, "tools/list")
    server.request(3, "tools/call", {"name": "bash", "arguments": {"command": "touch call-ran"}})
    server.request(4, "ping")
    server.proc.stdin.close()
    gate.touch()
    listed = server.recv()
    assert listed["id"] == 2 and any(t["name"] == "read" for t in listed["result"]["tools"]), listed
    assert server.recv() == {"jsonrpc": "2.0", "id": 4, "result": {}}
    assert server.messages.get(timeout=30) is None  # and nothing for the call: stdout closes
    assert server.proc.wait(30) == 0
    assert not (workspace / "call-ran").exists()


def test_a_session_that_cannot_start_answers_what_waited(raw_server, workspace, tmp_path):
    server, gate = gated_server(raw_server, workspace, tmp_path, "fail")
    assert server.initialize()["result"]["protocolVersion"] == "2025-11-25"
    server.request(2, "tools/list")
    gate.touch()
    error = server.recv()
    assert error["id"] == 2 and error["error"]["code"] == -32603
    assert "config_invalid" in error["error"]["message"] and "max_input_bytes" in error["error"]["message"]
    server.request(3, "tools/call", {"name": "bash", "arguments": {"command": "true"}})
    assert server.recv()["error"]["message"] == error["error"]["message"]
    server.request(4, "ping")  # the server still speaks the protocol, and says why it cannot serve tools
    assert server.recv() == {"jsonrpc": "2.0", "id": 4, "result": {}}
    server.proc.stdin.close()
    assert server.proc.wait(30) == 2  # at end of input it exits as peon mcp does on a bad configuration
    assert b"max_input_bytes" in server.stderr_path.read_bytes()


def test_request_before_initialize(raw_server):
    server = raw_server()
    server.request(1, "tools/list")
    error = server.recv()
    assert error["id"] == 1 and error["error"]["code"] == -32600 and "initialize" in error["error"]["message"]
    server.request(2, "ping")
    assert server.recv() == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert server.initialize()["result"]["capabilities"]["tools"] == {"listChanged": False}


def test_cancelled_requests_get_no_response_and_queued_calls_never_start(raw_server, workspace, tmp_path):
    server = raw_server("--allow", "process", "--config", write_config(tmp_path, SERIAL))
    server.initialize()
    pid_file = workspace / "pids"
    server.request(10, "tools/call", {"name": "bash", "arguments": {"command": f"echo $$ > {pid_file}; sleep 300"}})
    server.request(11, "tools/call", {"name": "bash", "arguments": {"command": "touch queued-ran"}})
    assert wait_for(lambda: pids_in(pid_file), 20)
    server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 11}})
    server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 10, "reason": "test"}})
    assert wait_for(lambda: not alive(pids_in(pid_file)[0]), 10)
    server.request(12, "tools/call", {"name": "bash", "arguments": {"command": "echo after"}})
    reply = server.recv()
    assert reply["id"] == 12, f"a cancelled request was answered: {reply}"
    assert reply["result"]["structuredContent"]["output"] == "after\n"
    assert not (workspace / "queued-ran").exists()
    server.request(13, "ping")
    assert server.recv()["id"] == 13


def test_concurrent_calls_are_answered_as_they_finish(raw_server, tmp_path):
    server = raw_server("--allow", "process", "--config", write_config(tmp_path, SERIAL))
    server.initialize()
    server.request(1, "tools/call", {"name": "bash", "arguments": {"command": "sleep 1; echo first"}})
    server.request(2, "tools/list")  # answered while the call runs
    assert server.recv(10)["id"] == 2
    server.request(3, "tools/call", {"name": "bash", "arguments": {"command": "echo second"}})
    first, second = server.recv(), server.recv()
    assert (first["id"], second["id"]) == (1, 3)  # serial in the session, in submission order
    assert first["result"]["structuredContent"]["output"] == "first\n"


@pytest.mark.parametrize("how", ["stdin closed", "SIGTERM"])
def test_nothing_survives_the_server(raw_server, workspace, how):
    server = raw_server("--allow", "process")
    server.initialize()
    supervisor = server.supervisor_pid()
    pid_file = workspace / "pids"
    command = (f"echo $$ >> {pid_file}; sleep 300 & echo $! >> {pid_file}; "
               f"setsid sleep 300 & echo $! >> {pid_file}; wait")
    server.request(5, "tools/call", {"name": "bash", "arguments": {"command": command}})
    assert wait_for(lambda: len(pids_in(pid_file)) == 3, 20)
    pids = pids_in(pid_file)
    assert all(alive(p) for p in pids) and alive(supervisor)
    if how == "SIGTERM":
        server.proc.send_signal(signal.SIGTERM)
    else:
        server.proc.stdin.close()
    assert server.proc.wait(30) == 0
    assert not alive(supervisor), "the supervisor outlived the server"
    survivors = [p for p in pids if alive(p)]
    assert not survivors, f"bash processes outlived the server: {survivors}"
    assert b"stopped: " in server.stderr_path.read_bytes()


def test_modern_requests_over_raw_lines(raw_server):
    server = raw_server()
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    server.request("d", "server/discover", {"_meta": meta})
    discovered = server.recv()["result"]
    assert discovered["supportedVersions"] == ["2026-07-28"] and discovered["resultType"] == "complete"
    server.request("old", "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                         "clientInfo": {"name": "x", "version": "1"}})
    assert server.recv()["error"]["code"] == -32022
    server.request("v", "tools/list", {"_meta": {**meta, "io.modelcontextprotocol/protocolVersion": "1999-01-01"}})
    assert server.recv()["error"]["data"]["supported"] == ["2026-07-28"]
    server.request("p", "ping", {"_meta": meta})  # the revision removed ping
    assert server.recv()["error"]["code"] == -32601


LONE = "\ud800"  # json.dumps sends it as the escape "\\ud800", which decodes to a lone surrogate
MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {}}


@pytest.mark.parametrize("era", ["handshake", "modern"])
def test_lone_surrogates_never_stop_the_server_or_the_running_call(raw_server, workspace, era):
    """A lone surrogate in an id, a method, a protocol version, a progress token or a requestState gets a
    JSON-RPC error; the server, the session's supervisor and the call running meanwhile go on."""
    server = raw_server("--allow", "process")
    meta = MODERN_META if era == "modern" else {}
    if era == "handshake":
        server.request(0, "initialize", {"protocolVersion": LONE, "capabilities": {},
                                         "clientInfo": {"name": LONE, "version": "1"}})
        assert server.recv()["result"]["protocolVersion"] == "2025-11-25"
    supervisor = server.supervisor_pid()
    gate, started = workspace / "gate", workspace / "started"
    server.request(1, "tools/call", {"name": "bash", "_meta": meta, "arguments": {
        "command": f"touch {started}; while [ ! -e {gate} ]; do sleep 0.02; done; echo released"}})
    assert wait_for(started.exists, 20)

    call = {"name": "bash", "arguments": {"command": "echo never"}}
    hostile = [  # (message, the id of the error, its code)
        ({"jsonrpc": "2.0", "id": LONE, "method": "ping", "params": {"_meta": meta}}, None, -32600),
        ({"jsonrpc": "2.0", "id": f"x{LONE}", "method": "tools/call", "params": {**call, "_meta": meta}}, None, -32600),
        ({"jsonrpc": "2.0", "id": 2, "method": LONE, "params": {"_meta": meta}}, 2, -32600),
        ({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
          "params": {**call, "_meta": {**meta, "progressToken": LONE}}}, 3, -32602),
        ({"jsonrpc": "2.0", "method": f"notifications/{LONE}"}, None, -32600),
        ({"jsonrpc": "2.0", "id": LONE, "result": {}}, None, -32600),
    ]
    if era == "modern":
        hostile += [
            ({"jsonrpc": "2.0", "id": 4, "method": "tools/list",
              "params": {"_meta": {**meta, "io.modelcontextprotocol/protocolVersion": LONE}}}, 4, -32602),
            ({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
              "params": {**call, "_meta": meta, "requestState": f"peon.{LONE}"}}, 5, -32602),
            ({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
              "params": {**call, "_meta": meta, "requestState": "p\u00e9on.\u00e9"}}, 6, -32602),
        ]
    for message, reply_id, code in hostile:
        server.send(message)
        reply = server.recv()
        assert reply["id"] == reply_id and reply["error"]["code"] == code, (message, reply)
    assert not (workspace / "never").exists()

    gate.touch()
    answer = server.recv()
    assert answer["id"] == 1 and answer["result"]["isError"] is False, answer
    assert answer["result"]["structuredContent"]["output"] == "released\n"
    assert answer["result"]["structuredContent"]["exit_code"] == 0
    server.request(9, "tools/list", {"_meta": meta})
    assert server.recv()["result"]["tools"]
    assert server.supervisor_pid() == supervisor and alive(supervisor)
    assert server.proc.poll() is None
    assert b"Traceback" not in server.stderr_path.read_bytes()


DOCS = Path(__file__).parent.parent.parent / "docs" / "mcp.md"


def test_the_documented_raw_lines_example_gives_the_documented_answer(workspace, leftovers, tmp_path):
    """docs/mcp.md's raw-lines example, run as written: it keeps stdin open until the call is answered."""
    text = DOCS.read_text()
    example = text.split("Raw lines, from bash.", 1)[1]
    script = example.split("```bash\n", 1)[1].split("\n```", 1)[0]
    documented = example.split("```json\n", 1)[1].split("\n```", 1)[0]
    env = isolated_env(leftovers, tmp_path / "home")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # the `peon` of this installation
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env, cwd=workspace)
    assert ran.returncode == 0, ran.stderr

    def measured_as_documented(line: str) -> dict:  # duration_ms is measured; sandbox depends on the machine
        answer = json.loads(re.sub(r'(duration_ms\\?": ?)[0-9.]+', r"\g<1>12", line))
        result = answer["result"]
        assert result["structuredContent"]["sandbox"] == json.loads(result["content"][0]["text"])["sandbox"]
        result["structuredContent"]["sandbox"] = None
        text = json.loads(result["content"][0]["text"])
        result["content"][0]["text"] = json.dumps({**text, "sandbox": None}, indent=2)
        return answer

    assert measured_as_documented(ran.stdout.strip()) == json.loads(documented)


# -- the MCP Inspector ---------------------------------------------------------------------------------


INSPECTOR = Path(__file__).parent.parent / "js" / "node_modules" / ".bin" / "mcp-inspector"


def test_mcp_inspector_cli_smoke(workspace, leftovers, tmp_path):
    """The MCP Inspector's command-line mode (pinned in tests/js, installed by .ci/run; built on the
    TypeScript SDK, so it validates results against the listed outputSchemas)."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed; the MCP Inspector needs Node.js")
    if not INSPECTOR.exists():
        pytest.skip("the pinned MCP Inspector is not installed: run .ci/run (or npm ci --prefix tests/js)")
    env = isolated_env(leftovers, tmp_path / "home")
    base = [str(INSPECTOR), "--cli", *server_command(workspace, "--allow", "process")]

    def inspect(*args: str) -> dict:
        done = subprocess.run([*base, *args], capture_output=True, text=True, timeout=120, env=env, cwd=workspace)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    assert "bash" in [t["name"] for t in inspect("--method", "tools/list")["tools"]]
    called = inspect("--method", "tools/call", "--tool-name", "bash", "--tool-arg", "command=echo inspected")
    assert called["structuredContent"]["output"] == "inspected\n"
    missing = inspect("--method", "tools/call", "--tool-name", "read", "--tool-arg", "path=missing.txt")
    assert raw_error_code(missing) == "not_found"


def test_a_dead_supervisor_is_replaced_before_the_next_call(raw_server, workspace):
    """An unattended agent's MCP server recovers by itself: the call that was running when the
    supervisor died fails clearly (never re-run); the next call gets a fresh supervisor."""
    server = raw_server("--allow", "process")
    server.initialize()
    supervisor = server.supervisor_pid()
    server.request(7, "tools/call", {"name": "bash",
                                     "arguments": {"command": f"echo $$ > {workspace}/r.pid; sleep 300"}})
    assert wait_for(lambda: written(workspace / "r.pid"), 20)
    os.kill(supervisor, signal.SIGKILL)
    reply = server.recv()
    assert reply["id"] == 7 and reply["result"]["isError"] is True
    assert raw_error_code(reply["result"]) == "supervisor_died"
    assert wait_for(lambda: not alive(int((workspace / "r.pid").read_text())), 20)
    server.request(8, "tools/call", {"name": "bash", "arguments": {"command": "echo back"}})
    reply = server.recv()
    assert reply["id"] == 8 and reply["result"]["isError"] is False, reply
    assert reply["result"]["structuredContent"]["output"] == "back\n"
    assert b"session restarted" in server.stderr_path.read_bytes()
