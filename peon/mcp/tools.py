"""Peon's tools as MCP sees them: descriptors for ``tools/list`` and results for ``tools/call``.

Promises:

* every descriptor sets all four behaviour hints from the tool's declared risk (a client assumes the
  worst for a missing hint; an unknown risk gets the most cautious set);
* a field a revision does not define is not sent to a client speaking it;
* a checkpointed call that changed the workspace (or could not be checkpointed) carries its
  ``changes`` under ``_meta["peon/changes"]`` and one text block saying what — never in the structured
  content, which is the tool's; a call that changed nothing carries neither;
* a tool's success is a result whose structured content is the tool's value (it conforms to the
  declared ``outputSchema``) and whose text block holds the same value as JSON;
* a tool's failure is a result with ``isError: true`` whose text block starts with the stable error code
  (``"denied: ..."``), so the model sees it. It carries no ``structuredContent`` — that field must
  conform to the tool's ``outputSchema``, and clients that validate it (the official TypeScript SDK
  does, even on error results) would reject the whole answer. Programs read the error as an object under
  ``_meta["peon/error"]``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from peon.client.result import ToolResult, change_counts

from peon.mcp.revisions import at_least

ERROR_META_KEY = "peon/error"  # where an error result carries {"code", "message", "details"?} for programs
IDEMPOTENCY_KEY = "peon/idempotencyKey"  # a call's key: a retry after a lost answer never runs it twice
CHANGES_META_KEY = "peon/changes"  # what a call changed in the workspace (its checkpoints), for programs
RISK_META_KEY = "peon/risk"  # a descriptor's declared risk, for programs (the hints cannot tell process from delegate)

# Every hint set explicitly: a client assumes the worst for a missing one.
_HINTS = {
    "read_only": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False},
    "filesystem": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": False},
    "process": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": True},
    "delegate": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": True},
}


def annotations_for(risk: str) -> dict[str, bool]:
    """Hints from a declared risk; an unknown risk gets the most cautious set."""
    return dict(_HINTS.get(risk, _HINTS["delegate"]))


def tool_descriptor(tool: Mapping[str, Any], version: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": tool["name"],
        "description": tool["description"],
        "inputSchema": tool["input_schema"],
    }
    if at_least(version, "2025-06-18"):
        out["outputSchema"] = tool.get("output_schema") or {"type": "object"}
        out["_meta"] = {RISK_META_KEY: str(tool["risk"])}
    if at_least(version, "2025-03-26"):
        out["annotations"] = annotations_for(str(tool["risk"]))
    return out


def render_text(value: Any) -> str:
    """The text block: the structured value serialized as JSON, as clients without structured output read it."""
    return json.dumps(value, ensure_ascii=False, indent=2)


def call_result(result: ToolResult, version: str) -> dict[str, Any]:
    """A ``tools/call`` result. Tool failures are results with ``isError`` and the stable code."""
    notes = [{"type": "text", "text": f"Note from a hook: {note}"} for note in result.notes]
    changed = describe_changes(result.changes) if result.changes is not None else ""
    if changed:
        notes.append({"type": "text", "text": changed})
    if result.ok:
        structured: dict[str, Any] = dict(result.value or {})
        out: dict[str, Any] = {"content": [{"type": "text", "text": render_text(structured)}, *notes],
                               "isError": False}
        if at_least(version, "2025-06-18"):
            out["structuredContent"] = structured
        if changed:
            out["_meta"] = {CHANGES_META_KEY: result.changes}
        return out
    assert result.error is not None
    error: dict[str, Any] = {"code": result.error.code, "message": result.error.message}
    text = f"{result.error.code}: {result.error.message}"
    if result.error.details:
        error["details"] = result.error.details
        text += "\ndetails: " + json.dumps(result.error.details, ensure_ascii=False, sort_keys=True)
    meta: dict[str, Any] = {ERROR_META_KEY: error}
    if changed:
        meta[CHANGES_META_KEY] = result.changes
    return {"content": [{"type": "text", "text": text}, *notes], "isError": True, "_meta": meta}


def describe_changes(changes: Mapping[str, Any]) -> str:
    """One line for the model of what a call changed in the workspace ("" when it changed nothing)."""
    if changes.get("not_checkpointed"):
        return f"Workspace changes: not checkpointed ({changes['not_checkpointed']})"
    counts = change_counts(changes)
    return f"Workspace changes: {counts}; checkpoint before the call: {changes.get('checkpoint')}" if counts else ""
