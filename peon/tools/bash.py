"""``bash``: run a command with ``/bin/bash -lc`` in the workspace. Risk: process.

Promise: the command runs under the shared process runner (:mod:`peon.workers.runner`): new session and
process group (no controlling terminal), stdin ``/dev/null``, bounded combined output, TERM → 2 s →
KILL on cancel, KILL at the deadline, and nothing it started is alive when the result is returned. Its
environment is :func:`peon.core.environment.command_environment`'s (pagers, editors and prompts that would
wait on a person are off). A non-zero exit, a timeout and a cancel are results (with ``exit_code``,
``signal``, ``timed_out``, ``cancelled``), not errors.

The command line is analysed once per call, by :meth:`BashTool.prepare` in the supervisor
(:func:`peon.approval.shell.analyze`): the approval details show its simple commands, and the approval
policy's command rules judge that same analysis.

When the session's OS sandbox is on (``[sandbox]``, :mod:`peon.workers.sandbox`), the call is rated
``sandboxed``, its approval details carry a ``"sandbox"`` object saying exactly what the command may
write, read and reach (kind, paths, network, isolation, Landlock ABI), and the worker runs the command
inside exactly that sandbox — or fails ``sandbox_unavailable`` without starting anything. The result's
``sandbox`` field says which sandbox it ran in (``null``: none).

``cwd`` (workspace-relative) is resolved beneath the pinned workspace root with ``read``'s rules
(:func:`peon.workers.fs.resolve`: symlinks that stay inside are followed, leaving is ``outside_workspace``)
when the call is approved; the approval shows the resolved directory and its identity, and the worker
opens it again beneath the root, insists on the same device and inode (else
``changed_since_approval``) and starts the command there with ``fchdir`` on that descriptor — the
typed path is never used to choose the directory.

``background: true`` starts the command as a job (docs/jobs.md): same approval, risk, environment,
process group, containment and sandbox; the call is answered once the command has started (after
``yield_seconds`` more, with the output so far) with its ``job_id``, and the job runs until it exits,
is stopped (``job_stop``), reaches its deadline (``jobs.max_lifetime_seconds`` unless
``timeout_seconds`` is shorter) or its session closes. Every result carries the ``job_id`` under which
``job_output`` pages through the output the head+tail ``output`` left out.

``stdin`` (a string, at most ``jobs.max_write_bytes`` in UTF-8) is written to the command's standard
input, which is then closed. A background job may take input while it runs (``job_write``): with
``tty: true`` it runs on a pseudo-terminal of its own (``rows`` x ``cols``, ``TERM=xterm-256color``;
its own session, the terminal its controlling terminal), with ``stdin: "pipe"`` its stdin stays an open
pipe. For such a job whose command is a lone shell (``bash -i``), the analysis no longer counts the
shell's reading its commands from its input as unseen: every line written to it is analysed and ruled
as a ``bash`` command is (:mod:`peon.approval.typed_input`). The approval details say which input the
command has (``stdin``: ``{"kind": "data", "bytes": n}``, ``{"kind": "pipe"}`` or ``{"kind": "tty",
"rows": r, "cols": c}``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar

from peon.core.environment import command_environment, shell_flag
from peon.core.errors import ErrorCode, ToolError
from peon.core.paths import parse_workspace_path
from peon.core.output.screen import DEFAULT_COLS, DEFAULT_ROWS, MAX_COLS, MAX_ROWS
from peon.core.tool import Prepared, SessionView, Tool, ToolContext, ToolRisk
from peon.workers import fs, sandbox
from peon.workers.runner import PROCESS_OUTPUT_SCHEMA, ProcessSpec, run_process

from peon.tools.shared.process import (
    NO_NUL_PATTERN,
    SANDBOX_RESULT_PROPERTY,
    TIMEOUT_PROPERTY,
    effective_timeout,
    with_session_timeout,
)
from peon.tools.shared.resolver import session_resolver

BASH = "/bin/bash"
TRUE = "/bin/true"
PIPE = "pipe"  # with background: stdin stays an open pipe that job_write feeds
MAX_STDIN_CHARS = 1 << 20  # the schema's bound; jobs.max_write_bytes bounds its UTF-8 bytes


class BashTool(Tool):
    name = "bash"
    description = (
        "Run a shell command with /bin/bash -lc in the workspace and return its exit status and combined "
        "stdout/stderr (head and tail kept when long; the full output stays retrievable with job_output and "
        "the result's job_id). Every process it starts is killed when it finishes, times out or is cancelled; "
        "with background: true it runs on as a job until it exits or job_stop ends it (with tty: true on a "
        "terminal of its own, for a REPL, a debugger or an editor: type into it with job_write). stdin gives the "
        "command its input. Not sandboxed unless the "
        "session's OS sandbox is on; then the result's "
        "`sandbox` says where the command could write and whether it had network access, and other writes "
        "fail with EACCES."
    )
    risk = ToolRisk.PROCESS
    input_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "pattern": NO_NUL_PATTERN,
                        "description": "The command line, passed to /bin/bash -lc."},
            "timeout_seconds": TIMEOUT_PROPERTY,
            "cwd": {"type": "string", "minLength": 1, "pattern": NO_NUL_PATTERN,
                    "description": "Workspace-relative directory to run in (default: the workspace root)."},
            "background": {"type": "boolean",
                           "description": "Start the command as a background job and return its job_id once it "
                                          "has started; read its output with job_output, end it with job_stop."},
            "yield_seconds": {"type": "number", "minimum": 0, "maximum": 60,
                              "description": "With background: wait this long after the start (less if the job "
                                             "ends) and return the output so far."},
            "stdin": {"type": "string", "maxLength": MAX_STDIN_CHARS,
                      "description": "Text written to the command's standard input, which is then closed. With "
                                     "background: true, \"pipe\" keeps stdin open for job_write instead."},
            "tty": {"type": "boolean",
                    "description": "With background: true, run the command on a terminal of its own (a REPL, a "
                                   "debugger, an editor): type into it with job_write, see it with job_output "
                                   "screen: true."},
            "rows": {"type": "integer", "minimum": 1, "maximum": MAX_ROWS,
                     "description": f"With tty: the terminal's rows (default {DEFAULT_ROWS})."},
            "cols": {"type": "integer", "minimum": 1, "maximum": MAX_COLS,
                     "description": f"With tty: the terminal's columns (default {DEFAULT_COLS})."},
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    output_schema: ClassVar[Mapping[str, Any] | None] = {
        **PROCESS_OUTPUT_SCHEMA,
        "properties": {
            **PROCESS_OUTPUT_SCHEMA["properties"], "sandbox": SANDBOX_RESULT_PROPERTY,
            "background": {"type": "boolean"},
            "state": {"type": "string", "enum": ["running", "exited", "killed"],
                      "description": "A background job's state when the call returned."},
        },
    }
    keeps_output = True

    def schema_for(self, session: SessionView) -> Mapping[str, Any]:
        return with_session_timeout(self.input_schema, session)

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Prepared:
        """Declared risk (``sandboxed`` inside the OS sandbox). The details: the argv, directory and
        timeout, the simple commands the line runs as Peon parsed them (``segments``; ``unanalyzable`` and
        ``dynamic`` say what the parse could not settle), and, unless ``sandbox.mode`` is "off", the OS
        sandbox the command will run in (``sandbox``). The analysis goes to the policy with them."""
        from peon.approval.shell import analyze  # here: only the supervisor parses; workers never load the grammar
        from peon.approval.typed_input import shell_input_note_cleared

        timeout = call_timeout(args, session)
        flag = shell_flag(session.config.environment)  # -c with [environment] login_profile = false
        details = {"argv": [BASH, flag, args["command"]], **_resolve_cwd(args, session), "timeout_seconds": timeout}
        analysis = analyze(args["command"])
        stdin = input_details(args, session)
        if stdin is not None:
            details["stdin"] = stdin
            if stdin["kind"] != "data":  # what it reads from its input is judged line by line (job_write)
                analysis = shell_input_note_cleared(analysis)
        details.update(analysis.to_dict())
        if args.get("background"):
            details["background"] = True
        confinement = sandbox.call_details(session.sandbox)
        if confinement is not None:
            details["sandbox"] = confinement
        sandboxed = bool(session.sandbox.get("active"))
        reason = self.declared_risk_reason() + (", inside the OS sandbox" if sandboxed else "")
        return Prepared(self.risk, reason, f"run in /bin/bash {flag}: {args['command']}", details, timeout,
                        sandboxed=sandboxed, command_analysis=analysis)

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        confinement = sandbox.confinement_for(ctx)
        cwd_fd = _open_approved_cwd(args, ctx)
        if cwd_fd is not None and isinstance(confinement, sandbox.BwrapConfinement):
            # bwrap enters its directory by path (--chdir) inside its own mount namespace: the resolved,
            # just-checked path, never the typed one.
            confinement.cwd = str(ctx.workspace / str(ctx.approved["cwd_path"]))
        try:
            env = command_environment(ctx.session, ctx.trace)
            approved_stdin = ctx.approved.get("stdin")
            stdin: dict[str, Any] = approved_stdin if isinstance(approved_stdin, dict) else {}
            kind = stdin.get("kind")
            if kind == "tty":
                env["TERM"] = "xterm-256color"
            data = args.get("stdin") if kind == "data" else None
            spec = ProcessSpec([BASH, shell_flag(ctx.session.config.environment), args["command"]], str(ctx.workspace),
                               env, sandbox=confinement, cwd_fd=cwd_fd,
                               stdin="tty" if kind == "tty" else "pipe" if kind == PIPE else "null",
                               stdin_data=data.encode("utf-8") if isinstance(data, str) else None,
                               rows=int(stdin.get("rows") or DEFAULT_ROWS), cols=int(stdin.get("cols") or DEFAULT_COLS))
            outcome = await run_process(spec, ctx)
        finally:
            if cwd_fd is not None:
                os.close(cwd_fd)
        return {**outcome.to_value(), "timeout_seconds": call_timeout(args, ctx.session),
                "sandbox": sandbox.result_summary(ctx.approved.get("sandbox") if confinement else None, confinement)}

    async def warm_up(self, ctx: ToolContext, *, processes: bool) -> None:
        """Start ``/bin/true`` (not a shell: no profile runs) through the process runner, with the
        call's output sink: the runner's whole path, no effect."""
        if processes and os.access(TRUE, os.X_OK):
            await run_process(ProcessSpec([TRUE], "/", command_environment(ctx.session)), ctx)


def call_timeout(args: Mapping[str, Any], session: SessionView) -> float:
    """How long a call may run: a job its lifetime (``jobs.max_lifetime_seconds``) or its own shorter
    ``timeout_seconds``, any other call :func:`~peon.tools.shared.process.effective_timeout`."""
    if args.get("background"):
        lifetime = float(session.config.jobs.max_lifetime_seconds)
        requested = args.get("timeout_seconds")
        return lifetime if requested is None else min(float(requested), lifetime)
    return effective_timeout(args, session)


def input_details(args: Mapping[str, Any], session: SessionView) -> dict[str, Any] | None:
    """What the command reads, for the approval details (see the module's promise); None: ``/dev/null``.
    ``invalid_input`` for ``tty``, ``rows``, ``cols`` or ``stdin: "pipe"`` where they do not apply,
    ``too_large`` for a ``stdin`` over ``jobs.max_write_bytes``."""
    background, tty, stdin = bool(args.get("background")), bool(args.get("tty")), args.get("stdin")
    if ("rows" in args or "cols" in args) and not tty:
        raise ToolError(ErrorCode.INVALID_INPUT, "rows and cols size a terminal: they need tty: true")
    if tty:
        if not background:
            raise ToolError(ErrorCode.INVALID_INPUT, "tty: true needs background: true (type into the job with "
                                                     "job_write; a foreground call has no one to type)")
        if stdin is not None:
            raise ToolError(ErrorCode.INVALID_INPUT, "a terminal job reads its terminal: write to it with job_write, "
                                                     "not stdin")
        return {"kind": "tty", "rows": int(args.get("rows") or DEFAULT_ROWS),
                "cols": int(args.get("cols") or DEFAULT_COLS)}
    if stdin is None:
        return None
    if stdin == PIPE and background:
        return {"kind": PIPE}
    size = len(str(stdin).encode("utf-8", "surrogatepass"))
    limit = int(session.config.jobs.max_write_bytes)
    if size > limit:
        raise ToolError(ErrorCode.TOO_LARGE, f"stdin holds {size} bytes; jobs.max_write_bytes is {limit}",
                        {"limit": "jobs.max_write_bytes", "value": limit, "bytes": size})
    return {"kind": "data", "bytes": size}


def _resolve_cwd(args: Mapping[str, Any], session: SessionView) -> dict[str, Any]:
    """The approval details of the call's directory: ``cwd`` (absolute, resolved), and for a ``cwd``
    argument ``cwd_path`` (resolved, workspace-relative) and ``cwd_id`` (device:inode)."""
    typed = args.get("cwd")
    if typed is None:
        return {"cwd": str(session.workspace)}
    path = parse_workspace_path(typed)
    if not path.parts:
        return {"cwd": str(session.workspace), "cwd_path": "."}
    with fs.workspace_root(session) as root:
        resolution = fs.resolve(root, path, follow_final=True, must_exist=True)
    if resolution.kind != "directory":
        raise ToolError(ErrorCode.NOT_A_DIRECTORY,
                        f"cwd {path.shown} resolves to {resolution.path!r}, a {resolution.kind}, not a directory",
                        {"cwd": typed, "resolved": resolution.path})
    return {"cwd": str(session.workspace / resolution.path), "cwd_path": resolution.path,
            "cwd_id": str(resolution.file)}


def _open_approved_cwd(args: Mapping[str, Any], ctx: ToolContext) -> int | None:
    """In the worker: an ``O_PATH`` descriptor of the approved directory, opened beneath the root and
    checked against the approved identity; None for the workspace root itself."""
    typed = args.get("cwd")
    if typed is None:
        return None
    path = parse_workspace_path(typed)
    if not path.parts:
        return None
    expected = fs.FileId.parse(ctx.approved.get("cwd_id"))
    if expected is None:
        raise ToolError(ErrorCode.CHANGED_SINCE_APPROVAL,
                        f"cwd {path.shown}: the call does not carry the approved directory; nothing was run",
                        {"rule": "approved_details"})
    resolver = session_resolver(ctx.session)
    with fs.workspace_root(ctx.session) as root:
        fd = fs.open_beneath(root, path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, resolver)
    if fs.FileId.of(os.fstat(fd)) != expected:
        os.close(fd)
        raise fs.changed_since_approval(path, f"the directory is no longer the approved one ({expected})")
    return fd
