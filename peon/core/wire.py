"""The messages between a session (:class:`peon.Session`, the client) and its supervisor process.

Promise: every message on that channel is one of the ``TypedDict`` shapes below, told apart by ``op``
(:data:`ClientToSupervisorOp` from the client, :data:`SupervisorToClientOp` from the supervisor); framing
and bounds are :mod:`peon.core.framing`'s. The supervisor checks what it receives field by field (it
trusts nothing), and the client answers any call whose message it cannot read; these types say what a
well-formed message holds, for both sides and for type checkers. Each name says who sends it
(``Client*``, ``Supervisor*``), so none is taken for a message between the supervisor and a worker
(:mod:`peon.workers.messages`).
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from peon.core.answers import AnswerName, Scope

ClientToSupervisorOp = Literal["start", "call", "cancel", "approval_answer", "close"]
SupervisorToClientOp = Literal["ready", "fatal", "result", "progress", "started", "approval_request", "worker",
                               "worker_gone"]


# -- from the client ------------------------------------------------------------------------------

class ClientStart(TypedDict):
    op: Literal["start"]
    workspace: str
    session_id: str
    state_dir: str
    config: dict[str, Any]  # peon.client.config.LoadedConfig.to_wire()
    tools: list[str]  # import paths, "package.module:ToolClass"
    env: dict[str, str]  # the session's environment, exactly (an empty one stays empty)
    approver: bool  # without one, "ask" is denied at once
    started_notices: bool  # send "started" with the time a running call must be answered by


class ClientCall(TypedDict):
    op: Literal["call"]
    id: str
    tool: str
    args: Any
    progress: bool
    trace: NotRequired[dict[str, str]]  # the caller's W3C trace context, for the commands the call starts
    auto_yield: NotRequired[bool]  # False: answered at its end despite limits.yield_after_seconds (an MCP task)


class ClientCancel(TypedDict):
    op: Literal["cancel"]
    id: str


class ClientClose(TypedDict):
    op: Literal["close"]


class _ClientApprovalAnswerFields(TypedDict, total=False):
    scope: Scope
    reason: str
    approver_error: bool
    prefix: str  # scope "prefix": the words every simple command must start with
    save: bool  # scope "prefix": also save it as an allow rule in the user's configuration


class ClientApprovalAnswer(_ClientApprovalAnswerFields):
    op: Literal["approval_answer"]
    request_id: Any
    decision: AnswerName | str  # anything else is read as a denial by the supervisor


ClientMessage = ClientStart | ClientCall | ClientCancel | ClientClose | ClientApprovalAnswer


# -- from the supervisor --------------------------------------------------------------------------

class _SupervisorErrorDetails(TypedDict, total=False):
    details: dict[str, Any]


class SupervisorErrorBody(_SupervisorErrorDetails):
    code: str  # a peon.core.errors.ErrorCode value
    message: str


class SupervisorFatal(TypedDict):
    op: Literal["fatal"]
    error: SupervisorErrorBody


class _SupervisorResultFields(TypedDict, total=False):
    value: dict[str, Any]
    error: SupervisorErrorBody
    notes: list[str]  # for the agent, from the user's after-call hooks
    changes: dict[str, Any]  # what the call changed in the workspace (checkpoints: peon.checkpoints)


class SupervisorResult(_SupervisorResultFields):
    op: Literal["result"]
    id: str
    ok: bool


class SupervisorStarted(TypedDict):
    op: Literal["started"]
    id: str
    answer_by: float  # time.monotonic() by which the supervisor must have answered


class SupervisorWorker(TypedDict):
    """A worker started (process-tree containment): the client kills its tree if it outlives the supervisor."""

    op: Literal["worker"]
    pid: int
    start_time: float  # psutil's create_time: with the pid, names one process


class SupervisorWorkerGone(TypedDict):
    op: Literal["worker_gone"]
    pid: int


class SupervisorProgress(TypedDict, total=False):
    op: Literal["progress"]
    id: str
    elapsed_ms: int  # as the worker reported it (peon.workers.messages.ProgressMessage)
    output_bytes: int


class SupervisorApprovalRequest(TypedDict, total=False):
    op: Literal["approval_request"]
    request_id: str
    call_id: str
    tool: str
    risk: str
    risk_reason: str
    summary: str
    details: dict[str, Any]
    canonical_input: str
    sandboxed: bool
    scopes: list[Scope]
    prefix_scope: bool  # scope "prefix" may be answered too (a call with a command)
    timeout_seconds: float
