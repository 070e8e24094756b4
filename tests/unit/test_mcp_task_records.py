"""MCP tasks, sans I/O: when a call becomes a task, who may see it, its states and shapes in both revisions
(2025-11-25's experimental tasks, 2026-07-28's io.modelcontextprotocol/tasks), and the bound on a client's tasks."""

from __future__ import annotations

import json

from peon.mcp import protocol as p
from peon.mcp.revisions import CLIENT_CAPABILITIES_KEY, PROTOCOL_VERSION_KEY, ServerIdentity
from peon.mcp.tasks import (
    MAX_TASKS, MAX_TTL_MS, RELATED_TASK_KEY, TASKS_EXTENSION, TaskBook, task_wanted,
)

MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
EXTENSION = {CLIENT_CAPABILITIES_KEY: {"extensions": {TASKS_EXTENSION: {}}}}
RESULT = {"content": [{"type": "text", "text": "done"}], "isError": False}


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_call_becomes_a_task_only_where_its_revision_and_client_ask_for_it():
    assert task_wanted(HANDSHAKE, {"task": {"ttl": 5000}}, None, "read_only") == 5000
    assert task_wanted(HANDSHAKE, {"task": {}}, None, "process") == 3_600_000
    assert task_wanted(HANDSHAKE, {"task": {"ttl": 10**12}}, None, "process") == MAX_TTL_MS
    assert task_wanted(HANDSHAKE, {}, None, "process") is None
    assert task_wanted(HANDSHAKE, {"task": "yes"}, None, "process") is None
    assert task_wanted("2025-06-18", {"task": {}}, None, "process") is None
    # 2026-07-28: the server decides, for a client that declared the extension: the calls that run commands.
    assert task_wanted(MODERN, {}, EXTENSION, "process") == 3_600_000
    assert task_wanted(MODERN, {}, EXTENSION, "delegate") == 3_600_000
    assert task_wanted(MODERN, {}, EXTENSION, "read_only") is None
    assert task_wanted(MODERN, {}, {CLIENT_CAPABILITIES_KEY: {}}, "process") is None


def test_a_handshake_task_is_created_followed_and_its_result_waited_for():
    book = TaskBook(ServerIdentity(), Clock())
    owner = object()
    task = book.create(owner, HANDSHAKE, 60_000, call="the call")
    assert not isinstance(task, str)
    created = book.created(7, task)["result"]
    assert created["task"]["taskId"] == task.task_id and created["task"]["status"] == "working"
    assert created["task"]["ttl"] == 60_000 and "resultType" not in created
    assert book.request(owner, 8, "tasks/result", {"taskId": task.task_id}, HANDSHAKE).reply is None  # waits
    [notice] = book.asking(task, "approval", None)
    assert notice["method"] == "notifications/tasks/status" and notice["params"]["status"] == "input_required"
    got = book.request(owner, 9, "tasks/get", {"taskId": task.task_id}, HANDSHAKE).reply
    assert got is not None and got["result"]["status"] == "input_required"
    assert book.resumed(task) != [] and task.status == "working"
    answers = book.ended(task, RESULT)
    assert answers[0]["id"] == 8 and answers[0]["result"]["content"] == RESULT["content"]
    assert answers[0]["result"]["_meta"][RELATED_TASK_KEY] == {"taskId": task.task_id}
    assert answers[1]["params"]["status"] == "completed"
    listed = book.request(owner, 10, "tasks/list", {}, HANDSHAKE).reply
    assert listed is not None and [t["taskId"] for t in listed["result"]["tasks"]] == [task.task_id]
    again = book.request(owner, 11, "tasks/result", {"taskId": task.task_id}, HANDSHAKE).reply
    assert again is not None and again["result"]["isError"] is False
    ended = book.request(owner, 12, "tasks/cancel", {"taskId": task.task_id}, HANDSHAKE)
    assert ended.cancel is None and ended.reply is not None and ended.reply["error"]["code"] == -32602


def test_a_task_of_another_client_is_not_found_and_cancel_ends_it_cancelled():
    book = TaskBook(ServerIdentity(), Clock())
    mine, theirs = object(), object()
    task = book.create(mine, HANDSHAKE, 60_000, call=None)
    assert not isinstance(task, str)
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        action = book.request(theirs, 1, method, {"taskId": task.task_id}, HANDSHAKE)
        assert action.reply is not None and action.reply["error"]["code"] == -32602 and action.cancel is None
    assert book.request(theirs, 2, "tasks/list", {}, HANDSHAKE).reply["result"]["tasks"] == []
    cancel = book.request(mine, 3, "tasks/cancel", {"taskId": task.task_id}, HANDSHAKE)
    assert cancel.cancel is task and cancel.reply["result"]["status"] == "cancelled"
    book.ended(task, {"content": [], "isError": True})
    assert task.status == "cancelled"
    assert book.request(mine, 4, "tasks/update", {"taskId": task.task_id}, HANDSHAKE).reply["error"]["code"] == -32601


