"""The sans-I/O MCP API a transport uses, in one namespace.

Promise: every name a transport (stdio in :mod:`peon.mcp.stdio`, or any other) needs to turn bytes into
decisions and decisions into messages is importable from here; nothing here does I/O. Each idea lives in
its own module:

* :mod:`peon.mcp.jsonrpc` — JSON-RPC 2.0 message parsing and building;
* :mod:`peon.mcp.revisions` — the served revisions, their two eras, and result shaping per revision;
* :mod:`peon.mcp.tools` — tool descriptors and ``tools/call`` results;
* :mod:`peon.mcp.progress` — progress notifications;
* :mod:`peon.mcp.elicitation` — approval through elicitation and the signed ``requestState``;
* :mod:`peon.mcp.prompts` — skills as prompts;
* :mod:`peon.mcp.resources` — skills, jobs' output and workspace files as resources;
* :mod:`peon.mcp.completion` — argument completion;
* :mod:`peon.mcp.logs` — the client's log level and the rate-limited ``notifications/message``;
* :mod:`peon.mcp.features` — prompts, resources and completion requests as plans (an answer or one tool call);
* :mod:`peon.mcp.connection` — the per-connection state machine.
"""

from __future__ import annotations

from peon.mcp.connection import (
    CancelRequest,
    ClientReply,
    Connection,
    Event,
    Feature,
    Ignored,
    Reply,
    StartCall,
    TaskRequest,
    server_capabilities,
)
from peon.mcp.elicitation import (
    APPROVAL_KEY,
    DECISIONS,
    SCOPES,
    RequestStateSigner,
    approval_elicitation,
    approval_message,
    can_elicit_form,
    decision_from_elicitation,
    decision_from_retry,
    input_required,
)
from peon.mcp.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    NOT_READY,
    PARSE_ERROR,
    Malformed,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
    error_response,
    lone_surrogate,
    parse_message,
    result_response,
    shown,
    valid_id,
)
from peon.mcp.features import (
    RESOURCE_NOT_FOUND, Answer, Catalog, Plan, Refused, Step, failure, plan, prompts_changed, settle,
)
from peon.mcp.logs import LogFeed, approval_event, result_event
from peon.mcp.progress import progress_notification
from peon.mcp.resources import JobUri, ResourceProblem, Target, parse_uri
from peon.mcp.revisions import (
    CLIENT_CAPABILITIES_KEY,
    HANDSHAKE_VERSIONS,
    LATEST_HANDSHAKE,
    MODERN_VERSIONS,
    PROTOCOL_VERSION_KEY,
    SERVER_INFO_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
    Era,
    ServerIdentity,
    at_least,
    is_modern,
    negotiate,
    respond,
)
from peon.mcp.tasks import RELATED_TASK_KEY, Task, TaskAction, TaskBook
from peon.mcp.tools import ERROR_META_KEY, annotations_for, call_result, render_text, tool_descriptor

__all__ = [
    "APPROVAL_KEY", "CLIENT_CAPABILITIES_KEY", "DECISIONS", "ERROR_META_KEY", "HANDSHAKE_VERSIONS", "INTERNAL_ERROR",
    "INVALID_PARAMS", "INVALID_REQUEST", "LATEST_HANDSHAKE", "METHOD_NOT_FOUND", "MODERN_VERSIONS", "NOT_READY",
    "PARSE_ERROR",
    "PROTOCOL_VERSION_KEY", "RELATED_TASK_KEY", "RESOURCE_NOT_FOUND", "SCOPES", "SERVER_INFO_KEY",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "Answer", "CancelRequest", "Catalog", "ClientReply", "Connection", "Era", "Event", "Feature", "Ignored",
    "JobUri", "LogFeed", "Malformed", "Message", "Notification", "Plan", "Refused", "Reply", "Request", "RequestId",
    "RequestStateSigner", "ResourceProblem", "Response", "ServerIdentity", "StartCall", "Step", "Target",
    "Task", "TaskAction", "TaskBook", "TaskRequest",
    "annotations_for", "approval_elicitation", "approval_event", "approval_message", "at_least", "call_result",
    "can_elicit_form", "decision_from_elicitation", "decision_from_retry", "error_response",
    "failure", "input_required", "is_modern", "lone_surrogate", "negotiate", "parse_message", "parse_uri", "plan",
    "progress_notification", "prompts_changed", "render_text", "respond", "result_event", "result_response",
    "server_capabilities", "settle", "shown", "tool_descriptor", "valid_id",
]
