"""``job_list``: the session's jobs. Risk: read-only.

Promise: served by the supervisor (``ctx.jobs``); lists every job the session still has a record of —
background jobs and finished calls alike, oldest first — with its state, command, start time and
output size. It reads no process and no file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from peon.core.jobs import JOB_INFO_PROPERTIES
from peon.core.tool import Prepared, SessionView, Tool, ToolContext, ToolRisk


class JobListTool(Tool):
    name = "job_list"
    description = ("List this session's jobs (background jobs and finished bash/agent calls): job_id, state, "
                   "command, start time, output size.")
    risk = ToolRisk.READ_ONLY
    served_by_supervisor = True
    input_schema: ClassVar[Mapping[str, Any]] = {"type": "object", "properties": {}, "additionalProperties": False}
    output_schema: ClassVar[Mapping[str, Any] | None] = {
        "type": "object",
        "properties": {
            "jobs": {"type": "array", "items": {"type": "object", "properties": JOB_INFO_PROPERTIES}},
            "running": {"type": "integer", "description": "How many jobs are running."},
        },
        "required": ["jobs", "running"],
    }

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Prepared:
        return Prepared(self.risk, self.declared_risk_reason(), "list this session's jobs", timeout_seconds=10.0)

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        jobs = [info.to_dict() for info in ctx.jobs.list()]
        return {"jobs": jobs, "running": sum(1 for job in jobs if job["state"] == "running")}
