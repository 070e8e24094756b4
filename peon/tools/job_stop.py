"""``job_stop``: end a background job. Risk: process.

Promise: served by the supervisor (``ctx.jobs``); a running job is cancelled exactly like a cancelled
call — ``SIGTERM`` to its process group, up to 2 s, ``SIGKILL``, then every descendant of its worker —
and the call returns its final state and the tail of its output once that is done. A job that has
already ended is returned as it is (stopping is idempotent).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from peon.core.jobs import JOB_INFO_PROPERTIES, page_value
from peon.core.tool import Prepared, SessionView, Tool, ToolContext, ToolRisk

from peon.tools.job_output import JOB_ID_PROPERTY

TAIL_BYTES = 4096


class JobStopTool(Tool):
    name = "job_stop"
    description = (
        "Stop a background job: TERM to its process group, 2 s, then KILL for everything it started. Returns its "
        "final state and the last few KB of its output."
    )
    risk = ToolRisk.PROCESS
    served_by_supervisor = True
    input_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "properties": {"job_id": JOB_ID_PROPERTY},
        "required": ["job_id"],
        "additionalProperties": False,
    }

    output_schema: ClassVar[Mapping[str, Any] | None] = {
        "type": "object",
        "properties": {**JOB_INFO_PROPERTIES,
                       "output_tail": {"type": "string", "description": "The last few KB of its output."},
                       "tail_offset": {"type": "integer", "description": "Absolute offset of output_tail."}},
        "required": ["job_id", "state"],
    }

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Prepared:
        return Prepared(self.risk, self.declared_risk_reason(),
                        f"stop job {args['job_id']} and every process it started", timeout_seconds=30.0)

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        jobs = ctx.jobs
        info = await jobs.stop(args["job_id"])
        page = jobs.read(info.job_id, max(info.output_bytes - TAIL_BYTES, 0), TAIL_BYTES)
        tail = page_value(page, raw=False, clean=jobs.clean_output, finished=info.state != "running")
        return {**info.to_dict(), "output_tail": tail["output"], "tail_offset": tail["offset"]}
