"""The messages between the supervisor and a worker, and the supervisor's check of what a worker sends.

Promise (pure, no I/O): :func:`parse_worker_message` accepts exactly the messages a worker may send
during the call it serves — a ``progress``, ``output``, ``spawned``, ``input_closed`` or ``result`` message of *that*
call id, strict UTF-8 JSON
without lone surrogates, of the documented shape — and raises :class:`ProtocolError` with a sentence
for anything else. The supervisor treats that error as a crashed worker: a message that fails here
is never forwarded, audited or answered as if it were the call's outcome. Size is bounded before
this, by the channel's frame decoder (:data:`peon.core.framing.MAX_MESSAGE_BYTES`).

Wire format: each message is one frame of :mod:`multiprocessing.connection` (see
:mod:`peon.core.framing`) holding one UTF-8 JSON object. The supervisor sends ``call`` then possibly
``cancel``; the worker sends ``progress``, ``output`` (the command's bytes, at most
:data:`MAX_OUTPUT_CHUNK` each, with their absolute offset — consecutive, starting at 0) and at most
one ``spawned`` (its command has started: a background job is running) messages, then exactly one
``result``. A result with ``reuse: true`` says the worker will wait for another ``call`` on the same
channel (:mod:`peon.workers.reuse`); without it the worker exits once the channel closes.

While a background job runs the supervisor may send it ``input`` messages (the bytes for its command's
terminal or stdin pipe, base64, and ``eof``), and the worker may answer ``input_closed`` (at most once:
the command takes no more input, and what did not fit was dropped).

The session's **job host** (:mod:`peon.workers.job_host`) is a standby whose first message is
:data:`HOST_MESSAGE`; from then on the supervisor sends it a ``call`` per background job (each with its
job id as ``id``) and ``cancel`` messages naming the job (``id``), and the host sends, for each job
and tagged with its id, ``spawned``, ``output``, ``input_closed`` and exactly one ``result``, the jobs' messages
interleaved; :func:`parse_host_message` accepts exactly those of the jobs it runs.

An ``output`` message is the one frame that is not JSON: command output is bulk data (base64 in JSON
made a streamed 256 MiB flood take 7-9 s; as binary frames it took 0.9-1.4 s, against 0.35-0.45 s
without streaming, on the loaded 2-core development machine). Its
payload is :data:`OUTPUT_TAG` (0x00, never the first byte of a JSON object), one byte giving the length
of the call id, the call id (ASCII), the offset as 8 bytes big-endian, then the bytes
(:func:`encode_output`); :func:`parse_worker_message` checks it like any other message.
"""

from __future__ import annotations

import base64
import json
import signal
import struct
from collections.abc import Container
from typing import Any, Literal, NotRequired, TypedDict

from peon.core.errors import ErrorCode
from peon.core.text import shorten

SupervisorOp = Literal["call", "cancel", "host", "input"]
WorkerOp = Literal["progress", "output", "spawned", "input_closed", "result"]
WORKER_OPS: frozenset[str] = frozenset(("progress", "output", "spawned", "input_closed", "result"))
MAX_OUTPUT_CHUNK = 1 << 20  # bytes of command output in one ``output`` message
MAX_INPUT_BYTES = 1 << 20  # bytes of input to a job in one ``input`` message
OUTPUT_TAG = b"\x00"
_OFFSET = struct.Struct(">Q")
_ERROR_CODES = frozenset(code.value for code in ErrorCode)


OutputStreaming = Literal["live", "end"]


class CallMessage(TypedDict):
    op: Literal["call"]
    id: str
    tool: str
    args: dict[str, Any]
    deadline: float  # absolute, on CLOCK_MONOTONIC
    approved: dict[str, Any]  # the tool's approval details, as the approver saw them
    progress: bool  # the caller wants progress messages
    # send the command's output as ``output`` messages for the supervisor's output store: "live" as it comes
    # (background jobs), "end" kept by the worker and sent when the command ends (foreground calls), or not
    stream: OutputStreaming | None
    trace: NotRequired[dict[str, str]]  # the caller's W3C trace context (checked), for its commands