def test_a_modern_task_inlines_its_result_and_takes_input_responses_by_update():
    book = TaskBook(ServerIdentity(), Clock())
    owner = object()
    task = book.create(owner, MODERN, 60_000, call=None)
    assert not isinstance(task, str)
    created = book.created(1, task)["result"]
    assert created["resultType"] == "task" and created["taskId"] == task.task_id and created["ttlMs"] == 60_000
    assert "task" not in created and created["pollIntervalMs"] > 0
    request = {"method": "elicitation/create", "params": {"message": "allow?"}}
    assert book.asking(task, "approval", request) == []  # 2026-07-28: notifications only on a listen stream
    got = book.request(owner, 2, "tasks/get", {"taskId": task.task_id}, MODERN).reply["result"]
    assert got["resultType"] == "complete" and got["status"] == "input_required"
    assert got["inputRequests"] == {"approval": request}
    update = book.request(owner, 3, "tasks/update", {"taskId": task.task_id,
                                                     "inputResponses": {"approval": {"action": "accept"},
                                                                        "other": {}}}, MODERN)
    assert update.reply["result"] == {"resultType": "complete", "_meta": update.reply["result"]["_meta"]}
    assert update.responses == (task, {"approval": {"action": "accept"}})
    book.resumed(task)
    assert book.request(owner, 4, "tasks/list", {}, MODERN).reply["error"]["code"] == -32601
    assert book.request(owner, 5, "tasks/result", {"taskId": task.task_id}, MODERN).reply["error"]["code"] == -32601
    book.ended(task, RESULT)
    done = book.request(owner, 6, "tasks/get", {"taskId": task.task_id}, MODERN).reply["result"]
    assert done["status"] == "completed" and done["result"] == RESULT
    cancel = book.request(owner, 7, "tasks/cancel", {"taskId": task.task_id}, MODERN)
    assert cancel.cancel is None and cancel.reply["error"]["code"] == -32602


def test_a_client_keeps_a_bounded_number_of_tasks_and_ended_ones_expire():
    clock = Clock()
    book = TaskBook(ServerIdentity(), clock)
    owner = object()
    tasks = [book.create(owner, HANDSHAKE, 1000, call=None) for _ in range(MAX_TASKS)]
    assert isinstance(book.create(owner, HANDSHAKE, 1000, call=None), str)  # all still run: refused
    assert not isinstance(book.create(object(), HANDSHAKE, 1000, call=None), str)  # another client's own bound
    first = tasks[0]
    assert not isinstance(first, str)
    book.ended(first, RESULT)
    newer = book.create(owner, HANDSHAKE, 1000, call=None)
    assert not isinstance(newer, str) and first.task_id not in book.tasks  # the ended one made room
    book.ended(newer, RESULT)
    clock.now += 2
    assert book.request(owner, 1, "tasks/get", {"taskId": newer.task_id}, HANDSHAKE).reply["error"]["code"] == -32602
    assert len(book.forget(owner)) == MAX_TASKS - 1 and not any(t.owner is owner for t in book.tasks.values())


BASH = {"name": "bash", "description": "Run a command.", "risk": "process",
        "input_schema": {"type": "object"}, "output_schema": None}
READ = {"name": "read", "description": "Read a file.", "risk": "read_only",
        "input_schema": {"type": "object"}, "output_schema": None}


def receive(conn: p.Connection, message: dict) -> p.Event:
    return conn.receive(p.parse_message(json.dumps({"jsonrpc": "2.0", **message}).encode()))


def handshake(serves_tasks: bool, version: str = HANDSHAKE) -> tuple[p.Connection, dict]:
    conn = p.Connection([BASH, READ], ServerIdentity(), serves_tasks=serves_tasks)
    event = receive(conn, {"id": 1, "method": "initialize", "params": {"protocolVersion": version, "capabilities": {},
                                                                      "clientInfo": {"name": "t", "version": "1"}}})
    assert isinstance(event, p.Reply)
    return conn, event.message["result"]["capabilities"]


