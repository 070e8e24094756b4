"""What the native agent adapters (``agent_claude``, ``agent_codex``, ``agent_pi``) share.

Promises:

* the only program an adapter starts is its configured executable (``agents.<name>.executable``, from
  the shipped defaults or the user's configuration — a project file cannot set it), found through the
  absolute entries of the ``PATH`` of the command environment (:mod:`peon.core.environment`; relative
  entries, including an empty one, which means "the current directory", are ignored so a workspace
  cannot plant the executable), and started directly, without a shell, in the workspace;
* a script's interpreter is resolved the same contained way (:mod:`peon.tools.shared.launch`: ``#!/usr/bin/env
  node`` finds ``node`` in absolute ``PATH`` entries only) and started directly, so the argument vector
  is ``[interpreter, *its arguments, script, *agents.<name>.args, prompt]`` for a script and
  ``[executable, *agents.<name>.args, prompt]`` for a binary: the prompt is one argument, whatever it
  contains; the model chooses nothing else;
* the approval request shows that whole vector (interpreter first), the files that make it up and their
  SHA-256, and the worker starts exactly those files: it refuses with ``adapter_unavailable`` if
  anything differs from what was approved, and executes the binary through a descriptor opened and
  checked immediately before the start, so re-pointing a link afterwards changes nothing;
* a prompt the agent's command line would not take as plain text is refused before approval with
  ``invalid_input`` naming the rule (:meth:`AgentTool.refuse_prompt`): a leading ``-`` when the
  arguments do not end the options with ``--`` (and pi releases without ``--``, see
  :mod:`peon.tools.agent_pi`);
* ``@`` is never a reason to refuse or rewrite a prompt: the child agent reads files by itself anyway
  (delegate risk is the boundary). The approval request lists the ``@`` mentions the agent's command line
  would attach as files (:meth:`AgentTool.file_mentions`), flagging those outside the workspace;
* a prompt longer than one ``execve`` argument may be (``MAX_ARG_STRLEN``, 131072 bytes with its NUL)
  or an argument vector and environment larger than ``ARG_MAX`` is ``too_large``, never an OS error;
* a missing executable or interpreter is ``adapter_unavailable`` naming it and the ``PATH`` searched,
  detected in the supervisor while the approval request is built (so nobody is asked to approve a
  program that is not there) and again in the worker right before the start;
* everything else — stdin ``/dev/null``, no controlling terminal, the command environment (pagers,
  editors and prompts off; the call's trace context as ``TRACEPARENT``/``TRACESTATE``), bounded output,
  TERM → grace → KILL on cancel, KILL at the deadline, no descendant outliving the call — is the shared
  process runner's (:mod:`peon.workers.runner`), exactly as for ``bash``; a non-zero exit, a timeout or a
  cancel is a result, not an error.

The risk is ``delegate``: the child agent may read, write, run commands, use inherited credentials and
call its own model provider, none of which Peon sees or approves call by call. An adapter runs outside
the OS sandbox unless ``agents.<name>.sandbox = true`` (a child agent's own sandbox often cannot start
inside Peon's); with it, the adapter is sandboxed exactly like ``bash`` and says so in its approval
details.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar
from collections.abc import Mapping, Sequence

from peon.core.environment import command_environment, search_path, split_search_path
from peon.core.errors import ErrorCode, ToolError
from peon.core.text import shorten
from peon.core.text import lone_surrogate
from peon.core.tool import Prepared, SessionView, Tool, ToolContext, ToolRisk
from peon.workers import sandbox
from peon.workers.runner import PROCESS_OUTPUT_SCHEMA, ProcessSpec, run_process

from peon.tools.shared.launch import FileIdentity, LaunchRefused, Program, find_in_path, pinned, resolve_program
from peon.tools.shared.process import (
    NO_NUL_PATTERN, SANDBOX_RESULT_PROPERTY, TIMEOUT_PROPERTY, effective_timeout, with_session_timeout,
)

# Linux refuses (E2BIG) any single argv or envp string longer than MAX_ARG_STRLEN = 32 pages,
# terminating NUL included.
MAX_ARG_BYTES = 32 * 4096
MAX_PROMPT_BYTES = MAX_ARG_BYTES - 1
POINTER_BYTES = 8
MAX_MENTIONS_SHOWN = 20

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
        "executable": {"type": "string", "description": "The absolute path of the program that was asked for."},
        "interpreter": {"type": ["string", "null"],
                        "description": "The interpreter that ran it, when the executable is a script."},
        "sandbox": SANDBOX_RESULT_PROPERTY,
    },
}


# -- pure decisions ----------------------------------------------------------------------------------


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
            f"the prompt for {tool} is not valid UTF-8: {lone_surrogate(prompt)}", {"rule": "utf8", "index": exc.start},
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
    return shorten(text, limit, '..."')


def at_mentions(text: str) -> list[str]:
    """The ``@`` mentions in ``text`` as Claude Code reads them: ``@`` at the start or after white space,
    then a quoted path or everything up to the next white space."""
    return [m.group(1) or m.group(2) for m in _MENTION.finditer(text)]


_MENTION = re.compile(r'(?:^|(?<=\s))@(?:"([^"\n]+)"|(\S+))')


def describe_mentions(mentions: Sequence[str], session: SessionView) -> list[dict[str, Any]]:
    """Each mentioned file as the approver sees it: where it points and whether that is outside the workspace."""
    home = session.env.get("HOME") or ""
    shown = []
    for mention in list(mentions)[:MAX_MENTIONS_SHOWN]:
        path = mention.split("#", 1)[0]  # "@file#L1-10" names lines of file
        if path.startswith("~/") and home:
            path = home + path[1:]
        target = os.path.normpath(os.path.join(str(session.workspace), path))
        shown.append({"mention": "@" + mention, "path": target,
                      "outside_workspace": not is_inside(target, str(session.workspace))})
    return shown


# -- resolution (no program is run) ---------------------------------------------------------------------


def resolve_executable(name: str, path: str) -> str | None:
    """The absolute path ``name`` runs as with this ``PATH`` (absolute entries only), or ``None``."""
    if "/" in name:
        if os.path.isabs(name) and os.path.isfile(name) and os.access(name, os.X_OK):
            return os.path.normpath(name)
        return None
    return find_in_path(name, path)


def is_inside(path: str, directory: str) -> bool:
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


@dataclass(frozen=True)
class Invocation:
    agent: str
    configured: str  # the executable as configured (a bare name or an absolute path)
    program: Program  # what runs: the executable, or its interpreter chain
    fixed_args: tuple[str, ...]  # the configured arguments as this agent's command line gets them
    prompt: str
    search_path: str
    env: Mapping[str, str]
    facts: Mapping[str, Any] = field(default_factory=dict)  # agent-specific facts for the approver

    @property
    def executable(self) -> str:
        return self.program.executable

    @property
    def argv(self) -> tuple[str, ...]:
        return (*self.program.argv_prefix, *self.fixed_args, self.prompt)


# -- the tool ----------------------------------------------------------------------------------------------


class AgentTool(Tool):
    """One native agent adapter; subclasses name the agent and add its command line's particulars."""

    agent: ClassVar[str]  # the key under [agents] in the configuration
    risk = ToolRisk.DELEGATE
    keeps_output = True  # its result carries a job_id; job_output pages through what it printed
    input_schema = AGENT_INPUT_SCHEMA
    output_schema = AGENT_OUTPUT_SCHEMA

    # -- what each agent's command line does (overridden per agent) -------------------------------------

    def command_args(self, configured: Sequence[str], program: Program) -> tuple[tuple[str, ...], dict[str, Any]]:
        """The fixed arguments this agent's command line gets, and facts for the approver."""
        return tuple(configured), {}

    def refuse_prompt(self, prompt: str, fixed_args: Sequence[str], facts: Mapping[str, Any]) -> str | None:
        """Why this agent would not read ``prompt``, placed after ``fixed_args``, as plain text."""
        if prompt.startswith("-") and "--" not in fixed_args:
            return (f"the prompt begins with '-', and the arguments {list(fixed_args)} do not end the options "
                    f"with '--', so {self.agent} would parse it as an option")
        return None

    def file_mentions(self, prompt: str) -> list[str]:
        """The ``@`` mentions this agent's command line would attach as files (none by default)."""
        return []

    # -- preparing a call -----------------------------------------------------------------------------------

    def schema_for(self, session: SessionView) -> Mapping[str, Any]:
        return with_session_timeout(self.input_schema, session)

    def resolve(self, session: SessionView, *, with_hash: bool = True,
                trace: Mapping[str, str] | None = None) -> Invocation:
        """What this adapter starts in ``session`` (the prompt left empty); raises ``adapter_unavailable``
        naming what is missing. ``peon doctor`` shows this too. ``trace`` is the call's W3C trace context:
        the agent gets it as ``TRACEPARENT``/``TRACESTATE``, as ``bash``'s commands do."""
        command = getattr(session.config.agents, self.agent)
        env = command_environment(session, trace)
        path = search_path(env)
        executable = resolve_executable(command.executable, path)
        if executable is None:
            raise self._unavailable(command.executable, path, session.env.get("PATH", ""))
        try:
            program = resolve_program(executable, path, with_hash=with_hash)
        except LaunchRefused as exc:
            raise ToolError(ErrorCode.ADAPTER_UNAVAILABLE, f"{self.name}: {executable} cannot be started: {exc}",
                            {"executable": executable, "path": path}) from None
        fixed_args, facts = self.command_args(command.args, program)
        return Invocation(self.agent, command.executable, program, fixed_args, "", path, env, facts)

    def invocation_for(self, args: Mapping[str, Any], session: SessionView, *, with_hash: bool = True,
                       trace: Mapping[str, str] | None = None) -> Invocation:
        """Check the prompt and resolve what will run; raises the error the call should fail with."""
        prompt = args["prompt"]
        check_prompt_bytes(self.name, prompt)
        invocation = replace(self.resolve(session, with_hash=with_hash, trace=trace), prompt=prompt)
        why = self.refuse_prompt(prompt, invocation.fixed_args, invocation.facts)
        if why is not None:
            raise ToolError(ErrorCode.INVALID_INPUT, f"{self.name} refuses the prompt {describe_prompt(prompt)}: {why}",
                            {"rule": "prompt", "agent": self.agent})
        self._check_exec_size(invocation)
        return invocation

    def _unavailable(self, configured: str, path: str, session_path: str) -> ToolError:
        details: dict[str, Any] = {"executable": configured, "path": path}
        if "/" in configured:
            why = ("it is not an absolute path" if not os.path.isabs(configured)
                   else "it does not exist or is not an executable regular file")
            message = f"{self.name}: the configured executable {configured!r} cannot be started: {why}"
        else:
            message = (f"{self.name}: no executable named {configured!r} in the session's PATH "
                       f"{path!r}; install {configured} there or set agents.{self.agent}.executable "
                       "in your user configuration")
            ignored = split_search_path(session_path)[1] if session_path else []
            if ignored:
                details["ignored_relative_entries"] = ignored
                message += f" (relative PATH entries are not searched: {ignored})"
        return ToolError(ErrorCode.ADAPTER_UNAVAILABLE, message, details)

    def _check_exec_size(self, invocation: Invocation) -> None:
        for arg in invocation.argv[:-1]:
            if len(os.fsencode(arg)) > MAX_PROMPT_BYTES:
                raise ToolError(ErrorCode.TOO_LARGE, f"{self.name}: a configured argument of agents.{self.agent} is "
                                f"longer than the {MAX_PROMPT_BYTES} bytes one argument may hold",
                                {"rule": "max_arg_bytes"})
        limit = os.sysconf("SC_ARG_MAX")
        size = exec_bytes(invocation.argv, invocation.env)
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

    def _sandbox_details(self, session: SessionView) -> dict[str, Any] | None:
        return sandbox.call_details(
            session.sandbox, enabled=self.sandboxed(session),
            why_not=f"agents.{self.agent}.sandbox is false: the agent runs unsandboxed (its own sandbox could not "
                    "start inside Peon's)")

    # -- approval (in the supervisor) -------------------------------------------------------------------

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Prepared:
        """Declared risk (``sandboxed`` when ``agents.<name>.sandbox`` puts it inside the OS sandbox), shown
        with everything that will run (:meth:`_details`); a prompt the agent refuses, or a program that
        is not there, fails here."""
        prompt = args["prompt"]
        inside = self.sandboxed(session) and bool(session.sandbox.get("active"))
        reason = self.declared_risk_reason() + (", inside the OS sandbox" if inside else "")
        summary = f"delegate to the {self.agent} agent ({len(prompt)}-character prompt): {describe_prompt(prompt, 120)}"
        timeout = effective_timeout(args, session)
        return Prepared(self.risk, reason, summary, self._details(args, session, timeout), timeout, sandboxed=inside)

    def _details(self, args: Mapping[str, Any], session: SessionView, timeout: float) -> dict[str, Any]:
        """The executable, its interpreter and every file it is made of (pinned), the argument vector, the
        prompt (bounded), the sandbox, the files the prompt mentions, and the warning."""
        invocation = self.invocation_for(args, session)
        program = invocation.program
        shown, truncated = bound_prompt(invocation.prompt, session.config.agents.approval_prompt_chars)
        details: dict[str, Any] = {
            "agent": self.agent,
            "executable": invocation.executable,
            "executable_realpath": os.path.realpath(invocation.executable),
        }
        if program.interpreter is not None:
            details["interpreter"] = program.interpreter
            details["shebang"] = program.shebangs[0]
        details.update({
            "argv": list(invocation.argv[:-1]),
            "prompt": shown,
            "prompt_truncated": truncated,
            "prompt_chars": len(invocation.prompt),
            "prompt_position": "appended to argv as one final argument",
            "workspace": str(session.workspace),
            "timeout_seconds": timeout,
            "path_searched": invocation.search_path,
            "pinned": program.pins(),
            **invocation.facts,
            "warning": DELEGATE_WARNING,
        })
        confinement = self._sandbox_details(session)
        if confinement is not None:
            details["sandbox"] = confinement
        mentions = describe_mentions(self.file_mentions(invocation.prompt), session)
        if mentions:
            details["file_mentions"] = mentions
            outside = [m["path"] for m in mentions if m["outside_workspace"]]
            details["warning"] += (f" The prompt names files that {self.agent}'s command line attaches for the model "
                                   "itself (see file_mentions)" + (f", some outside the workspace: {outside}" if outside
                                                                   else "") + ".")
        if any(is_inside(f.path, str(session.workspace)) for f in program.files()) or is_inside(
                invocation.executable, str(session.workspace)):
            details["executable_in_workspace"] = True
            details["warning"] += (" The executable itself lies inside the workspace, so the project "
                                   "controls what it does.")
        return details

    # -- execution (in the worker) ------------------------------------------------------------------------

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        # Resolved again: the files may have changed since approval, and what runs must be what was approved.
        invocation = self.invocation_for(args, ctx.session, with_hash=False, trace=ctx.trace)
        approved = ctx.approved
        pins = approved.get("pinned")
        self._check_approved(invocation, approved)
        spec_env = dict(invocation.env)
        confinement = sandbox.confinement_for(ctx, enabled=self.sandboxed(ctx.session))
        with pinned(invocation.program, pins) as exec_path:
            spec = ProcessSpec(invocation.argv, str(ctx.workspace), spec_env, executable=exec_path, sandbox=confinement)
            outcome = await run_process(spec, ctx)
        return {
            **outcome.to_value(),
            "timeout_seconds": effective_timeout(args, ctx.session),
            "agent": self.agent,
            "executable": invocation.executable,
            "interpreter": invocation.program.interpreter,
            "sandbox": sandbox.result_summary(ctx.approved.get("sandbox") if confinement else None, confinement),
        }

    def _check_approved(self, invocation: Invocation, approved: Mapping[str, Any]) -> None:
        if not approved:
            return
        if approved.get("executable") is not None and approved["executable"] != invocation.executable:
            raise ToolError(
                ErrorCode.ADAPTER_UNAVAILABLE,
                f"{self.name}: PATH now resolves {invocation.configured!r} to {invocation.executable}, not to "
                f"the approved {approved['executable']}; nothing was started",
                {"approved": approved["executable"], "resolved": invocation.executable},
            )
        if approved.get("argv") is not None and list(approved["argv"]) != list(invocation.argv[:-1]):
            raise ToolError(
                ErrorCode.ADAPTER_UNAVAILABLE,
                f"{self.name}: the command line is now {list(invocation.argv[:-1])}, not the approved "
                f"{list(approved['argv'])}; nothing was started",
                {"rule": "pinned", "approved": list(approved["argv"]), "resolved": list(invocation.argv[:-1])},
            )
        pins = approved.get("pinned")
        if pins is not None:
            expected = [FileIdentity.from_dict(pins["binary"]), *(FileIdentity.from_dict(s) for s in pins["scripts"])]
            now = invocation.program.files()
            if len(expected) != len(now) or not all(a.same_file(b) for a, b in zip(expected, now, strict=True)):
                changed = next((a.path for a, b in zip(expected, now, strict=False) if not a.same_file(b)),
                               expected[-1].path)
                raise ToolError(
                    ErrorCode.ADAPTER_UNAVAILABLE,
                    f"{self.name}: {changed} changed since it was approved: it is no longer the same file "
                    "(device, inode, size or modification time); nothing was started",
                    {"rule": "pinned", "file": changed},
                )


def describe_agent(agent: str, default_argv: str, extra: str = "") -> str:
    return (
        f"Delegate a task to the {agent} coding agent: start it non-interactively in the workspace "
        f"(by default `{default_argv}`) and return its exit status and combined stdout/stderr (head and "
        "tail kept when long). The agent acts on its own with the session's permissions and credentials: "
        "it may read and write files, run commands and call its model provider (delegate risk). Every "
        f"process it starts is killed when it finishes, times out or is cancelled.{extra}"
    )