class InputMessage(TypedDict):
    """Input for a running job (its command's terminal or stdin pipe), then with ``eof`` the end of it."""

    op: Literal["input"]
    id: str  # the job's
    data: str  # base64 of at most MAX_INPUT_BYTES bytes
    eof: bool


def encode_input(job_id: str, data: bytes, eof: bool) -> InputMessage:
    return {"op": "input", "id": job_id, "data": base64.b64encode(data).decode("ascii"), "eof": eof}


def parse_input(message: dict[str, Any]) -> tuple[bytes, bool] | None:
    """The bytes and end-of-input flag of an ``input`` message from the supervisor; None when it is not one."""
    data, eof = message.get("data"), message.get("eof")
    if not isinstance(data, str) or not isinstance(eof, bool) or len(data) > (MAX_INPUT_BYTES * 4) // 3 + 4:
        return None
    try:
        return base64.b64decode(data, validate=True), eof
    except ValueError:
        return None


class CancelMessage(TypedDict):
    op: Literal["cancel"]
    reason: str
    id: NotRequired[str]  # to the job host: the job to stop


# The first message to a standby that is to become the session's job host.
HOST_MESSAGE = b'{"op":"host"}'


# The pool's wake, sent to a standby when a call arrives after a pause: the standby runs one warm-up
# round while the supervisor admits the call, so that the call meets warm caches. A signal, not a
# message: a message on the channel is a synchronous wake-up, which queued the standby on the
# supervisor's own core until the supervisor slept (every time, measured); a signal lets the
# scheduler run it on the idle core (it did whenever the standby had last run there).
WAKE_SIGNAL = signal.SIGUSR1


class WorkerErrorBody(TypedDict, total=False):
    code: str
    message: str
    details: dict[str, Any]


class ResultMessage(TypedDict, total=False):
    op: Literal["result"]
    id: str
    ok: bool
    value: dict[str, Any]
    error: WorkerErrorBody
    reuse: bool  # the worker offers to serve another call (peon.workers.reuse)


class ProgressMessage(TypedDict, total=False):
    op: Literal["progress"]
    id: str
    elapsed_ms: int
    output_bytes: int
    lines: list[str]  # the newest output lines, cleaned and shortened


class OutputMessage(TypedDict):
    op: Literal["output"]
    id: str
    offset: int  # absolute offset of the first byte in everything the command wrote
    data: bytes  # at most MAX_OUTPUT_CHUNK bytes


class SpawnedMessage(TypedDict):
    op: Literal["spawned"]
    id: str


class InputClosedMessage(TypedDict):
    """The job's command takes no more input: it stopped reading (or exited), or left more unread than
    ``jobs.max_queued_input_bytes``; the input that did not fit, and every later one, was dropped."""

    op: Literal["input_closed"]
    id: str


WorkerMessage = ResultMessage | ProgressMessage | OutputMessage | SpawnedMessage | InputClosedMessage


def encode_output(call_id: str, offset: int, data: bytes | memoryview) -> bytes:
    """The payload of an ``output`` message (see the module's wire format)."""
    ident = call_id.encode("ascii")
    return b"".join((OUTPUT_TAG, bytes((len(ident),)), ident, _OFFSET.pack(offset), data))


def _parse_output(payload: bytes, call_id: str) -> OutputMessage:
    if len(payload) < 2 or len(payload) < 2 + payload[1] + _OFFSET.size:
        raise ProtocolError("an output message is shorter than its header")
    end = 2 + payload[1]
    ident = payload[2:end].decode("ascii", errors="replace")
    if ident != call_id:
        raise ProtocolError(f"an output message names call {_short(ident)}, not the call it serves ({call_id})")
    (offset,) = _OFFSET.unpack_from(payload, end)
    data = payload[end + _OFFSET.size :]
    if len(data) > MAX_OUTPUT_CHUNK:
        raise ProtocolError(f"an output message holds {len(data)} bytes; at most {MAX_OUTPUT_CHUNK} are allowed")
    return {"op": "output", "id": ident, "offset": offset, "data": data}


