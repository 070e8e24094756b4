"""The embedding API over the network: :class:`RemoteSession` and :class:`AsyncRemoteSession` drive a
``peon serve`` through the official MCP SDK's Streamable HTTP client (the ``remote`` extra:
``pip install 'peon-runtime[remote]'``).

They mirror :class:`peon.Session` and :class:`peon.AsyncSession` — ``call``, ``submit``, ``cancel``,
``tools()``, ``with`` — so an application moves a workload to a remote sandbox by changing the line that
opens the session::

    session = peon.Session("/work/repo", approver=approve)                          # local
    session = peon.RemoteSession("http://sandbox:8765/mcp", token=TOKEN, approver=approve)  # remote

Promises:

* every call yields exactly one :class:`~peon.client.result.ToolResult`, with Peon's stable error codes: the
  server's tool failures keep their code (``denied``, ``not_found``, …); an unknown tool is
  ``unknown_tool``; a server that cannot be reached, or a connection that breaks, is retried and then
  reported as ``connection_lost`` — a caller never waits forever on a dead server;
* a server that answers 503 "not ready" (its session is still starting, or its supervisor is being
  replaced) is asked again after its ``Retry-After`` for up to ``ready_timeout`` seconds, then reported
  as ``connection_lost`` naming why it was not ready;
* each call carries a fresh ``peon/idempotencyKey``, reused by its retries, so a call the server
  already ran is answered from the server's store and never runs twice;
* approval requests reach ``approver`` exactly as a local session's approver sees them (the server
  sends the structured request with its elicitation); its answer goes back as the form's answer. Without
  an approver the client declares no elicitation capability and the server denies what it would ask;
* cancelling (``handle.cancel()``, or cancelling the task awaiting :meth:`AsyncRemoteSession.call`)
  cancels the call on the server — a closed stream under 2026-07-28, ``notifications/cancelled`` under
  2025-11-25 — and the server stops its processes (TERM → 2 s → KILL). Unlike a local session, the
  client is not told when they are gone: the result is ``cancelled`` at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from peon.core.errors import ErrorCode, SessionError, ToolError
from peon.mcp.elicitation import APPROVAL_META_KEY, MAX_REASON_CHARS
from peon.mcp.jsonrpc import NOT_READY
from peon.mcp.tools import ERROR_META_KEY, IDEMPOTENCY_KEY, RISK_META_KEY
from peon.client.result import PendingResult, ToolResult, new_call_id
from peon.core.tool import RISK_NAMES
from peon.core.threads import helper_thread
from peon.approval.validation import check_depth

Approver = Callable[[dict[str, Any]], Any]
ProgressCallback = Callable[[dict[str, Any]], None]

PROTOCOLS = {"auto": "auto", "2025-11-25": "legacy", "2026-07-28": "2026-07-28"}
CONNECTION_CLOSED = -32000
_OUTPUT_BYTES = re.compile(r"(\d+) bytes of output")


class _TransportFailure(Exception):
    """The request did not get an answer from the server (unreachable, reset, stream cut)."""


class _NotReady(_TransportFailure):
    """The server answered 503 "not ready": ask again after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


def _sdk() -> Any:
    try:
        import httpx2
        from mcp.client import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared.exceptions import MCPError
        from mcp_types import ElicitResult, Implementation
    except ImportError as exc:
        from peon.client.install_hint import extra_command

        raise SessionError(ErrorCode.CONNECTION_LOST, f"RemoteSession needs the remote extra ({exc.name} is not "
                           f"installed): {extra_command('remote')}") from None
    return httpx2, Client, streamable_http_client, MCPError, ElicitResult, Implementation


def tool_from_mcp(tool: Any) -> dict[str, Any]:
    """An MCP tool descriptor as :meth:`peon.Session.tools` describes a tool."""
    meta = tool.meta or {}
    risk = meta.get(RISK_META_KEY)
    if risk not in RISK_NAMES:
        hints = tool.annotations
        if hints is not None and hints.read_only_hint:
            risk = "read_only"
        elif hints is not None and hints.open_world_hint is False:
            risk = "filesystem"
        else:
            risk = "delegate"  # the most cautious reading of an open-world tool
    return {"name": tool.name, "description": tool.description or "", "risk": risk,
            "input_schema": tool.input_schema, "output_schema": tool.output_schema}


