"""What the supervisor redacts, and when a value is returned as it is.

Promise: every reply of the session (:func:`redact_reply`: its value, its error and its hooks' notes), every progress
message (:func:`redact_message`), every approval request put to the approver (:func:`shown`) and every
audit line (:func:`audited`) leaves the supervisor with the session's secrets replaced
(:func:`peon.core.redaction.session.redactor_for`; nothing when ``[redaction] enabled`` is false). A
reply says what was redacted in it — here and, for command output, in the worker
(``redacted``: how many values, of which kinds; never the values) — in its value, or in its error's
details. The one exception is deliberate: the result of a ``read`` of a secret-like path allowed as
such (:func:`deliberate`) is returned as read; its audit lines are still redacted. The
command a call runs, and every input a worker receives, is never changed: only what is shown.
:func:`describe` is what ``Session.info["redaction"]`` and ``peon doctor`` say of it: whether it is on,
and which scanner finds the formats (``hyperscan``, or ``python: why``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from peon.approval.policy import ApprovalRequest, Decision
from peon.core.redaction.redactor import summary
from peon.core.redaction.scan import engine
from peon.core.redaction.session import redactor_for
from peon.core.tool import SessionView

SECRET_PATH_REASON = "secret-like path"
REDACTED_KEY = "redacted"


def describe(session: SessionView) -> dict[str, Any]:
    """Whether redaction is on, of which kinds values are kept, and what finds the formats (this process's)."""
    config = session.config.redaction
    return {"enabled": config.enabled, "allow": sorted(config.allow), "engine": engine()}


def deliberate(tool: str, request: ApprovalRequest | None, decision: Decision | None) -> bool:
    """Whether a call's result is returned unredacted: a ``read`` rated for its secret-like path and
    allowed as such — by the approver (under the default policy such a read is asked for), a grant
    of theirs, or a policy that allows it — the content being what was approved."""
    return (tool == "read" and request is not None and decision is not None and decision.allowed
            and SECRET_PATH_REASON in request.risk_reason)


def _counted(previous: Any, counts: Counter[str]) -> None:
    """Add what a worker said it redacted (``previous``, as :func:`summary` made it) to ``counts``."""
    if isinstance(previous, dict) and isinstance(previous.get("kinds"), dict):
        for kind, count in previous["kinds"].items():
            if isinstance(kind, str) and isinstance(count, int) and not isinstance(count, bool) and count > 0:
                counts[kind] += count


def redact_reply(session: SessionView, reply: dict[str, Any], *, as_is: bool = False) -> dict[str, Any]:
    """``reply`` as the client may see it (``as_is``: a :func:`deliberate` call's, returned as it is)."""
    redactor = None if as_is else redactor_for(session)
    if redactor is None:
        return reply
    counts: Counter[str] = Counter()
    value, error = reply.get("value"), reply.get("error")
    if isinstance(value, dict):
        _counted(value.get(REDACTED_KEY), counts)
        value = {k: v for k, v in value.items() if k != REDACTED_KEY}
    if not redactor.finds_any([value, error, reply.get("notes")]):  # the common case: one scan
        return {**reply, "value": {**value, REDACTED_KEY: summary(counts)}} if counts and isinstance(value, dict) \
            else reply
    value = redactor.redact_value(value, counts) if value is not None else None
    error = redactor.redact_value(error, counts) if error is not None else None
    out = dict(reply)
    if isinstance(reply.get("notes"), list):  # the after-call hooks' notes may quote the output
        out["notes"] = redactor.redact_value(reply["notes"], counts)
    if "value" in reply:
        out["value"] = value
    if "error" in reply:
        out["error"] = error
    if counts:
        if isinstance(value, dict):
            out["value"] = {**value, REDACTED_KEY: summary(counts)}
        elif isinstance(error, dict):
            given = error.get("details")
            details: dict[str, Any] = given if isinstance(given, dict) else {}
            out["error"] = {**error, "details": {**details, REDACTED_KEY: summary(counts)}}
    return out


def redact_message(session: SessionView, message: dict[str, Any]) -> dict[str, Any]:
    """A progress (or other) message with every string in it redacted."""
    redactor = redactor_for(session)
    if redactor is None or not redactor.finds_any(message):
        return message
    redacted = redactor.redact_value(message)
    return redacted if isinstance(redacted, dict) else message


# Audit fields that hold only Peon's own facts (times, ids it made, digests, codes, counts): an audit
# line is scanned without them, and redacted whole when the rest holds anything.
PEON_FACTS = frozenset({"event", "time", "session_id", "risk", "sandboxed", "input_omitted", "input_sha256",
                        "duration_ms", "outcome", "job_id", "count", "cut_bytes"})


def audited(session: SessionView, entry: Any) -> Any:
    """An audit line as it is written: every string redacted (a literal token in a command line is
    written as its marker, with the same hash as everywhere in the session)."""
    redactor = redactor_for(session)
    if redactor is None or not isinstance(entry, dict):
        return entry if redactor is None else redactor.redact_value(entry)
    rest = {key: value for key, value in entry.items() if key not in PEON_FACTS}
    return redactor.redact_value(entry) if redactor.finds_any(rest) else entry


def shown(session: SessionView, entry: Any) -> Any:
    """An approval request or an audit line as it is shown or written: every string redacted."""
    redactor = redactor_for(session)
    return entry if redactor is None or not redactor.finds_any(entry) else redactor.redact_value(entry)
