"""The per-call floor of the benchmarks: a tool that does nothing, in a module of its own.

A session's forkserver imports the modules of its tools, and every worker is forked from it: this
module imports only the tool contract, so a session that adds this tool forks workers as lean as any
session's. (Defined inside a benchmark script, it would bring that script's imports — the
supervisor's validation and configuration code among them — into every worker, and make each one's
fork, copied pages and exit cost more than a real session's.)
"""

from __future__ import annotations

from typing import Any

from peon.core.tool import Tool, ToolContext, ToolRisk


class NoopTool(Tool):
    """Validated, approved and executed in a worker, doing nothing: like ``read``, it starts no
    process, so its worker serves call after call (the floor of a call as Peon serves ``read``)."""

    name = "bench_noop"
    starts_processes = False
    description = "Return an empty object."
    risk = ToolRisk.READ_ONLY
    input_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def approval_summary(self, args: Any) -> str:
        return "nothing"

    async def execute(self, args: Any, ctx: ToolContext) -> dict[str, Any]:
        return {}
