"""The tool extension contract.

Promise: anything that subclasses :class:`Tool` and passes registration can be called through every
front end (embedding API, CLI, MCP) and runs in a worker exactly like a built-in. Peon's supervisor and
front ends only ever use the methods below; no code outside a tool's own module knows its name.

A tool supplies:

* ``name``, ``description``, ``input_schema`` (a JSON Schema for an object that rejects unknown fields),
  an optional ``output_schema`` and a declared ``risk``;
* what the supervisor decides a call on, in one of two ways: :meth:`Tool.prepare`, which computes it all
  at once as a :class:`Prepared` (the built-in tools do: a path is resolved, a command line analysed, a
  diff computed once per call); or the four hooks it is built from by default — :meth:`approval_summary`
  (one line shown to whoever approves the call; required unless ``prepare`` is overridden) and optionally
  :meth:`assess_risk` (a per-call effective risk, e.g. ``read`` elevating secret-like paths),
  :meth:`approval_details` and :meth:`timeout_seconds`;
* optionally :meth:`schema_for`;
* :meth:`execute`, an ``async`` executor that runs in the worker and returns a JSON object, or raises
  :class:`~peon.core.errors.ToolError`.

The supervisor calls :meth:`Tool.prepare` once per call and nothing else of the above.
"""

from __future__ import annotations

import abc
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol
from collections.abc import Callable, Mapping

from peon.core.cancel import CancelToken, Deadline
from peon.core.config_view import ConfigView
from peon.core.risk import RISK_NAMES as RISK_NAMES, ToolRisk as ToolRisk


@dataclass(frozen=True)
class RiskAssessment:
    """The effective risk of one call and why it is that."""

    risk: ToolRisk
    reason: str
    sandboxed: bool = False  # the call will run inside the OS sandbox


@dataclass(frozen=True)
class Prepared:
    """One call as the supervisor decides on it, computed once by :meth:`Tool.prepare`.

    ``risk``, ``risk_reason`` and ``sandboxed`` rate the call (the policy's per-risk setting applies, and
    ``process_sandboxed`` for a process call inside the OS sandbox); ``summary`` (one line) and
    ``details`` (tool-specific facts, e.g. the resolved path) are what the approver is shown, and
    ``details`` is what the worker receives as approved (``ToolContext.approved``), so the executor can
    insist on running exactly that; ``timeout_seconds`` is how long the call may run (None: the
    configured ``limits.max_timeout_seconds``; never more than it). ``command_analysis`` is the analysis
    of the input's ``command`` (a :class:`peon.approval.shell.ShellAnalysis`) when the tool made one:
    the policy's command rules read it instead of parsing the line again (any other value, or one of
    another line, is ignored and the policy analyses the line itself).
    """

    risk: ToolRisk
    risk_reason: str
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    timeout_seconds: float | None = None
    sandboxed: bool = False
    command_analysis: Any = None


@dataclass(frozen=True)
class SessionView:
    """What a tool may know about the session it serves (read-only, same in supervisor and worker).

    ``config`` is the session's resolved configuration (:class:`~peon.core.config_view.ConfigView`:
    typed, every key present, read without defaults); ``env`` is the environment the session's
    processes run with; ``skills`` maps skill names to their discovery records; ``sandbox`` is the
    session's OS sandbox decision (:func:`peon.workers.sandbox.session_status`).
    ``root_fd`` is an ``O_PATH`` descriptor of the workspace, opened once when the session started
    (close-on-exec, valid in the supervisor and in every worker; -1 where there is none): resolve
    workspace files beneath it, never by reopening ``workspace`` by path.
    """

    workspace: Path
    config: ConfigView
    env: Mapping[str, str]
    session_id: str = ""
    skills: Mapping[str, Any] = field(default_factory=dict)
    root_fd: int = -1
    sandbox: Mapping[str, Any] = field(default_factory=dict)
    # The session's state directory (0700), where the output store keeps a flood's retained output in
    # unnamed files (:func:`peon.core.output.store.open_spill_file`); None: it is kept in memory.
    spill_dir: Path | None = None


@dataclass(frozen=True)
class OutputLimits:
    max_output_bytes: int
    read_max_bytes: int


