"""One call's exchange with the worker serving it: the call sent, its messages taken, one reply.

Promise: :func:`converse` returns exactly one outcome by the call's deadline + the worker grace (+ the
cancel grace once a cancel was forwarded), whatever the worker does: the worker's ``result``, or an error
that says how the worker failed — ``worker_hung`` (past that bound), ``worker_crashed`` (it closed its
channel or died before a result, or broke the channel's protocol: ``details.reason`` ``protocol``) or
``worker_oom`` (the out-of-memory killer took it). When it returns an error for a hang or a protocol
break, the supervisor has already killed the worker with its whole tree; a worker that closed its channel
is given :data:`~peon.supervisor.worker_handle.EXIT_WAIT_SECONDS` to exit before it is killed too.
The supervisor decides; the worker may crash at any point and is believed about nothing but its own
result. While the exchange lasts, ``progress`` goes to its callback, ``output``, ``spawned`` and
``input_closed`` to the call's job (a call that streams nothing and sends them broke protocol), a cancel
of the call is forwarded to the worker at once (:func:`forward_cancel`, which the job host's link uses
too), and so is a background job's input (:func:`forward_input`, likewise).

What happens to the worker after the reply (served again, retired, killed) is the pool's to decide.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from peon.core.cancel import Deadline
from peon.core.errors import ErrorCode, error_reply as _failure  # made up here: no ``op``, not from a worker
from peon.workers.messages import (
    CallMessage,
    CancelMessage,
    InputMessage,
    OutputStreaming,
    ProtocolError,
    WorkerMessage,
)
from peon.workers.reaper import describe_exitcode
from peon.workers.runner import CANCEL_GRACE_SECONDS

from peon.supervisor.containment import Containment
from peon.supervisor.worker_handle import WorkerHandle

CANCEL_REASON = "cancelled by the client"


def call_message(call: dict[str, Any], deadline: Deadline, streams: bool) -> CallMessage:
    """The ``call`` a worker (or the job host) is sent for ``call``, the supervisor's own record of it."""
    message: CallMessage = {"op": "call", "id": str(call["id"]), "tool": call["tool"], "args": call["args"],
                            "deadline": deadline.at, "approved": dict(call.get("approved") or {}),
                            "progress": bool(call.get("progress")),
                            "stream": _streaming(call.get("stream")) if streams else None}
    if call.get("trace"):
        message["trace"] = dict(call["trace"])  # the caller's trace context, for the call's commands
    return message


def _streaming(value: Any) -> OutputStreaming | None:
    """The call's output streaming mode, read from the supervisor's own call record."""
    return "live" if value == "live" else "end" if value == "end" else None


async def converse(worker: WorkerHandle, call: dict[str, Any], deadline: Deadline, cancelled: asyncio.Event,
                   on_progress: Callable[[dict[str, Any]], Awaitable[None]],
                   on_event: Callable[[WorkerMessage], None] | None, *, containment: Containment,
                   grace_seconds: float, fate: Callable[[int | None], str | None]) -> dict[str, Any]:
    """Send ``call`` to ``worker`` and return its one outcome (see the module's promise). ``fate`` says
    what became of a forkserver (by pid), for the message of a worker that died with it."""
    tool = call["tool"]
    message = call_message(call, deadline, on_event is not None)
    try:
        async with asyncio.timeout_at(deadline.at + grace_seconds) as scope:
            cancel: CancelMessage = {"op": "cancel", "reason": CANCEL_REASON}
            cancel_watch = asyncio.get_running_loop().create_task(
                forward_cancel(worker, cancel, cancelled, scope, grace_seconds))
            inputs = forward_input(worker, call.get("inbox"))
            try:
                await worker.send(message)
                while True:
                    received = await worker.recv()
                    if received is None:
                        return await crashed(worker, tool, containment, fate)
                    if received["op"] == "result":
                        return dict(received)
                    if received["op"] in ("output", "spawned", "input_closed"):
                        if on_event is None:
                            raise ProtocolError(f"the worker sent {received['op']} for a call that streams nothing")
                        on_event(received)
                        continue
                    await on_progress(dict(received))
            finally:
                cancel_watch.cancel()
                if inputs is not None:
                    inputs.cancel()
    except TimeoutError:
        containment.kill_tree(worker.pid, worker.slot)
        return _failure(
            ErrorCode.WORKER_HUNG,
            f"the worker for {tool} did not finish within its deadline plus "
            f"{grace_seconds:g} s of grace and was killed with its whole process tree",
        )
    except ProtocolError as exc:
        containment.kill_tree(worker.pid, worker.slot)
        return _failure(ErrorCode.WORKER_CRASHED,
                        f"the worker for {tool} broke protocol ({exc}) and was killed with its whole process tree",
                        {"reason": "protocol"})
    except OSError:  # it closed its channel while we were writing the call
        return await crashed(worker, tool, containment, fate)


def forward_input(worker: WorkerHandle, inbox: asyncio.Queue[InputMessage] | None) -> asyncio.Task[None] | None:
    """A background job's input (its ``inbox``, filled by :meth:`peon.supervisor.jobs.JobTable.write`)
    sent to the worker or job host that runs it, in order, until the task is cancelled; None without one."""
    if inbox is None:
        return None

    async def forward() -> None:
        while True:
            await send_quietly(worker, await inbox.get())

    return asyncio.get_running_loop().create_task(forward())


async def send_quietly(worker: WorkerHandle, message: CancelMessage | InputMessage) -> None:
    """Send ``message``; a worker that is gone is not told (whoever reads its channel learns it)."""
    try:
        await worker.send(message)
    except OSError:
        pass


async def forward_cancel(worker: WorkerHandle, message: CancelMessage, cancelled: asyncio.Event,
                         scope: asyncio.Timeout, grace_seconds: float) -> None:
    """Once ``cancelled`` is set, send ``message`` and bound the wait by the cancel grace + the worker
    grace from now (never later than the deadline's bound already was)."""
    await cancelled.wait()
    await send_quietly(worker, message)
    limit = asyncio.get_running_loop().time() + CANCEL_GRACE_SECONDS + grace_seconds
    when = scope.when()
    if when is None or limit < when:
        scope.reschedule(limit)


async def crashed(worker: WorkerHandle, tool: str, containment: Containment,
                  fate: Callable[[int | None], str | None]) -> dict[str, Any]:
    """The outcome of a worker that closed its channel before its result: how it ended, once it has
    (killed with its tree if it does not exit in time)."""
    try:
        code = await worker.wait_exit()
    except TimeoutError:
        containment.kill_tree(worker.pid, worker.slot)
        return _failure(ErrorCode.WORKER_CRASHED, f"the worker for {tool} closed its channel and was killed")
    how = describe_exitcode(code)
    if containment.oom_killed(worker.slot):
        return _failure(ErrorCode.WORKER_OOM, f"the worker for {tool} was {how} by the out-of-memory killer")
    hint = " (the out-of-memory killer or another process)" if how == "killed by SIGKILL" else ""
    forkserver = fate(worker.forkserver)
    if code is None:  # the forkserver reports each worker's status: say what became of it
        how = "exited"
        hint = " (its exit status was not reported)"
    if forkserver:
        hint = f" ({forkserver})"
    return _failure(
        ErrorCode.WORKER_CRASHED,
        f"the worker for {tool} {how}{hint} before reporting a result; {tool} did not complete, and the "
        "next call gets a new worker",
        {"status": how, **({"forkserver": forkserver} if forkserver else {})},
    )