def result_from_mcp(call_id: str, name: str, result: Any) -> ToolResult:
    """A ``CallToolResult`` as the :class:`ToolResult` a local session would have returned."""
    if not result.is_error:
        value = result.structured_content
        if value is None:
            text = "".join(getattr(block, "text", "") for block in result.content)
            try:
                value = json.loads(text)
            except ValueError:
                value = {"text": text}
        return ToolResult(call_id, name, True, value=value if isinstance(value, dict) else {"value": value})
    error = (result.meta or {}).get(ERROR_META_KEY)
    if isinstance(error, Mapping) and isinstance(error.get("code"), str):
        return ToolResult.from_message(call_id, name, {"ok": False, "error": dict(error)})
    text = "".join(getattr(block, "text", "") for block in result.content)
    code, sep, message = text.partition(": ")
    if sep and code in {c.value for c in ErrorCode}:
        return ToolResult.from_message(call_id, name, {"ok": False, "error": {"code": code, "message": message}})
    return ToolResult.failure(call_id, name, ErrorCode.TOOL_FAILED, text or "the server reported an error")


def result_from_rpc_error(call_id: str, name: str, code: int, message: str, data: Any) -> ToolResult:
    if isinstance(data, Mapping) and data.get("code") in {c.value for c in ErrorCode}:
        details = {k: v for k, v in data.items() if k != "code"}
        return ToolResult.from_message(call_id, name, {"ok": False, "error": {
            "code": data["code"], "message": message, "details": details}})
    if code == -32602 and message.startswith("Unknown tool"):
        return ToolResult.failure(call_id, name, ErrorCode.UNKNOWN_TOOL, message)
    if code in (-32602, -32600):
        return ToolResult.failure(call_id, name, ErrorCode.INVALID_INPUT, message)
    return ToolResult.failure(call_id, name, ErrorCode.TOOL_FAILED, f"the server answered error {code}: {message}")


def progress_update(progress: float, message: str | None) -> dict[str, Any]:
    update: dict[str, Any] = {"elapsed_ms": progress}
    if message:
        update["message"] = message
        found = _OUTPUT_BYTES.search(message)
        if found:
            update["output_bytes"] = int(found.group(1))
    return update


def _normalize_answer(answer: Any) -> dict[str, Any]:
    if isinstance(answer, str):
        answer = {"decision": answer}
    if not isinstance(answer, Mapping) or answer.get("decision") not in ("allow_once", "allow_session", "deny"):
        return {"decision": "deny"}
    out = {"decision": answer["decision"]}
    if answer["decision"] == "allow_session" and isinstance(answer.get("scope"), str):
        out["scope"] = answer["scope"]
        if answer["scope"] == "prefix":  # the form offers the request's suggested prefix; "save" is the checkbox
            out["save"] = answer.get("save") is True
    if isinstance(answer.get("reason"), str) and answer["reason"].strip():
        out["reason"] = answer["reason"][:MAX_REASON_CHARS]  # the form's field; the server quotes and bounds it again
    return out


class _Connection:
    """One SDK client, owned by its own task (the SDK's task groups must live in one task)."""

    def __init__(self, owner: AsyncRemoteSession, mode: str, prior_discover: Any):
        self.owner = owner
        self.mode = mode
        self.prior_discover = prior_discover
        self.client: Any = None
        self.ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.dead = asyncio.Event()
        self.stop = asyncio.Event()
        self.error: BaseException | None = None
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        httpx2, Client, streamable_http_client, _, _, Implementation = _sdk()
        owner = self.owner
        try:
            async with contextlib.AsyncExitStack() as stack:
                http = await stack.enter_async_context(httpx2.AsyncClient(
                    headers=owner._headers, timeout=httpx2.Timeout(owner.connect_timeout, read=owner.read_timeout)))
                options: dict[str, Any] = {}
                if self.prior_discover is not None:
                    options["prior_discover"] = self.prior_discover
                client = Client(streamable_http_client(owner.url, http_client=http), mode=self.mode,
                                elicitation_callback=owner._elicit if owner.approver is not None else None,
                                client_info=Implementation(name="peon.RemoteSession", version=_version()),
                                cache=None, **options)
                await stack.enter_async_context(client)
                self.client = client
                self.ready.set_result(client)
                await self.stop.wait()
        except BaseException as exc:  # the transport failed; calls on it are retried on a new connection
            self.error = exc
            if not self.ready.done():
                self.ready.set_exception(exc if isinstance(exc, Exception) else _TransportFailure(repr(exc)))
        finally:
            self.dead.set()

    async def close(self) -> None:
        self.stop.set()
        with contextlib.suppress(BaseException):
            async with asyncio.timeout(10):
                await asyncio.shield(self.task)
        if not self.task.done():
            self.task.cancel()