class OutputSink(Protocol):
    """Where a worker's process runner sends the bytes its command writes (to the supervisor's output
    store), in order, with backpressure: past its high-water mark the runner stops reading the
    command's pipe until ``when_drained``'s callback runs."""

    def spawned(self) -> None:
        """The command has started."""

    def push(self, data: bytes | memoryview) -> bool:
        """Queue ``data`` (copied or written before it returns: the caller reuses its buffer); False
        when the runner should pause reading."""

    def when_drained(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once what is queued has gone below the low-water mark (at once if it has)."""


@dataclass
class ToolContext:
    """Everything an executor receives from the worker for one call."""

    call_id: str
    workspace: Path
    deadline: Deadline
    cancel: CancelToken
    limits: OutputLimits
    session: SessionView
    # The tool-specific details the approver was shown (``Prepared.details``), so the executor can
    # insist on running exactly what was approved.
    approved: Mapping[str, Any] = field(default_factory=dict)
    wants_progress: bool = False
    report_progress: Callable[..., None] = lambda **_: None  # e.g. report_progress(output_bytes=...)
    output: OutputSink | None = None  # set when the supervisor keeps this call's output (job_output)
    # Set for tools served by the supervisor itself (``Tool.served_by_supervisor``): the session's jobs.
    jobs: Any = None
    # Set for the same tools: the session's checkpoints (``changes``, ``rewind``; peon.supervisor.checkpointing).
    checkpoints: Any = None
    # The caller's W3C trace context (``traceparent``, ``tracestate``), for the commands the call starts.
    trace: Mapping[str, str] = field(default_factory=dict)


class Tool(abc.ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    risk: ClassVar[ToolRisk]
    input_schema: ClassVar[Mapping[str, Any]]
    output_schema: ClassVar[Mapping[str, Any] | None] = None
    # Built-in tools about the session's jobs (job_output, job_stop, job_list) run in the supervisor,
    # which owns the jobs; their ``execute`` gets ``ctx.jobs``. Every other tool runs in a worker.
    served_by_supervisor: ClassVar[bool] = False
    # The supervisor keeps this tool's process output (``ctx.output``) and gives its result a job_id.
    keeps_output: ClassVar[bool] = False
    # Whether ``execute`` may start a process. A worker goes on to serve further calls after a clean
    # call of a tool that starts none (``read``, ``write``), and after one of a tool that does (the
    # default) only if its commands went through the process runner and all ended clean.
    starts_processes: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # approval_summary is abstract only for a tool that prepares its calls from the hooks: one that
        # overrides prepare() describes its calls there and need not define it.
        if cls.prepare is not Tool.prepare and getattr(cls.approval_summary, "__isabstractmethod__", False):
            cls.approval_summary = _summary_is_prepared  # type: ignore[method-assign]

    def schema_for(self, session: SessionView) -> Mapping[str, Any]:
        """The input schema in this session (``read_skill`` lists the discovered names); asked once,
        when the session starts."""
        return self.input_schema

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Prepared:
        """Everything the supervisor decides this call on, computed once, in the supervisor, from the
        validated input: an expected refusal (``not_found``, ``outside_workspace``...) is raised here as a
        :class:`~peon.core.errors.ToolError`, before anyone is asked. By default it is built from the four
        hooks below, in this order: :meth:`assess_risk`, :meth:`approval_summary`, :meth:`approval_details`,
        :meth:`timeout_seconds`."""
        assessment = self.assess_risk(args, session)
        summary = self.approval_summary(args)
        details = self.approval_details(args, session)
        return Prepared(assessment.risk, assessment.reason, summary, details,
                        float(self.timeout_seconds(args, session)),
                        sandboxed=bool(getattr(assessment, "sandboxed", False)))

    def declared_risk_reason(self) -> str:
        """The risk reason of a call rated at the tool's declared ``risk``."""
        return f"declared risk of {self.name}"

    # -- the hooks the default prepare() is built from ----------------------------------------------

    def assess_risk(self, args: Mapping[str, Any], session: SessionView) -> RiskAssessment:
        return RiskAssessment(self.risk, self.declared_risk_reason())

    def approval_summary(self, args: Mapping[str, Any]) -> str:
        """One line saying what this call will do, shown to the approver (required of a tool that leaves
        :meth:`prepare` to the hooks)."""
        raise NotImplementedError

    # Abstract at run time (ABCMeta reads the flag): a tool that leaves prepare() to the hooks cannot be
    # instantiated without it, and __init_subclass__ gives a tool that overrides prepare() a concrete one.
    # Type checkers see a plain method, since which of the two applies depends on prepare().
    approval_summary.__isabstractmethod__ = True  # type: ignore[attr-defined]

    def approval_details(self, args: Mapping[str, Any], session: SessionView) -> dict[str, Any]:
        """Tool-specific facts for the approver (e.g. the resolved executable of an agent)."""
        return {}

    def timeout_seconds(self, args: Mapping[str, Any], session: SessionView) -> float:
        """How long this call may run; by default the configured maximum."""
        return float(session.config.limits.max_timeout_seconds)

    @abc.abstractmethod
    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """Run the call in the worker and return its JSON value."""

    async def warm_up(self, ctx: ToolContext, *, processes: bool) -> None:
        """Run this tool's code path once with no effect on the workspace or anything outside the
        worker (e.g. read one of Peon's own files). A standby worker calls it while it waits for its
        call (as it starts, and again when a call after a pause wakes it), so the pages the path writes
        are copied from the forkserver then, and its caches are warm, not on the call's path;
        the forkserver calls it before it forks, so its bytecode is specialized once. ``processes``: the
        warm-up may start a process (e.g. ``/bin/true``) — the forkserver's may, a standby's may not (a
        process start costs a standby more CPU than the pages it saves the call). Errors are ignored.
        By default: nothing."""
        return None


def _summary_is_prepared(self: Tool, args: Mapping[str, Any]) -> str:
    """The ``approval_summary`` of a tool that overrides :meth:`Tool.prepare`: its summary is the one
    ``prepare`` returns, and nothing else asks for it."""
    raise NotImplementedError(f"{self.name} describes its calls in prepare(); ask it for the Prepared summary")


def session_path(env: Mapping[str, str]) -> str:
    """The PATH the session's processes search, with the POSIX default when unset."""
    return env.get("PATH") or os.defpath
