"""MCP tasks, sans I/O: a ``tools/call`` answered at once with a task handle, its state followed with
``tasks/get``, its result collected, its run cancelled — for the experimental tasks of 2025-11-25 and the
tasks extension of 2026-07-28 (``io.modelcontextprotocol/tasks``).

Promises:

* a call becomes a task only where its revision defines tasks and the client asked for it: under
  2025-11-25 a ``tools/call`` carrying ``params.task`` (an object); under 2026-07-28, where the server
  decides, a call of a tool that runs commands (risk ``process`` or ``delegate``) whose request declares
  the extension in its client capabilities (:func:`task_wanted`). Any other call is answered as ever;
* a task belongs to the client (the MCP session) that created it: its id (random, unguessable) names
  nothing for another client, which is answered as for an id that does not exist;
* a client keeps at most :data:`MAX_TASKS` tasks; an ended task is forgotten once its ``ttl`` has passed
  (asked for by the client, at most :data:`MAX_TTL_MS`), or, the oldest ended first, to make room for a new
  one; a client whose tasks all still run is refused a new one (its call is not started);
* a task moves ``working`` → ``input_required`` (its call waits for an approval) → ``working`` → one of
  ``completed`` (the call's result, a tool error included: ``isError``), ``cancelled`` (``tasks/cancel``
  stopped it), and never leaves an ended state; the answers and notifications have the shapes of the
  task's revision (:meth:`TaskBook.shape`);
* ``tasks/result`` (2025-11-25) waits for the task's end, answered then with the call's result; a
  ``tasks/update`` (2026-07-28) is acknowledged, its response to an outstanding input request taken;
* each change of a task's status is told: under 2025-11-25 as ``notifications/tasks/status``, under
  2026-07-28 as ``notifications/tasks`` (the whole detailed task) on each ``subscriptions/listen`` stream
  that asked for the task (:meth:`TaskBook.listen`: only a client's own tasks, only for a client that
  declared the extension, at most :data:`MAX_LISTENED` task ids a stream).

Rule: this module owns the task records and their shapes; the call book (:mod:`peon.mcp.calls`) owns the
calls behind them, and the transport does the I/O. Nothing here waits, locks or writes.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from peon.mcp.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, error_response
from peon.mcp.revisions import CLIENT_CAPABILITIES_KEY, ServerIdentity, is_modern, respond

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK_KEY = "io.modelcontextprotocol/related-task"
TASKS_REVISION = "2025-11-25"  # the handshake revision with (experimental) tasks
HANDSHAKE_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/cancel", "tasks/list"})
MODERN_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
TASK_RISKS = frozenset({"process", "delegate"})  # 2026-07-28: the calls the server makes tasks
MAX_TASKS = 256
DEFAULT_TTL_MS = 3_600_000
MAX_TTL_MS = 86_400_000
POLL_INTERVAL_MS = 1000
MAX_TASK_ID_LENGTH = 128
MAX_LISTENED = 256  # task ids one subscriptions/listen stream follows
MISSING_CAPABILITY = -32021  # a request needs a client capability it did not declare
SUBSCRIPTION_ID_KEY = "io.modelcontextprotocol/subscriptionId"

Status = Literal["working", "input_required", "completed", "failed", "cancelled"]
ENDED: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


def serves_tasks(version: str) -> bool:
    """Whether a revision defines tasks."""
    return version == TASKS_REVISION or is_modern(version)


def task_methods(version: str) -> frozenset[str]:
    return MODERN_METHODS if is_modern(version) else HANDSHAKE_METHODS if version == TASKS_REVISION else frozenset()


def declares_extension(meta: Any) -> bool:
    """2026-07-28: whether a request's client capabilities declare the tasks extension."""
    capabilities = meta.get(CLIENT_CAPABILITIES_KEY) if isinstance(meta, Mapping) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    return isinstance(extensions, Mapping) and isinstance(extensions.get(TASKS_EXTENSION), Mapping)


def task_wanted(version: str, params: Mapping[str, Any], meta: Any, risk: str) -> int | None:
    """The ttl (ms) of the task a ``tools/call`` becomes, or None when it is answered as a plain call."""
    if version == TASKS_REVISION:
        task = params.get("task")
        if not isinstance(task, Mapping):
            return None
        ttl = task.get("ttl")
        if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0:
            return min(ttl, MAX_TTL_MS)
        return DEFAULT_TTL_MS
    if is_modern(version) and declares_extension(meta) and risk in TASK_RISKS:
        return DEFAULT_TTL_MS
    return None


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(eq=False, kw_only=True)
class Task:
    """One task: the call it stands for (the call book's), and what its client may learn of it."""

    task_id: str
    owner: Any
    version: str
    ttl_ms: int
    created_at: float
    updated_at: float
    status: Status = "working"
    status_message: str | None = None
    result: dict[str, Any] | None = None  # the call's CallToolResult, once it ended
    input_requests: dict[str, Any] | None = None  # 2026-07-28, while input_required
    result_waiters: list[Any] = field(default_factory=list)  # 2025-11-25 tasks/result requests waiting
    cancel_asked: bool = False
    call: Any = None

    @property
    def ended(self) -> bool:
        return self.status in ENDED