def _version() -> str:
    from peon import __version__

    return __version__


class AsyncRemoteSession:
    """:class:`peon.AsyncSession`'s API for a session behind ``peon serve`` at ``url``."""

    def __init__(self, url: str, *, token: str | None = None, approver: Approver | None = None,
                 protocol: str = "auto", retries: int = 2, connect_timeout: float = 10.0,
                 read_timeout: float | None = 90.0, headers: Mapping[str, str] | None = None,
                 token_header: str = "Authorization", ready_timeout: float = 60.0):
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        if retries < 0:
            raise ValueError(f"retries must not be negative, got {retries}")
        self.url = url
        self.approver = approver
        self.protocol = protocol
        self.retries = retries
        self.ready_timeout = ready_timeout  # how long a server that answers "not ready" is waited for
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout  # the server sends keep-alives every 15 s while a call runs
        self._headers = dict(headers or {})
        if token:  # behind a proxy that consumes Authorization itself, send it as X-Peon-Token
            self._headers[token_header] = f"Bearer {token}" if token_header.lower() == "authorization" else token
        self._mode = PROTOCOLS[protocol]
        self._discover: Any = None
        self._connection: _Connection | None = None
        self._connect_lock: asyncio.Lock | None = None
        self._tools: list[dict[str, Any]] = []
        self._closed = False
        self.info: dict[str, Any] = {}

    # -- life cycle ---------------------------------------------------------------------------------

    async def start(self) -> AsyncRemoteSession:
        _sdk()
        self._connect_lock = asyncio.Lock()
        try:
            connection = await self._connect()
        except _TransportFailure as exc:
            raise SessionError(ErrorCode.CONNECTION_LOST, f"cannot open a session at {self.url}: {exc}") from None
        except ToolError as exc:
            raise SessionError(exc.code, exc.message, exc.details) from None
        listed = await connection.client.list_tools()
        self._tools = [tool_from_mcp(t) for t in listed.tools]
        client = connection.client
        info = client.server_info
        self.info = {"url": self.url, "protocol_version": client.protocol_version,
                     "server": info.model_dump(exclude_none=True) if info is not None else {},
                     "instructions": client.instructions, "tools": self._tools}
        return self

    async def __aenter__(self) -> AsyncRemoteSession:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    def tools(self) -> list[dict[str, Any]]:
        return [dict(t) for t in self._tools]

    @property
    def alive(self) -> bool:
        return not self._closed and self._connection is not None and not self._connection.dead.is_set()

    async def _connect(self) -> _Connection:
        """The current connection, or a new one when there is none or it broke; a server still starting is
        asked again after its ``Retry-After`` until ``ready_timeout``."""
        deadline = asyncio.get_running_loop().time() + self.ready_timeout
        while True:
            try:
                return await self._connect_once()
            except _NotReady as exc:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    raise
                await asyncio.sleep(min(max(exc.retry_after, 0.05), 2.0, left))

    async def _connect_once(self) -> _Connection:
        assert self._connect_lock is not None, "start the session first"
        async with self._connect_lock:
            if self._closed:
                raise ToolError(ErrorCode.SESSION_CLOSED, "the remote session is closed")
            current = self._connection
            if current is not None and not current.dead.is_set():
                return current
            if current is not None:
                await current.close()
            connection = _Connection(self, self._mode, self._discover)
            try:
                client = await connection.ready
            except BaseException as exc:
                await connection.close()
                raise self._classify_start_failure(exc) from None
            if client.protocol_version.startswith("2026"):  # stateless: reconnect without a probe
                self._mode = client.protocol_version
                self._discover = getattr(client.session, "discover_result", None)
            self._connection = connection
            return connection

    def _classify_start_failure(self, exc: BaseException) -> Exception:
        _, _, _, MCPError, _, _ = _sdk()
        for leaf in _leaves(exc):
            if isinstance(leaf, MCPError):
                data = leaf.error.data
                if isinstance(data, Mapping) and data.get("code") == ErrorCode.UNAUTHORIZED.value:
                    return ToolError(ErrorCode.UNAUTHORIZED, f"{self.url} refused the session: {leaf.error.message}")
                if isinstance(data, Mapping) and data.get("code") == NOT_READY:
                    wait = data.get("retry_after_seconds")
                    return _NotReady(leaf.error.message, float(wait) if isinstance(wait, (int, float)) else 1.0)
        return _TransportFailure(_describe(exc))

    # -- calls --------------------------------------------------------------------------------------

    async def call(self, name: str, args: Any, *, on_progress: ProgressCallback | None = None,
                   call_id: str | None = None) -> ToolResult:
        """Run one call on the server; cancelling the awaiting task cancels it there."""
        call_id = call_id or new_call_id()
        if not isinstance(args, dict):
            return ToolResult.failure(call_id, name, ErrorCode.INVALID_INPUT,
                                      f"input for {name} must be a JSON object, got {type(args).__name__}")
        try:
            check_depth(name, args)
            json.dumps(args, allow_nan=False)
        except ToolError as exc:
            return ToolResult.failure(call_id, name, exc.code, exc.message, exc.details)
        except (TypeError, ValueError) as exc:
            return ToolResult.failure(call_id, name, ErrorCode.INVALID_INPUT,
                                      f"input for {name} is not representable as JSON: {exc}")
        key = uuid.uuid4().hex
        failure = "no attempt was made"
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(min(0.25 * 2 ** (attempt - 1), 2.0))
            try:
                connection = await self._connect()
                return await self._call_once(connection, call_id, name, args, key, on_progress)
            except _TransportFailure as exc:
                failure = str(exc)
            except ToolError as exc:
                return ToolResult.failure(call_id, name, exc.code, exc.message, exc.details)
        return ToolResult.failure(call_id, name, ErrorCode.CONNECTION_LOST,
                                  f"no answer from {self.url} after {self.retries + 1} attempt(s): {failure}",
                                  {"url": self.url, "attempts": self.retries + 1})

    async def _call_once(self, connection: _Connection, call_id: str, name: str, args: Any, key: str,
                         on_progress: ProgressCallback | None) -> ToolResult:
        _, _, _, MCPError, _, _ = _sdk()

        async def progress(value: float, total: float | None, message: str | None) -> None:
            if on_progress is not None:
                on_progress(progress_update(value, message))

        request = asyncio.create_task(connection.client.call_tool(
            name, args, progress_callback=progress, meta={IDEMPOTENCY_KEY: key}))
        broken = asyncio.create_task(connection.dead.wait())
        try:
            await asyncio.wait({request, broken}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            request.cancel()  # the SDK tells the server (closed stream / notifications/cancelled)
            with contextlib.suppress(BaseException):
                async with asyncio.timeout(5):
                    await request
            raise
        finally:
            broken.cancel()
        if not request.done():
            request.cancel()
            with contextlib.suppress(BaseException):
                await request
            connection.dead.set()
            raise _TransportFailure(f"the connection broke: {_describe(connection.error)}")
        try:
            result = request.result()
        except MCPError as exc:
            if exc.error.code == CONNECTION_CLOSED:
                connection.stop.set()
                raise _TransportFailure(exc.error.message) from None
            data = exc.error.data
            if isinstance(data, Mapping) and data.get("code") == ErrorCode.SESSION_CLOSED.value:
                connection.stop.set()  # the server no longer knows this MCP session (it restarted): reconnect
                raise _TransportFailure(exc.error.message) from None
            if isinstance(data, Mapping) and data.get("code") == ErrorCode.UNAUTHORIZED.value:
                return ToolResult.failure(call_id, name, ErrorCode.UNAUTHORIZED, exc.error.message)
            return result_from_rpc_error(call_id, name, exc.error.code, exc.error.message, data)
        except asyncio.CancelledError:
            if connection.dead.is_set():
                raise _TransportFailure(f"the connection broke: {_describe(connection.error)}") from None
            raise
        except Exception as exc:
            connection.stop.set()
            raise _TransportFailure(_describe(exc)) from None
        return result_from_mcp(call_id, name, result)

    async def _elicit(self, context: Any, params: Any) -> Any:
        """An approval request from the server, answered by this session's approver."""
        _, _, _, _, ElicitResult, _ = _sdk()
        request = (params.meta or {}).get(APPROVAL_META_KEY)
        if not isinstance(request, dict):
            request = {"tool": None, "summary": params.message}
        approver = self.approver
        assert approver is not None
        try:
            answer = _normalize_answer(await asyncio.to_thread(approver, dict(request)))
        except Exception:
            answer = {"decision": "deny"}
        return ElicitResult(action="accept", content=answer)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "the connection closed"
    leaves = [leaf for leaf in _leaves(exc) if not isinstance(leaf, asyncio.CancelledError)] or [exc]
    leaf = leaves[0]
    text = str(leaf) or type(leaf).__name__
    return f"{type(leaf).__name__}: {text}" if text != type(leaf).__name__ else text


class RemoteCallHandle(PendingResult):
    """A submitted remote call: wait for its result, or cancel it, from any thread."""

    def __init__(self, session: RemoteSession, call_id: str, tool: str):
        super().__init__(call_id, tool)
        self.session = session
        self._task: asyncio.Task[ToolResult] | None = None

    def cancel(self) -> None:
        """Cancel the call on the server; the result is ``cancelled``."""
        task = self._task
        if task is not None and not self.done():
            self.session._loop.call_soon_threadsafe(task.cancel)


class RemoteSession:
    """:class:`peon.Session`'s API for a session behind ``peon serve`` at ``url``; thread-safe."""

    def __init__(self, url: str, *, token: str | None = None, approver: Approver | None = None,
                 protocol: str = "auto", retries: int = 2, connect_timeout: float = 10.0,
                 read_timeout: float | None = 90.0, headers: Mapping[str, str] | None = None,
                 token_header: str = "Authorization", ready_timeout: float = 60.0):
        self._async = AsyncRemoteSession(url, token=token, approver=approver, protocol=protocol, retries=retries,
                                         connect_timeout=connect_timeout, read_timeout=read_timeout, headers=headers,
                                         token_header=token_header, ready_timeout=ready_timeout)
        self.url = url
        self._loop = asyncio.new_event_loop()
        self._thread = helper_thread(self._loop.run_forever, name="peon-remote")
        self._thread.start()
        self._closed = False
        self._handles: set[RemoteCallHandle] = set()
        try:
            asyncio.run_coroutine_threadsafe(self._async.start(), self._loop).result()
        except BaseException:
            self._stop_loop()
            raise
        self.info = self._async.info

    def tools(self) -> list[dict[str, Any]]:
        return self._async.tools()

    @property
    def alive(self) -> bool:
        return not self._closed and self._async.alive

    def submit(self, name: str, args: Any, *, on_progress: ProgressCallback | None = None) -> RemoteCallHandle:
        call_id = new_call_id()
        handle = RemoteCallHandle(self, call_id, name)
        if self._closed:
            handle._resolve(ToolResult.failure(call_id, name, ErrorCode.SESSION_CLOSED, "the session is closed"))
            return handle
        started = threading.Event()

        def begin() -> None:
            call = self._async.call(name, args, on_progress=on_progress, call_id=call_id)
            handle._task = self._loop.create_task(call)
            handle._task.add_done_callback(lambda task: self._finished(handle, task))
            started.set()

        self._handles.add(handle)
        self._loop.call_soon_threadsafe(begin)
        started.wait()
        return handle

    def _finished(self, handle: RemoteCallHandle, task: asyncio.Task[ToolResult]) -> None:
        self._handles.discard(handle)
        if task.cancelled():
            result = ToolResult.failure(handle.call_id, handle.tool, ErrorCode.CANCELLED,
                                        f"{handle.tool} was cancelled by the client; the server stops its processes "
                                        "(TERM → 2 s → KILL)")
        elif task.exception() is not None:
            exc = task.exception()
            result = ToolResult.failure(handle.call_id, handle.tool, ErrorCode.CONNECTION_LOST,
                                        f"the call failed in the client: {exc!r}")
        else:
            result = task.result()
        handle._resolve(result)

    def call(self, name: str, args: Any, *, on_progress: ProgressCallback | None = None) -> ToolResult:
        return self.submit(name, args, on_progress=on_progress).result()

    def close(self) -> None:
        """Cancel what is still running and close the connection."""
        if self._closed:
            return
        self._closed = True
        for handle in list(self._handles):
            handle.cancel()
        for handle in list(self._handles):
            handle.result(30)
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._async.aclose(), self._loop).result(30)
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> RemoteSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