class ProtocolError(Exception):
    """What a worker sent is not a well-formed message of its current call."""


def parse_worker_message(payload: bytes, call_id: str) -> WorkerMessage:
    if payload[:1] == OUTPUT_TAG:
        return _parse_output(payload, call_id)
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"a message is not valid UTF-8 (byte {exc.start})") from None
    try:
        message = json.loads(text)
    except RecursionError:
        raise ProtocolError("a message is nested too deeply") from None
    except ValueError as exc:
        raise ProtocolError(f"a message is not JSON ({exc})") from None
    if ("\\ud" in text or "\\uD" in text) and _has_lone_surrogate(message):
        raise ProtocolError("a message holds a lone surrogate, which is not valid Unicode")
    if not isinstance(message, dict):
        raise ProtocolError(f"a message is a JSON {type(message).__name__}, not an object")
    op = message.get("op")
    if op not in WORKER_OPS:
        raise ProtocolError(f"a message has op {_short(op)}; a worker may only send progress and result")
    if message.get("id") != call_id:
        raise ProtocolError(f"a {op} message names call {_short(message.get('id'))}, "
                            f"not the call it serves ({call_id})")
    if op == "result":
        _check_result(message)
    elif op == "output":
        raise ProtocolError("an output message must be a binary frame, not JSON")
    elif op in ("spawned", "input_closed") and set(message) != {"op", "id"}:
        raise ProtocolError(f"a {op} message has unknown fields")
    return message  # type: ignore[return-value]


def _check_result(message: dict[str, Any]) -> None:
    extra = set(message) - {"op", "id", "ok", "value", "error", "reuse"}
    if extra:
        raise ProtocolError(f"a result has unknown fields {sorted(extra)[:5]}")
    if "reuse" in message and message["reuse"] is not True:
        raise ProtocolError(f"a result's 'reuse' is {_short(message['reuse'])}; only true may be sent")
    ok = message.get("ok")
    if ok is True:
        if not isinstance(message.get("value"), dict) or "error" in message:
            raise ProtocolError("a successful result must carry an object 'value' and no 'error'")
        return
    if ok is not False:
        raise ProtocolError(f"a result's 'ok' is {_short(ok)}, not true or false")
    error = message.get("error")
    if not isinstance(error, dict) or "value" in message:
        raise ProtocolError("a failed result must carry an object 'error' and no 'value'")
    if error.get("code") not in _ERROR_CODES:
        raise ProtocolError(f"a failed result has error code {_short(error.get('code'))}, which is not a Peon code")
    if not isinstance(error.get("message"), str):
        raise ProtocolError("a failed result's error has no message")
    if "details" in error and not isinstance(error["details"], dict):
        raise ProtocolError("a failed result's error details are not an object")
    if set(error) - {"code", "message", "details"}:
        raise ProtocolError("a failed result's error has unknown fields")


def parse_host_message(payload: bytes, running: Container[str]) -> WorkerMessage:
    """A message from the job host: a worker's message (see :func:`parse_worker_message`) of one of the
    ``running`` jobs; :class:`ProtocolError` for anything else."""
    if payload[:1] == OUTPUT_TAG:
        job_id = payload[2 : 2 + payload[1]].decode("ascii", errors="replace") if len(payload) > 1 else ""
    else:
        try:
            peek = json.loads(payload)
        except (ValueError, RecursionError):
            peek = None
        named = peek.get("id") if isinstance(peek, dict) else None
        if not isinstance(named, str):
            return parse_worker_message(payload, "")  # says what is wrong with it
        job_id = named
    if job_id not in running:
        raise ProtocolError(f"a message of the job host names job {_short(job_id)}, which it does not run")
    return parse_worker_message(payload, job_id)


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _short(value: Any) -> str:
    return shorten(repr(value), 60)
