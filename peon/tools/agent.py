"""What the native agent adapters (``agent_claude``, ``agent_codex``, ``agent_pi``) share.

Promises:

* the only program an adapter starts is its configured executable (``agents.<name>.executable``, from
  the shipped defaults or the user's configuration — a project file cannot set it), found through the
  absolute entries of the session's ``PATH`` (relative entries, including an empty one, which means
  "the current directory", are ignored so a workspace cannot plant the executable), and started
  directly, without a shell, in the workspace;
* its argument vector is exactly ``[resolved executable, *agents.<name>.args, prompt]``: the prompt is
  one argument, whatever it contains; the model chooses nothing else;
* a prompt the agent's command line would not take as plain text is refused before approval with
  ``invalid_input`` naming the rule (:meth:`AgentTool.refuse_prompt`): a leading ``-`` when the fixed
  arguments do not end the options with ``--``, plus each agent's own hazards;
* a prompt longer than one ``execve`` argument may be (``MAX_ARG_STRLEN``, 131072 bytes with its NUL)
  or an argument vector and environment larger than ``ARG_MAX`` is ``too_large``, never an OS error;
* a missing executable is ``adapter_unavailable`` naming the executable and the ``PATH`` searched. It
  is detected twice: in the supervisor while the approval request is built (so nobody is asked to
  approve a program that is not there) and again in the worker right before the start, where the
  executable must still be the approved one (else ``adapter_unavailable``, nothing started);
* everything else — stdin ``/dev/null``, bounded output, TERM → grace → KILL on cancel, KILL at the
  deadline, no descendant outliving the call — is the shared process runner's (:mod:`workers.runner`),
  exactly as for ``bash``; a non-zero exit, a timeout or a cancel is a result, not an error.

The risk is ``delegate``: the child agent may read, write, run commands, use inherited credentials and
call its own model provider, none of which Peon sees or approves call by call. An adapter runs outside
the OS sandbox unless ``agents.<name>.sandbox = true`` (a child agent's own sandbox cannot start inside
Peon's); with it, the adapter is sandboxed exactly like ``bash`` and says so in its approval details.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

from peon.errors import ErrorCode, ToolError
from peon.tool import RiskAssessment, SessionView, Tool, ToolContext, ToolRisk, session_path
from workers import sandbox
from workers.runner import PROCESS_OUTPUT_SCHEMA, ProcessSpec, run_process

from .process import NO_NUL_PATTERN, SANDBOX_RESULT_PROPERTY, TIMEOUT_PROPERTY, effective_timeout

# Linux refuses (E2BIG) any single argv or envp string longer than MAX_ARG_STRLEN = 32 pages,
# terminating NUL included.
MAX_ARG_BYTES = 32 * 4096
MAX_PROMPT_BYTES = MAX_ARG_BYTES - 1
POINTER_BYTES = 8

DELEGATE_WARNING = (
    "This starts another coding agent with your permissions and the session's environment. It acts on "
    "its own: it may read and write any file you can, run commands, use inherited credentials (environment "
    "variables, credential files, logged-in CLIs) and send workspace content to its own model provider. "
    "Peon approves only this start; it does not see or approve what the agent does. Peon still enforces "
    "the time limit and kills every process the agent started when the call ends."
)

AGENT_INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "prompt": {
            "type": "string", "minLength": 1, "pattern": NO_NUL_PATTERN,
            "description": f"The task for the agent, passed as one command-line argument (at most "
                           f"{MAX_PROMPT_BYTES} bytes of UTF-8).",
        },
        "timeout_seconds": TIMEOUT_PROPERTY,
    },
    "required": ["prompt"],
    "additionalProperties": False,
}

AGENT_OUTPUT_SCHEMA = {
    **PROCESS_OUTPUT_SCHEMA,
    "properties": {
        **PROCESS_OUTPUT_SCHEMA["properties"],
        "agent": {"type": "string", "description": "Which adapter ran (claude, codex, pi)."},
        "executable": {"type": "string", "description": "The absolute path of the program that was started."},
        "sandbox": SANDBOX_RESULT_PROPERTY,
    },
}


# -- pure decisions ----------------------------------------------------------------------------------


def split_search_path(path: str) -> tuple[list[str], list[str]]:
    """(absolute directories in order, ignored relative entries) of a ``PATH`` value."""
    absolute, relative = [], []
    for entry in path.split(os.pathsep):
        (absolute if os.path.isabs(entry) else relative).append(entry)
    return absolute, relative


def bound_prompt(prompt: str, limit: int) -> tuple[str, bool]:
    """The prompt as an approver sees it: at most ``limit`` characters, its head and its tail."""
    if len(prompt) <= limit:
        return prompt, False
    head = prompt[: (limit + 1) // 2]
    tail = prompt[len(prompt) - limit // 2:] if limit // 2 else ""
    return f"{head}\n[... {len(prompt) - len(head) - len(tail)} characters omitted ...]\n{tail}", True


def exec_bytes(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """What ``execve`` charges against ``ARG_MAX``: every string with its NUL, and the pointer arrays."""
    strings = [*argv, *(f"{k}={v}" for k, v in env.items())]
    return sum(len(os.fsencode(s)) + 1 for s in strings) + POINTER_BYTES * (len(strings) + 2)


def check_prompt_bytes(tool: str, prompt: str) -> None:
    """The prompt must be valid UTF-8 and fit in one ``execve`` argument."""
    try:
        size = len(prompt.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ToolError(
            ErrorCode.INVALID_INPUT,
            f"the prompt for {tool} is not valid UTF-8: lone surrogate U+{ord(prompt[exc.start]):04X} at index "
            f"{exc.start}", {"rule": "utf8", "index": exc.start},
        ) from None
    if size > MAX_PROMPT_BYTES:
        raise ToolError(
            ErrorCode.TOO_LARGE,
            f"the prompt for {tool} is {size} bytes of UTF-8; one command-line argument can hold at most "
            f"{MAX_PROMPT_BYTES} bytes on Linux (MAX_ARG_STRLEN); shorten the prompt or point the agent "
            "at a file in the workspace",
            {"rule": "max_prompt_bytes", "bytes": size, "limit": MAX_PROMPT_BYTES},
        )


def describe_prompt(prompt: str, limit: int = 60) -> str:
    text = json.dumps(prompt, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 4] + '..."'


# -- resolution (stat calls only) ----------------------------------------------------------------------


def _is_executable_file(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def resolve_executable(name: str, path: str) -> str | None:
    """The absolute path ``name`` runs as with this ``PATH`` (absolute entries only), or ``None``."""
    if "/" in name:
        return os.path.normpath(name) if os.path.isabs(name) and _is_executable_file(name) else None
    directories, _ = split_search_path(path)
    for directory in directories:
        candidate = os.path.normpath(os.path.join(directory, name))
        if _is_executable_file(candidate):
            return candidate
    return None


def is_inside(path: str, directory: str) -> bool:
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


@dataclass(frozen=True)
class Invocation:
    agent: str
    configured: str  # the executable as configured (a bare name or an absolute path)
    executable: str  # the absolute path that will be started
    fixed_args: tuple[str, ...]
    prompt: str
    search_path: str

    @property
    def argv(self) -> tuple[str, ...]:
        return (self.executable, *self.fixed_args, self.prompt)


# -- the tool ----------------------------------------------------------------------------------------------


class AgentTool(Tool):
    """One native agent adapter; subclasses name the agent and add its command line's hazards."""

    agent: ClassVar[str]  # the key under [agents] in the configuration
    risk = ToolRisk.DELEGATE
    input_schema = AGENT_INPUT_SCHEMA
    output_schema = AGENT_OUTPUT_SCHEMA

    def refuse_prompt(self, prompt: str, fixed_args: Sequence[str]) -> str | None:
        """Why this agent would not read ``prompt``, placed after ``fixed_args``, as plain text."""
        if prompt.startswith("-") and "--" not in fixed_args:
            return (f"the prompt begins with '-', and the configured arguments {list(fixed_args)} do not end "
                    f"the options with '--', so {self.agent} would parse it as an option")
        return None

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Invocation:
        """Check the prompt and resolve the executable; raises the error the call should fail with."""
        command = getattr(session.config.agents, self.agent)
        prompt = args["prompt"]
        check_prompt_bytes(self.name, prompt)
        why = self.refuse_prompt(prompt, command.args)
        if why is not None:
            raise ToolError(ErrorCode.INVALID_INPUT, f"{self.name} refuses the prompt {describe_prompt(prompt)}: {why}",
                            {"rule": "prompt", "agent": self.agent})
        search_path = session_path(session.env)
        executable = resolve_executable(command.executable, search_path)
        if executable is None:
            raise self._unavailable(command.executable, search_path)
        invocation = Invocation(self.agent, command.executable, executable, tuple(command.args), prompt, search_path)
        self._check_exec_size(invocation, session.env)
        return invocation

    def _unavailable(self, configured: str, search_path: str) -> ToolError:
        details: dict[str, Any] = {"executable": configured, "path": search_path}
        if "/" in configured:
            why = ("it is not an absolute path" if not os.path.isabs(configured)
                   else "it does not exist or is not an executable regular file")
            message = f"{self.name}: the configured executable {configured!r} cannot be started: {why}"
        else:
            _, ignored = split_search_path(search_path)
            message = (f"{self.name}: no executable named {configured!r} in the session's PATH "
                       f"{search_path!r}; install {configured} there or set agents.{self.agent}.executable "
                       "in your user configuration")
            if ignored:
                details["ignored_relative_entries"] = ignored
                message += f" (relative PATH entries are not searched: {ignored})"
        return ToolError(ErrorCode.ADAPTER_UNAVAILABLE, message, details)

    def _check_exec_size(self, invocation: Invocation, env: Mapping[str, str]) -> None:
        for arg in invocation.argv[:-1]:
            if len(os.fsencode(arg)) > MAX_PROMPT_BYTES:
                raise ToolError(ErrorCode.TOO_LARGE, f"{self.name}: a configured argument of agents.{self.agent} is "
                                f"longer than the {MAX_PROMPT_BYTES} bytes one argument may hold",
                                {"rule": "max_arg_bytes"})
        limit = os.sysconf("SC_ARG_MAX")
        size = exec_bytes(invocation.argv, env)
        if size > limit:
            raise ToolError(
                ErrorCode.TOO_LARGE,
                f"{self.name}: the argument vector and environment take {size} bytes; the system limit "
                f"(ARG_MAX) is {limit}; shorten the prompt or the session's environment",
                {"rule": "arg_max", "bytes": size, "limit": limit},
            )

    # -- the OS sandbox: off for adapters unless agents.<name>.sandbox = true -------------------------------

    def sandboxed(self, session: SessionView) -> bool:
        return bool(getattr(session.config.agents, self.agent).sandbox)

    def assess_risk(self, args: Mapping[str, Any], session: SessionView) -> RiskAssessment:
        inside = self.sandboxed(session) and bool(session.sandbox.get("active"))
        return RiskAssessment(self.risk, f"declared risk of {self.name}" + (", inside the OS sandbox" if inside else ""),
                              sandboxed=inside)

    def _sandbox_details(self, session: SessionView) -> dict[str, Any] | None:
        return sandbox.call_details(
            session.sandbox, enabled=self.sandboxed(session),
            why_not=f"agents.{self.agent}.sandbox is false: the agent runs unsandboxed (its own sandbox could not "
                    "start inside Peon's)")

    # -- approval (in the supervisor) -------------------------------------------------------------------

    def approval_summary(self, args: Mapping[str, Any]) -> str:
        prompt = args["prompt"]
        return f"delegate to the {self.agent} agent ({len(prompt)}-character prompt): {describe_prompt(prompt, 120)}"

    def approval_details(self, args: Mapping[str, Any], session: SessionView) -> dict[str, Any]:
        invocation = self.prepare(args, session)
        shown, truncated = bound_prompt(invocation.prompt, session.config.agents.approval_prompt_chars)
        details: dict[str, Any] = {
            "agent": self.agent,
            "executable": invocation.executable,
            "executable_realpath": os.path.realpath(invocation.executable),
            "argv": list(invocation.argv[:-1]),
            "prompt": shown,
            "prompt_truncated": truncated,
            "prompt_chars": len(invocation.prompt),
            "prompt_position": "appended to argv as one final argument",
            "workspace": str(session.workspace),
            "timeout_seconds": effective_timeout(args, session),
            "path_searched": invocation.search_path,
            "warning": DELEGATE_WARNING,
        }
        confinement = self._sandbox_details(session)
        if confinement is not None:
            details["sandbox"] = confinement
        if is_inside(invocation.executable, str(session.workspace)):
            details["executable_in_workspace"] = True
            details["warning"] += (" The executable itself lies inside the workspace, so the project "
                                   "controls what it does.")
        return details

    def timeout_seconds(self, args: Mapping[str, Any], session: SessionView) -> float:
        return effective_timeout(args, session)

    # -- execution (in the worker) ------------------------------------------------------------------------

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        invocation = self.prepare(args, ctx.session)  # again: the file may have gone since approval
        approved = ctx.approved.get("executable")
        if approved is not None and approved != invocation.executable:
            raise ToolError(
                ErrorCode.ADAPTER_UNAVAILABLE,
                f"{self.name}: PATH now resolves {invocation.configured!r} to {invocation.executable}, not to "
                f"the approved {approved}; nothing was started",
                {"approved": approved, "resolved": invocation.executable},
            )
        confinement = sandbox.confinement_for(ctx, enabled=self.sandboxed(ctx.session))
        outcome = await run_process(ProcessSpec(invocation.argv, str(ctx.workspace), ctx.session.env, confinement), ctx)
        return {
            **outcome.to_value(),
            "timeout_seconds": effective_timeout(args, ctx.session),
            "agent": self.agent,
            "executable": invocation.executable,
            "sandbox": sandbox.result_summary(ctx.approved.get("sandbox") if confinement else None),
        }


def describe_agent(agent: str, default_argv: str, extra: str = "") -> str:
    return (
        f"Delegate a task to the {agent} coding agent: start it non-interactively in the workspace "
        f"(by default `{default_argv}`) and return its exit status and combined stdout/stderr (head and "
        "tail kept when long). The agent acts on its own with the session's permissions and credentials: "
        "it may read and write files, run commands and call its model provider (delegate risk). Every "
        f"process it starts is killed when it finishes, times out or is cancelled.{extra}"
    )