@dataclass(frozen=True)
class TaskAction:
    """What the transport does for a tasks request besides sending ``reply``: cancel the task's call, or
    give its open question the client's responses."""

    reply: dict[str, Any] | None
    cancel: Task | None = None
    responses: tuple[Task, Mapping[str, Any]] | None = None


class TaskBook:
    """Every client's tasks, by id."""

    def __init__(self, identity: ServerIdentity, clock: Callable[[], float] = time.time):
        self.identity = identity
        self.clock = clock
        self.tasks: dict[str, Task] = {}
        self.listeners: dict[str, list[Any]] = {}  # 2026-07-28: task id -> the listen streams that follow it

    # -- creating and ending ------------------------------------------------------------------------

    def create(self, owner: Any, version: str, ttl_ms: int, call: Any) -> Task | str:
        """A new task of ``owner``'s for ``call``, or why it is refused."""
        self._expire()
        own = [task for task in self.tasks.values() if task.owner is owner]
        if len(own) >= MAX_TASKS:
            ended = [task for task in own if task.ended]
            if not ended:
                return f"this client already has {MAX_TASKS} tasks running; wait for one to end or cancel one"
            oldest = min(ended, key=lambda task: task.updated_at).task_id
            del self.tasks[oldest]
            self.listeners.pop(oldest, None)
        now = self.clock()
        task = Task(task_id=secrets.token_urlsafe(18), owner=owner, version=version, ttl_ms=ttl_ms,
                    created_at=now, updated_at=now, call=call)
        self.tasks[task.task_id] = task
        return task

    def created(self, request_id: Any, task: Task) -> dict[str, Any]:
        """The answer to the ``tools/call`` that created ``task``."""
        if is_modern(task.version):
            return respond(request_id, task.version, {"resultType": "task", **self.shape(task, detailed=False)},
                           self.identity)
        return respond(request_id, task.version, {"task": self.shape(task)}, self.identity)

    def asking(self, task: Task, key: str, request: dict[str, Any] | None) -> list[dict[str, Any]]:
        """The task's call waits for an approval (``request``: the 2026-07-28 input request under ``key``);
        the status notifications to send."""
        if task.ended:
            return []
        task.status, task.status_message = "input_required", "waiting for the user's approval"
        task.input_requests = {key: request} if request is not None else None
        return self._touched(task)

    def resumed(self, task: Task) -> list[dict[str, Any]]:
        """Its question was answered: the task works again (the status notifications to send)."""
        if task.ended or task.status != "input_required":
            return []
        task.status, task.status_message, task.input_requests = "working", None, None
        return self._touched(task)

    def ended(self, task: Task, result: dict[str, Any]) -> list[dict[str, Any]]:
        """The task's call ended with ``result`` (a CallToolResult): the answers to the ``tasks/result``
        requests that waited for it, then the status notification."""
        if task.ended:
            return []
        task.result, task.input_requests = result, None
        task.status = "cancelled" if task.cancel_asked else "completed"
        task.status_message = "cancelled by the client" if task.cancel_asked else None
        messages = [self._result_answer(request_id, task) for request_id in task.result_waiters]
        task.result_waiters = []
        return messages + self._touched(task)

    # -- requests ------------------------------------------------------------------------------------

    def request(self, owner: Any, request_id: Any, method: str, params: Mapping[str, Any],
                version: str) -> TaskAction:
        """Answer a tasks request of ``owner``'s (see the module's promise)."""
        self._expire()
        if method not in task_methods(version):
            return TaskAction(error_response(request_id, METHOD_NOT_FOUND, f"Method not found: {method}"))
        if method == "tasks/list":
            if params.get("cursor") is not None:
                return TaskAction(error_response(request_id, INVALID_PARAMS, "unknown cursor: every task is listed "
                                                                             "in the first page"))
            own = [self.shape(task) for task in self.tasks.values() if task.owner is owner]
            return TaskAction(respond(request_id, version, {"tasks": own}, self.identity))
        task_id = params.get("taskId")
        task = self.tasks.get(task_id) if isinstance(task_id, str) and len(task_id) <= MAX_TASK_ID_LENGTH else None
        if task is None or task.owner is not owner:
            return TaskAction(error_response(request_id, INVALID_PARAMS, "Invalid params: no task has this taskId "
                                                                         "for this client"))
        if method == "tasks/get":
            return TaskAction(respond(request_id, version, self.shape(task, detailed=is_modern(version)),
                                      self.identity))
        if method == "tasks/result":
            if not task.ended:
                task.result_waiters.append(request_id)
                return TaskAction(None)
            return TaskAction(self._result_answer(request_id, task))
        if method == "tasks/update":
            responses = params.get("inputResponses")
            given = ({key: value for key, value in responses.items() if key in (task.input_requests or {})}
                     if isinstance(responses, Mapping) else {})
            ack = respond(request_id, version, {}, self.identity)
            return TaskAction(ack, responses=(task, given) if given else None)
        # tasks/cancel
        if task.ended:
            return TaskAction(error_response(request_id, INVALID_PARAMS, f"Invalid params: the task already ended "
                                                                         f"({task.status}); it cannot be cancelled"))
        task.cancel_asked = True
        if is_modern(version):
            return TaskAction(respond(request_id, version, {}, self.identity), cancel=task)
        shaped = {**self.shape(task), "status": "cancelled", "statusMessage": "cancelled by the client"}
        return TaskAction(respond(request_id, version, shaped, self.identity), cancel=task)

    # -- shapes --------------------------------------------------------------------------------------

    def shape(self, task: Task, detailed: bool = False) -> dict[str, Any]:
        """The task as its revision shows it; ``detailed`` (2026-07-28 ``tasks/get`` and notifications)
        inlines its result or its input requests."""
        shaped: dict[str, Any] = {"taskId": task.task_id, "status": task.status, "createdAt": _iso(task.created_at),
                                  "lastUpdatedAt": _iso(task.updated_at)}
        if task.status_message is not None:
            shaped["statusMessage"] = task.status_message
        if is_modern(task.version):
            shaped.update(ttlMs=task.ttl_ms, pollIntervalMs=POLL_INTERVAL_MS)
            if detailed and task.status == "completed" and task.result is not None:
                shaped["result"] = task.result
            if detailed and task.status == "input_required" and task.input_requests:
                shaped["inputRequests"] = task.input_requests
        else:
            shaped.update(ttl=task.ttl_ms, pollInterval=POLL_INTERVAL_MS)
        return shaped

    def _result_answer(self, request_id: Any, task: Task) -> dict[str, Any]:
        result = dict(task.result or {"content": [], "isError": True})
        result["_meta"] = {**(result.get("_meta") or {}), RELATED_TASK_KEY: {"taskId": task.task_id}}
        return respond(request_id, task.version, result, self.identity)

    def _touched(self, task: Task) -> list[dict[str, Any]]:
        """The task changed: its status notifications (2026-07-28: one on each listen stream following it)."""
        task.updated_at = self.clock()
        if not is_modern(task.version):
            return [{"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": self.shape(task)}]
        return [{"jsonrpc": "2.0", "method": "notifications/tasks",
                 "params": {**self.shape(task, detailed=True), "_meta": {SUBSCRIPTION_ID_KEY: listen_id}}}
                for listen_id in self.listeners.get(task.task_id, ())]

    def listen(self, owner: Any, listen_id: Any, task_ids: Any, meta: Any) -> list[str] | dict[str, Any]:
        """A ``subscriptions/listen`` (2026-07-28) asking for ``task_ids``: the ids it will be told about (the
        client's own tasks), or the error answer for a client that did not declare the extension."""
        if not isinstance(task_ids, list) or not task_ids:
            return []
        if not declares_extension(meta):
            return error_response(listen_id, MISSING_CAPABILITY, "Missing required client capability",
                                  {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}})
        honored = [task_id for task_id in dict.fromkeys(task_ids[:MAX_LISTENED]) if isinstance(task_id, str)
                   and (task := self.tasks.get(task_id)) is not None and task.owner is owner]
        for task_id in honored:
            self.listeners.setdefault(task_id, []).append(listen_id)
        return honored

    def unlisten(self, listen_id: Any) -> bool:
        """The listen stream ended; whether it followed any task."""
        followed = False
        for task_id, streams in list(self.listeners.items()):
            kept = [other for other in streams if not (type(other) is type(listen_id) and other == listen_id)]
            followed = followed or len(kept) != len(streams)
            if kept:
                self.listeners[task_id] = kept
            else:
                del self.listeners[task_id]
        return followed

    def _expire(self) -> None:
        now = self.clock()
        for task_id, task in list(self.tasks.items()):
            if task.ended and (now - task.created_at) * 1000 > task.ttl_ms:
                del self.tasks[task_id]
                self.listeners.pop(task_id, None)

    def forget(self, owner: Any) -> list[Task]:
        """``owner`` is gone: its tasks are forgotten; those still running are returned (to be cancelled)."""
        mine = [task for task in self.tasks.values() if task.owner is owner]
        for task in mine:
            del self.tasks[task.task_id]
            self.listeners.pop(task.task_id, None)
        return [task for task in mine if not task.ended]
