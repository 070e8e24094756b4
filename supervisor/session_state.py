"""Everything the supervisor holds for one session, built from the client's ``start`` message.

Promise: :meth:`SessionState.open` either returns a complete session (workspace checked and pinned,
configuration resolved, registry built, containment and OS sandbox chosen, state directory created) or
raises an exception (a :class:`~peon.core.errors.PeonError` that names what is wrong, when it is something
wrong with the session); it never starts with partial state and leaves nothing behind when it fails — no
descriptor, no cgroup. The workspace is pinned once (:func:`pin_workspace`): ``SessionView.root_fd``
is valid in the supervisor and in every worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peon.core.config_view import ConfigView, ResolvedConfig
from peon.core.environment import build_environment
from peon.core.errors import ConfigError, PeonError
from peon.core.session_record import RECORD_NAME, write_record
from peon.approval.hooks import hook_specs
from peon.approval.policy import ApprovalPolicy
from peon.core.registry import Registry, build_registry
from peon.core.tool import SessionView, Tool
from peon.tools import BUILTIN_TOOLS
from peon.workers import sandbox
from peon.workers.cgroup import session_cgroup_name
from peon.workers.limits import ResourceLimits

from peon.supervisor import egress, egress_link, redaction
from peon.supervisor import containment as containment_mod
from peon.supervisor.approval.audit import AuditLog
from peon.supervisor.approval.gate import ApprovalGate
from peon.supervisor.approval.grants import GrantStore
from peon.supervisor.approval.saved_rules import save_allow_rule, user_config_file
from peon.supervisor.hooks import Hooks
from peon.supervisor.skills import Discovery, discover


@dataclass
class SessionState:
    view: SessionView
    loaded: ResolvedConfig
    registry: Registry
    containment: containment_mod.Containment
    approval: ApprovalGate
    state_dir: Path
    audit: AuditLog
    skills: Discovery = field(default_factory=Discovery)
    config_wire: dict = field(default_factory=dict)
    schemas: dict = field(default_factory=dict)  # each tool's input schema in this session, fixed at start
    policy: ApprovalPolicy | None = None
    tools: dict[str, Tool] = field(default_factory=dict)  # by name, in registration order
    runtime_dir: str | None = None  # the client's directory for the forkserver's socket (it removes it)
    hooks: Hooks | None = None  # the user's [[hooks]]; None: none configured

    @property
    def config(self) -> ConfigView:
        return self.loaded.config

    @classmethod
    def open(cls, start: dict, supervisor: Any) -> SessionState:
        workspace = Path(start["workspace"])
        if not workspace.is_dir():
            raise PeonError("not_found", f"workspace {workspace} is not a directory")
        root_fd = pin_workspace(workspace)
        try:
            return cls._open(start, supervisor, workspace, root_fd)
        except BaseException:
            os.close(root_fd)
            raise

    @classmethod
    def _open(cls, start: dict, supervisor: Any, workspace: Path, root_fd: int) -> SessionState:
        session_id = str(start["session_id"])
        # The session's environment as the client gave it: an empty one stays empty (never this
        # process's own, which carries what the client added to start the supervisor).
        given = start.get("env")
        env = dict(given) if isinstance(given, dict) else dict(os.environ)
        # Resolved and validated by the client from its layers (defaults, user, project, overrides).
        loaded = ResolvedConfig(start["config"])
        skills = discover(workspace, env, loaded.config.skills.max_skills)
        # Decided once: "required" refuses to start here rather than run anything unsandboxed.
        command_env = build_environment(env, loaded.config.environment)  # TMPDIR, HOME, PATH of commands
        state_dir = Path(start["state_dir"])
        runtime_dir = [start["runtime_dir"]] if start.get("runtime_dir") else []
        peon_dirs = [str(state_dir), str(state_dir.parent), *runtime_dir]  # kept from sandboxed commands
        sandbox_status = sandbox.session_status(loaded.config.sandbox, str(workspace), command_env, hidden=peon_dirs,
                                                session_id=session_id)
        try:  # sandbox.network = [hosts...]: the proxy is the commands' only way out
            egress.start(sandbox_status)
        except OSError as exc:
            sandbox_status.setdefault("notes", []).append(f"the egress proxy could not start ({exc}): no network")
        try:
            state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise ConfigError(f"cannot create the session state directory {state_dir}: {exc.strerror}") from None
        try:  # the evidence `peon sessions prune` decides liveness by: this process, and when it started
            write_record(state_dir, session_id, str(workspace), os.getpid())
        except OSError as exc:
            raise ConfigError(f"cannot write {state_dir / RECORD_NAME}: {exc.strerror}") from None
        view = SessionView(workspace=workspace, config=loaded.config, env=env, session_id=session_id,
                           skills=skills.available, sandbox=sandbox_status, root_fd=root_fd,
                           spill_dir=state_dir.resolve())
        registry = build_registry(
            BUILTIN_TOOLS,
            extra=[*loaded.config.tools.extra, *start.get("tools", [])],
            entry_points=loaded.config.tools.entry_points,
        )
        limits = loaded.config.limits
        chosen = containment_mod.choose(
            loaded.config.runtime.containment, session_cgroup_name(session_id, os.getpid()),
            ResourceLimits(limits.memory_max_bytes, limits.max_processes),
        )
        try:  # from here on, a failure must not leave the session's cgroup behind
            return cls._finish_open(start, supervisor, loaded, view, registry, state_dir, chosen, skills)
        except BaseException:
            chosen.close()
            raise

    @classmethod
    def _finish_open(cls, start: dict, supervisor: Any, loaded: ResolvedConfig, view: SessionView,
                     registry: Registry, state_dir: Path, chosen: containment_mod.Containment,
                     skills: Discovery) -> SessionState:
        limits = loaded.config.limits
        send = supervisor.client.send if supervisor is not None else None
        policy = ApprovalPolicy.from_loaded(loaded)
        gate = ApprovalGate(  # the client says whether it has an approver; without one, "ask" denies at once
            policy, GrantStore(state_dir), send,
            approver_connected=bool(start.get("approver", True)),
            timeout_seconds=limits.approval_timeout_seconds,
            save_rule=lambda rule: str(save_allow_rule(_user_file(loaded), rule)),
        )
        audit = AuditLog(state_dir, loaded.config.audit.max_bytes, loaded.config.audit.backups,
                         loaded.config.audit.fsync)
        gate.shown = functools.partial(redaction.shown, view)  # a hash where a secret was
        audit.redact = functools.partial(redaction.audited, view)
        with contextlib.suppress(RuntimeError):  # opened outside the supervisor's loop (tests): nothing to link
            egress_link.link(egress.running(), gate, audit, view.session_id, state_dir,
                             asyncio.get_running_loop())
        schemas = {tool.name: tool.schema_for(view) for tool in registry}
        specs = hook_specs(loaded.config.hooks)
        hooks = Hooks(specs, view.session_id, str(view.workspace)) if specs else None
        return cls(view, loaded, registry, chosen, gate, state_dir, audit, skills, start["config"], schemas,
                   policy, {tool.name: tool for tool in registry}, start.get("runtime_dir"), hooks)

    def worker_session(self) -> dict:
        """What the forkserver needs to rebuild this session's view and tools for its workers."""
        return {
            "workspace": str(self.view.workspace), "config": self.config_wire, "env": dict(self.view.env),
            "session_id": self.view.session_id, "skills": [r.to_dict() for r in self.skills.available.values()],
            "sandbox": dict(self.view.sandbox),
            "spill_dir": str(self.view.spill_dir) if self.view.spill_dir is not None else None,
            "root_fd": self.view.root_fd,  # handed to each worker with SCM_RIGHTS, not as a number
            "start_seconds": float(self.config.limits.worker_start_seconds),
            "forkserver_cgroup": self.containment.forkserver_cgroup,  # the forkserver joins it
            "runtime_dir": self.runtime_dir,
        }

    def describe(self, pid: int) -> dict:
        return {
            "pid": pid,
            "session_id": self.view.session_id,
            "workspace": str(self.view.workspace),
            "state_dir": str(self.state_dir),
            "containment": self.containment.info(),
            "sandbox": dict(self.view.sandbox),
            "redaction": redaction.describe(self.view),
            "config": self.config.to_dict(),
            "config_layers": self.loaded.describe_layers(),
            "tools": [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "risk": tool.risk.value,
                    "input_schema": self.schemas[tool.name],
                    "output_schema": tool.output_schema,
                    "origin": self.registry.origin(tool.name),
                }
                for tool in self.registry
            ],
            "skills": self.skills.describe(),
        }

    def approval_answer(self, message: dict) -> None:
        self.approval.answer(message)
        egress_link.answer(message)  # a question about a host (sandbox.network_ask); unknown ids are ignored

    def close(self) -> None:
        try:
            self.containment.close()
        finally:
            self.audit.close()
            sandbox.remove_session_cache(self.view.sandbox)
            if self.view.root_fd >= 0:
                os.close(self.view.root_fd)


def pin_workspace(workspace: Path) -> int:
    """An ``O_PATH`` descriptor of the resolved workspace, opened once: every worker resolves files
    beneath it, so renaming the workspace or putting a symlink in its place redirects nothing."""
    try:
        return os.open(workspace.resolve(strict=True), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise PeonError("not_found", f"workspace {workspace} cannot be opened: {exc.strerror}") from None


def _user_file(loaded: ResolvedConfig) -> Path:
    path = user_config_file(loaded.layers, os.environ)
    if path is None:
        raise ValueError("the user's configuration directory is unknown (neither XDG_CONFIG_HOME nor HOME is set)")
    return path