def test_a_connection_advertises_tasks_only_where_its_transport_serves_them():
    conn, capabilities = handshake(True)
    assert capabilities["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    listed = receive(conn, {"id": 2, "method": "tools/list"})
    assert isinstance(listed, p.Reply)
    assert {t["execution"]["taskSupport"] for t in listed.message["result"]["tools"]} == {"optional"}
    call = receive(conn, {"id": 3, "method": "tools/call", "params": {"name": "bash", "arguments": {}, "task": {}}})
    assert isinstance(call, p.StartCall) and call.task_ttl == 3_600_000
    got = receive(conn, {"id": 4, "method": "tasks/get", "params": {"taskId": "x"}})
    assert isinstance(got, p.TaskRequest) and got.method == "tasks/get"

    for conn, capabilities in (handshake(False), handshake(True, "2025-06-18")):
        assert "tasks" not in capabilities
        listed = receive(conn, {"id": 2, "method": "tools/list"})
        assert isinstance(listed, p.Reply) and all("execution" not in t for t in listed.message["result"]["tools"])
        call = receive(conn, {"id": 3, "method": "tools/call", "params": {"name": "bash", "arguments": {}, "task": {}}})
        assert isinstance(call, p.StartCall) and call.task_ttl is None  # the plain call
        refused = receive(conn, {"id": 4, "method": "tasks/get", "params": {"taskId": "x"}})
        assert isinstance(refused, p.Reply) and refused.message["error"]["code"] == -32601


def test_a_modern_connection_lists_the_extension_and_makes_a_commands_call_a_task():
    def envelope(extension: bool) -> dict:
        return {"_meta": {PROTOCOL_VERSION_KEY: MODERN,
                          CLIENT_CAPABILITIES_KEY: {"extensions": {TASKS_EXTENSION: {}}} if extension else {}}}

    for serves in (True, False):
        conn = p.Connection([BASH, READ], ServerIdentity(), serves_tasks=serves)
        found = receive(conn, {"id": 1, "method": "server/discover", "params": envelope(True)})
        assert isinstance(found, p.Reply)
        extensions = found.message["result"]["capabilities"].get("extensions")
        assert extensions == ({TASKS_EXTENSION: {}} if serves else None)
        bash = receive(conn, {"id": 2, "method": "tools/call", "params": {"name": "bash", "arguments": {},
                                                                          **envelope(True)}})
        assert isinstance(bash, p.StartCall) and bash.task_ttl == (3_600_000 if serves else None)
        read = receive(conn, {"id": 3, "method": "tools/call", "params": {"name": "read", "arguments": {},
                                                                          **envelope(True)}})
        assert isinstance(read, p.StartCall) and read.task_ttl is None
        plain = receive(conn, {"id": 4, "method": "tools/call", "params": {"name": "bash", "arguments": {},
                                                                           **envelope(False)}})
        assert isinstance(plain, p.StartCall) and plain.task_ttl is None
        listed = receive(conn, {"id": 5, "method": "tasks/list", "params": envelope(True)})
        assert isinstance(listed, p.Reply) and listed.message["error"]["code"] == -32601
        update = receive(conn, {"id": 6, "method": "tasks/update", "params": {"taskId": "x", **envelope(True)}})
        assert isinstance(update, p.TaskRequest if serves else p.Reply)


def test_a_listen_stream_follows_only_its_clients_tasks_and_hears_each_change():
    book = TaskBook(ServerIdentity(), Clock())
    mine, theirs = object(), object()
    task = book.create(mine, MODERN, 60_000, call=None)
    other = book.create(theirs, MODERN, 60_000, call=None)
    assert not isinstance(task, str) and not isinstance(other, str)
    refused = book.listen(mine, "L", [task.task_id], {CLIENT_CAPABILITIES_KEY: {}})
    assert isinstance(refused, dict) and refused["error"]["code"] == -32021
    assert refused["error"]["data"] == {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
    assert book.listen(mine, "L", [task.task_id, other.task_id, "nope", 5], EXTENSION) == [task.task_id]
    assert book.listen(mine, "M", None, {}) == []
    request = {"method": "elicitation/create", "params": {}}
    [asked] = book.asking(task, "approval", request)
    assert asked["method"] == "notifications/tasks" and asked["params"]["status"] == "input_required"
    assert asked["params"]["inputRequests"] == {"approval": request}
    assert asked["params"]["_meta"] == {"io.modelcontextprotocol/subscriptionId": "L"}
    assert book.asking(other, "approval", request) == []  # nobody follows it
    book.resumed(task)
    [done] = book.ended(task, RESULT)
    assert done["params"]["status"] == "completed" and done["params"]["result"] == RESULT
    assert book.unlisten("L") is True and book.unlisten("L") is False and book.listeners == {}
