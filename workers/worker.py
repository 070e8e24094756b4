"""A worker: a process forked (by the session's forkserver) that serves exactly one call, then exits.

Promise:

* it is a child subreaper, so everything the call starts stays below it;
* before it reports a result, every process the call started is dead (it sweeps its own tree even if
  the tool forgot to);
* if its forkserver dies (it does when the supervisor dies) it gets a parent-death signal, kills its
  whole tree and exits;
* a tool that ignores cancellation or its deadline is abandoned (its task cancelled) after a grace,
  and the supervisor kills the worker if even that does not end it.

Titles: ``peon-worker standby`` while waiting, ``peon-worker <tool> <call-id>`` while serving.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

from setproctitle import setproctitle

from peon.cancel import CancelToken, Deadline
from peon.errors import ErrorCode, ToolError
from peon.framing import encode
from peon.tool import OutputLimits, SessionView, ToolContext

from . import linux, treekill
from .channel import Channel
from .reaper import REAPER, wait_children_gone
from .runner import CANCEL_GRACE_SECONDS

EXIT_PARENT_GONE = 75
EXIT_INTERNAL_ERROR = 70
ABANDON_GRACE_SECONDS = 1.0  # after cancel grace or deadline, how long a tool may still take


def _on_parent_gone(signum: int, frame: Any) -> None:
    treekill.current.kill_everything()
    os._exit(EXIT_PARENT_GONE)


def _prepare(sock: socket.socket, parent_pid: int) -> None:
    gc.freeze()  # objects inherited from the forkserver (its sockets) are never collected here
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, _on_parent_gone)
    linux.set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent_pid:  # the forkserver died before the death signal was armed
        os._exit(EXIT_PARENT_GONE)
    linux.set_child_subreaper()
    keep = sock.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
    setproctitle("peon-worker standby")


def become_worker(sock: socket.socket, parent_pid: int, session: SessionView, tools: Any) -> NoReturn:
    """Entry point in the child the forkserver just forked; never returns."""
    code = EXIT_INTERNAL_ERROR
    try:
        _prepare(sock, parent_pid)
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        REAPER.install(loop)
        code = loop.run_until_complete(_serve_one(Channel(sock), session, tools))
    except BaseException:
        traceback.print_exc(file=sys.stderr)
    finally:
        os._exit(code)


async def _serve_one(channel: Channel, session: SessionView, tools: Any) -> int:
    message = await channel.recv()
    if message is None or message.get("op") != "call":
        return 0  # retired while on standby
    call_id, tool_name = message["id"], message["tool"]
    setproctitle(f"peon-worker {tool_name} {call_id}")
    if message.get("cgroup"):
        treekill.current = treekill.CgroupTree(Path(message["cgroup"]))
    token = CancelToken()
    ctx = ToolContext(
        call_id=call_id,
        workspace=session.workspace,
        deadline=Deadline(message["deadline"]),
        cancel=token,
        limits=OutputLimits(
            max_output_bytes=session.config.limits.max_output_bytes,
            read_max_bytes=session.config.limits.read_max_bytes,
        ),
        session=session,
        approved=message.get("approved") or {},
        wants_progress=bool(message.get("progress")),
    )
    progress_sends: set[asyncio.Task] = set()

    def report_progress(**fields: Any) -> None:
        task = asyncio.ensure_future(channel.send({"op": "progress", "id": call_id, **fields}))
        progress_sends.add(task)
        task.add_done_callback(progress_sends.discard)

    ctx.report_progress = report_progress
    listener = asyncio.ensure_future(_listen(channel, token))
    reply = await _execute(tools[tool_name], message["args"], ctx)
    listener.cancel()
    # Whatever the tool did, nothing it started may outlive the call.
    treekill.current.kill_descendants()
    if not await wait_children_gone(REAPER):
        reply = _error(ErrorCode.TOOL_FAILED, f"some processes {tool_name} started could not be killed")
    try:
        data = encode(reply)
    except ValueError as exc:
        data = encode(_error(ErrorCode.TOOL_FAILED, f"{tool_name} returned a value that is not valid JSON: {exc}"))
    await asyncio.get_running_loop().sock_sendall(channel.sock, data)
    return 0


async def _listen(channel: Channel, token: CancelToken) -> None:
    while True:
        message = await channel.recv()
        if message is None:
            token.cancel("the supervisor went away")
            return
        if message.get("op") == "cancel":
            token.cancel(message.get("reason") or "cancelled by the client")


def _error(code: ErrorCode, message: str, details: dict | None = None) -> dict:
    return {"op": "result", "ok": False, "error": ToolError(code, message, details).to_dict()}


async def _execute(tool: Any, args: dict, ctx: ToolContext) -> dict:
    task = asyncio.ensure_future(tool.execute(args, ctx))
    abandoned: str | None = None
    while not task.done():
        if ctx.cancel.cancelled:
            limit = (ctx.cancel.cancelled_at or 0) + CANCEL_GRACE_SECONDS + ABANDON_GRACE_SECONDS
            limit = min(limit, ctx.deadline.at + ABANDON_GRACE_SECONDS)
        else:
            limit = ctx.deadline.at + ABANDON_GRACE_SECONDS
        waiter = asyncio.ensure_future(ctx.cancel.wait())
        await asyncio.wait({task, waiter}, timeout=max(0.0, limit - asyncio.get_running_loop().time()),
                           return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if not task.done() and asyncio.get_running_loop().time() >= limit:
            abandoned = "cancelled" if ctx.cancel.cancelled and not ctx.deadline.expired else "timeout"
            task.cancel()
            try:
                await task
            except BaseException:
                pass
            break
    if abandoned == "cancelled":
        return _error(ErrorCode.CANCELLED, f"{tool.name} was cancelled ({ctx.cancel.reason})")
    if abandoned == "timeout":
        return _error(ErrorCode.TIMEOUT, f"{tool.name} did not finish before its deadline")
    try:
        value = task.result()
    except ToolError as exc:
        return {"op": "result", "ok": False, "error": exc.to_dict()}
    except asyncio.CancelledError:
        return _error(ErrorCode.CANCELLED, f"{tool.name} was cancelled")
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        return _error(ErrorCode.TOOL_FAILED, f"{tool.name} failed unexpectedly: {type(exc).__name__}: {exc}")
    if not isinstance(value, dict):
        return _error(ErrorCode.TOOL_FAILED, f"{tool.name} returned {type(value).__name__}, expected a JSON object")
    return {"op": "result", "ok": True, "value": value}
