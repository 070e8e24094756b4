"""MCP tasks through `peon mcp`, over raw JSON-RPC lines: 2025-11-25's experimental tasks and 2026-07-28's
tasks extension. A task-augmented call answers at once with its handle, its result is collected through
the tasks methods, a cancel ends it with nothing left, an approval makes it input_required, and a client
that asks for no task gets the plain call."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import living, pids_in, wait_for
from helpers.mcp import RawServer, write_config

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"


def envelope(extension: bool = True, elicitation: bool = False) -> dict:
    capabilities: dict = {"extensions": {TASKS: {}}} if extension else {}
    if elicitation:
        capabilities["elicitation"] = {"form": {}}
    return {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                      "io.modelcontextprotocol/clientCapabilities": capabilities}}


def until(server: RawServer, predicate) -> tuple[dict, list[dict]]:
    """The first message ``predicate`` accepts, and every message before it."""
    before = []
    while True:
        message = server.recv()
        if predicate(message):
            return message, before
        before.append(message)


def answer_of(server: RawServer, request_id) -> tuple[dict, list[dict]]:
    return until(server, lambda m: m.get("id") == request_id and ("result" in m or "error" in m))


def structured(result: dict) -> dict:
    return json.loads(result["content"][0]["text"])


def test_handshake_tasks_answer_at_once_collect_the_result_and_cancel_with_nothing_left(workspace: Path, env: dict,
                                                                                         tmp_path: Path) -> None:
    server = RawServer(workspace, env, tmp_path, "--allow", "process")
    try:
        capabilities = server.initialize()["result"]["capabilities"]
        assert capabilities["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
        server.request(1, "tools/list")
        tools = answer_of(server, 1)[0]["result"]["tools"]
        assert {tool["execution"]["taskSupport"] for tool in tools} == {"optional"}

        server.request(2, "tools/call", {"name": "bash", "arguments": {"command": "sleep 3; echo done"},
                                         "task": {"ttl": 60000}})
        created = answer_of(server, 2)[0]["result"]["task"]
        task_id = created["taskId"]
        assert created["status"] == "working" and created["ttl"] == 60000
        server.request(3, "tasks/get", {"taskId": task_id})
        got, _ = answer_of(server, 3)
        assert got["result"]["status"] == "working"  # answered while the command still ran
        server.request(4, "tasks/result", {"taskId": task_id})
        result, before = answer_of(server, 4)
        assert structured(result["result"])["output"] == "done\n"
        assert result["result"]["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
        notices = [m for m in before if m.get("method") == "notifications/tasks/status"]
        after = [] if notices else [until(server, lambda m: m.get("method") == "notifications/tasks/status")[0]]
        assert [n["params"]["status"] for n in notices + after] == ["completed"]
        server.request(5, "tasks/get", {"taskId": task_id})
        assert answer_of(server, 5)[0]["result"]["status"] == "completed"

        server.request(6, "tools/call", {"name": "bash", "arguments": {"command": "echo $$ > pid; exec sleep 300"},
                                         "task": {}})
        stopped = answer_of(server, 6)[0]["result"]["task"]["taskId"]
        pids = wait_for(lambda: pids_in(workspace / "pid"), 30)
        assert pids and living(pids)
        server.request(7, "tasks/cancel", {"taskId": stopped})
        cancelled = answer_of(server, 7)[0]["result"]
        assert cancelled["taskId"] == stopped and cancelled["status"] == "cancelled"
        server.request(8, "tasks/result", {"taskId": stopped})
        answer_of(server, 8)
        assert wait_for(lambda: not living(pids), 15)
        server.request(9, "tasks/get", {"taskId": stopped})
        assert answer_of(server, 9)[0]["result"]["status"] == "cancelled"
        server.request(10, "tasks/get", {"taskId": "not-a-task"})
        assert answer_of(server, 10)[0]["error"]["code"] == -32602

        # A call that asks for no task is the plain call.
        server.request(11, "tools/call", {"name": "bash", "arguments": {"command": "echo plain"}})
        plain = answer_of(server, 11)[0]["result"]
        assert "task" not in plain and structured(plain)["output"] == "plain\n"
    finally:
        assert server.close() == 0


def test_an_older_revision_gets_no_tasks_and_the_plain_call(workspace: Path, env: dict, tmp_path: Path) -> None:
    server = RawServer(workspace, env, tmp_path, "--allow", "process")
    try:
        server.request(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                         "clientInfo": {"name": "raw", "version": "1"}})
        assert "tasks" not in server.recv()["result"]["capabilities"]
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        server.request(1, "tools/call", {"name": "bash", "arguments": {"command": "echo plain"}, "task": {}})
        plain = answer_of(server, 1)[0]["result"]
        assert "task" not in plain and structured(plain)["output"] == "plain\n"
        server.request(2, "tasks/list")
        assert answer_of(server, 2)[0]["error"]["code"] == -32601
    finally:
        assert server.close() == 0


def test_a_handshake_task_waiting_for_approval_is_input_required(workspace: Path, env: dict, tmp_path: Path) -> None:
    server = RawServer(workspace, env, tmp_path)
    try:
        server.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
                                         "clientInfo": {"name": "raw", "version": "1"}})
        server.recv()
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        server.request(1, "tools/call", {"name": "bash", "arguments": {"command": "echo approved"}, "task": {}})
        task_id = answer_of(server, 1)[0]["result"]["task"]["taskId"]
        question, before = until(server, lambda m: m.get("method") == "elicitation/create")
        assert question["params"]["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
        assert [m["params"]["status"] for m in before if m.get("method") == "notifications/tasks/status"] == \
            ["input_required"]
        server.request(2, "tasks/get", {"taskId": task_id})
        assert answer_of(server, 2)[0]["result"]["status"] == "input_required"
        server.send({"jsonrpc": "2.0", "id": question["id"],
                     "result": {"action": "accept", "content": {"decision": "allow_once"}}})
        server.request(3, "tasks/result", {"taskId": task_id})
        result, before = answer_of(server, 3)
        assert structured(result["result"])["output"] == "approved\n"
        assert [m["params"]["status"] for m in before if m.get("method") == "notifications/tasks/status"] == \
            ["working"]
    finally:
        assert server.close() == 0


def test_modern_tasks_are_the_servers_choice_for_a_client_declaring_the_extension(workspace: Path, env: dict,
                                                                                   tmp_path: Path) -> None:
    server = RawServer(workspace, env, tmp_path, "--allow", "process")
    try:
        server.request(0, "server/discover", envelope())
        assert answer_of(server, 0)[0]["result"]["capabilities"]["extensions"] == {TASKS: {}}
        server.request(1, "tools/call", {"name": "bash", "arguments": {"command": "sleep 3; echo done"}, **envelope()})
        created = answer_of(server, 1)[0]["result"]
        assert created["resultType"] == "task" and created["status"] == "working" and created["ttlMs"] > 0
        task_id = created["taskId"]
        status, polls = "working", 0
        while status == "working":
            polls += 1
            server.request(f"get-{polls}", "tasks/get", {"taskId": task_id, **envelope()})
            got = answer_of(server, f"get-{polls}")[0]["result"]
            assert got["resultType"] == "complete"
            status = got["status"]
            if status == "working":
                wait_for(lambda: False, 0.3)
        assert status == "completed" and structured(got["result"])["output"] == "done\n"
        assert polls > 1  # the first look found it still working

        server.request(2, "tools/call", {"name": "bash", "arguments": {"command": "echo $$ > pid; exec sleep 300"},
                                         **envelope()})
        stopped = answer_of(server, 2)[0]["result"]["taskId"]
        pids = wait_for(lambda: pids_in(workspace / "pid"), 30)
        assert pids and living(pids)
        server.request(3, "tasks/cancel", {"taskId": stopped, **envelope()})
        assert answer_of(server, 3)[0]["result"]["resultType"] == "complete"
        assert wait_for(lambda: not living(pids), 15)

        # A client without the extension, and a call that runs no command, get the plain call.
        server.request(4, "tools/call", {"name": "bash", "arguments": {"command": "echo plain"},
                                         **envelope(extension=False)})
        plain = answer_of(server, 4)[0]["result"]
        assert plain["resultType"] == "complete" and structured(plain)["output"] == "plain\n"
        (workspace / "f.txt").write_text("hello\n")
        server.request(5, "tools/call", {"name": "read", "arguments": {"path": "f.txt"}, **envelope()})
        assert answer_of(server, 5)[0]["result"]["resultType"] == "complete"
        server.request(6, "tasks/list", envelope())
        assert answer_of(server, 6)[0]["error"]["code"] == -32601
    finally:
        assert server.close() == 0


def test_a_modern_task_asks_its_approval_as_an_input_request(workspace: Path, env: dict, tmp_path: Path) -> None:
    server = RawServer(workspace, env, tmp_path)
    try:
        server.request(1, "tools/call", {"name": "bash", "arguments": {"command": "echo approved"},
                                         **envelope(elicitation=True)})
        task_id = answer_of(server, 1)[0]["result"]["taskId"]
        polls = 0

        def poll() -> dict:
            nonlocal polls
            polls += 1
            server.request(f"get-{polls}", "tasks/get", {"taskId": task_id, **envelope(elicitation=True)})
            return answer_of(server, f"get-{polls}")[0]["result"]

        asking = wait_for(lambda: (got := poll())["status"] == "input_required" and got, 30)
        assert asking and asking["inputRequests"]["approval"]["method"] == "elicitation/create"
        server.request(2, "tasks/update", {"taskId": task_id, **envelope(elicitation=True), "inputResponses": {
            "approval": {"action": "accept", "content": {"decision": "allow_once"}}}})
        assert answer_of(server, 2)[0]["result"]["resultType"] == "complete"
        done = wait_for(lambda: (got := poll())["status"] == "completed" and got, 30)
        assert done and structured(done["result"])["output"] == "approved\n"
    finally:
        assert server.close() == 0


def test_a_task_is_never_yielded(workspace: Path, env: dict, tmp_path: Path) -> None:
    config = write_config(tmp_path, "[limits]\nyield_after_seconds = 0.5\n")
    server = RawServer(workspace, env, tmp_path, "--config", config, "--allow", "process")
    try:
        server.initialize()
        server.request(1, "tools/call", {"name": "bash", "arguments": {"command": "sleep 2; echo done"}, "task": {}})
        task_id = answer_of(server, 1)[0]["result"]["task"]["taskId"]
        server.request(2, "tasks/result", {"taskId": task_id})
        value = structured(answer_of(server, 2)[0]["result"])
        assert "yielded" not in value and value["output"] == "done\n" and value["exit_code"] == 0
        server.request(3, "tools/call", {"name": "bash", "arguments": {"command": "sleep 2; echo done"}})
        assert structured(answer_of(server, 3)[0]["result"])["yielded"] is True  # the plain call yields
    finally:
        assert server.close() == 0


def test_a_listen_stream_hears_a_modern_tasks_changes(workspace: Path, env: dict, tmp_path: Path) -> None:
    server = RawServer(workspace, env, tmp_path)
    try:
        server.request(1, "tools/call", {"name": "bash", "arguments": {"command": "echo heard"},
                                         **envelope(elicitation=True)})
        task_id = answer_of(server, 1)[0]["result"]["taskId"]
        server.request("listen", "subscriptions/listen", {"notifications": {"taskIds": [task_id, "not-mine"]},
                                                          **envelope(elicitation=True)})
        ack, _ = until(server, lambda m: m.get("method") == "notifications/subscriptions/acknowledged")
        assert ack["params"]["notifications"]["taskIds"] == [task_id]
        asking, _ = until(server, lambda m: m.get("method") == "notifications/tasks")
        assert asking["params"]["status"] == "input_required" and asking["params"]["taskId"] == task_id
        assert asking["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen"
        assert asking["params"]["inputRequests"]["approval"]["method"] == "elicitation/create"
        server.request(2, "tasks/update", {"taskId": task_id, **envelope(elicitation=True), "inputResponses": {
            "approval": {"action": "accept", "content": {"decision": "allow_once"}}}})
        statuses = []
        while not statuses or statuses[-1]["status"] == "working":
            statuses.append(until(server, lambda m: m.get("method") == "notifications/tasks")[0]["params"])
        assert [s["status"] for s in statuses] == ["working", "completed"]
        assert structured(statuses[-1]["result"])["output"] == "heard\n"
        server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "listen"}})

        # Asking for tasks without declaring the extension is refused.
        server.request(3, "subscriptions/listen", {"notifications": {"taskIds": [task_id]},
                                                   **envelope(extension=False)})
        refused = answer_of(server, 3)[0]
        assert refused["error"]["code"] == -32021
    finally:
        assert server.close() == 0
