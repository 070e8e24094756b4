"""``bash``: run a command with ``/bin/bash -lc`` in the workspace. Risk: process.

Promise: the command runs under the shared process runner (:mod:`workers.runner`): new session and
process group (no controlling terminal), stdin ``/dev/null``, bounded combined output, TERM → 2 s →
KILL on cancel, KILL at the deadline, and nothing it started is alive when the result is returned. Its
environment is :func:`peon.environment.command_environment`'s (pagers, editors and prompts that would
wait on a person are off). A non-zero exit, a timeout and a cancel are results (with ``exit_code``,
``signal``, ``timed_out``, ``cancelled``), not errors.

When the session's OS sandbox is on (``[sandbox]``, :mod:`workers.sandbox`), the call is assessed
``sandboxed``, its approval details carry a ``"sandbox"`` object saying exactly what the command may
write, read and reach (kind, paths, network, isolation, Landlock ABI), and the worker runs the command
inside exactly that sandbox — or fails ``sandbox_unavailable`` without starting anything. The result's
``sandbox`` field says which sandbox it ran in (``null``: none).
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from peon.environment import command_environment
from peon.tool import RiskAssessment, SessionView, Tool, ToolContext, ToolRisk
from workers import sandbox
from workers.runner import PROCESS_OUTPUT_SCHEMA, ProcessSpec, run_process

from .process import NO_NUL_PATTERN, SANDBOX_RESULT_PROPERTY, TIMEOUT_PROPERTY, effective_timeout, with_session_timeout

BASH = "/bin/bash"


class BashTool(Tool):
    name = "bash"
    description = (
        "Run a shell command with /bin/bash -lc in the workspace and return its exit status and combined "
        "stdout/stderr (head and tail kept when long). Every process it starts is killed when it finishes, "
        "times out or is cancelled. Not sandboxed unless the session's OS sandbox is on; then the result's "
        "`sandbox` says where the command could write and whether it had network access, and other writes "
        "fail with EACCES."
    )
    risk = ToolRisk.PROCESS
    input_schema = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "pattern": NO_NUL_PATTERN,
                        "description": "The command line, passed to /bin/bash -lc."},
            "timeout_seconds": TIMEOUT_PROPERTY,
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    output_schema = {
        **PROCESS_OUTPUT_SCHEMA,
        "properties": {**PROCESS_OUTPUT_SCHEMA["properties"], "sandbox": SANDBOX_RESULT_PROPERTY},
    }

    def assess_risk(self, args: Mapping[str, Any], session: SessionView) -> RiskAssessment:
        if session.sandbox.get("active"):
            return RiskAssessment(self.risk, f"declared risk of {self.name}, inside the OS sandbox", sandboxed=True)
        return RiskAssessment(self.risk, f"declared risk of {self.name}")

    def schema_for(self, session: SessionView) -> Mapping[str, Any]:
        return with_session_timeout(self.input_schema, session)

    def approval_summary(self, args: Mapping[str, Any]) -> str:
        return f"run in /bin/bash -lc: {args['command']}"

    def approval_details(self, args: Mapping[str, Any], session: SessionView) -> dict[str, Any]:
        """The argv, directory and timeout, the simple commands the line runs as Peon parsed them
        (``segments``; ``unanalyzable`` and ``dynamic`` say what the parse could not settle), and, unless
        ``sandbox.mode`` is "off", the OS sandbox the command will run in (``sandbox``)."""
        from peon.shell import analyze  # here: only the supervisor parses; workers never load the grammar

        details = {"argv": [BASH, "-lc", args["command"]], "cwd": str(session.workspace),
                   "timeout_seconds": effective_timeout(args, session), **analyze(args["command"]).to_dict()}
        confinement = sandbox.call_details(session.sandbox)
        return details if confinement is None else {**details, "sandbox": confinement}

    def timeout_seconds(self, args: Mapping[str, Any], session: SessionView) -> float:
        return effective_timeout(args, session)

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        confinement = sandbox.confinement_for(ctx)
        spec = ProcessSpec([BASH, "-lc", args["command"]], str(ctx.workspace), command_environment(ctx.session),
                           sandbox=confinement)
        outcome = await run_process(spec, ctx)
        return {**outcome.to_value(), "timeout_seconds": effective_timeout(args, ctx.session),
                "sandbox": sandbox.result_summary(ctx.approved.get("sandbox") if confinement else None)}
