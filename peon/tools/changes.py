"""``changes``: what this session's calls changed in the workspace, from their checkpoints. Risk: read-only.

Promise: served by the supervisor (``ctx.checkpoints``, :mod:`peon.supervisor.checkpointing`): without
input the session's checkpointed calls and jobs with what each changed; with ``call_id`` what that call
changed and its unified diff (bounded); with ``since`` everything changed since just before that call.
It changes nothing; a session without checkpoints answers ``not_found``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from peon.core.tool import Prepared, SessionView, Tool, ToolContext, ToolRisk

CALL_ID_PROPERTY = {"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z0-9._-]+$",
                    "description": "A call's id (or a job's: job-3), as `changes` lists them."}


class ChangesTool(Tool):
    name = "changes"
    description = ("What this session's calls changed in the workspace (files added, modified, deleted, renamed, "
                   "mode changes, lines): without input the list of calls; with call_id that call's changes and diff; "
                   "with since everything since just before that call.")
    risk = ToolRisk.READ_ONLY
    served_by_supervisor = True
    input_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "properties": {"call_id": CALL_ID_PROPERTY, "since": CALL_ID_PROPERTY,
                       "diff": {"type": "boolean", "default": True, "description": "Include the unified diff."}},
        "additionalProperties": False,
    }
    output_schema: ClassVar[Mapping[str, Any] | None] = {"type": "object"}

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Prepared:
        which = (f"call {args['call_id']}" if args.get("call_id") else f"since call {args['since']}"
                 if args.get("since") else "this session's calls")
        return Prepared(self.risk, self.declared_risk_reason(), f"show what {which} changed", timeout_seconds=60.0)

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        result: dict[str, Any] = await ctx.checkpoints.changes(args.get("call_id"), args.get("since"),
                                                               bool(args.get("diff", True)))
        return result
