"""The configuration's model: every table and key Peon reads, with its type and its bounds.

Promise: a :class:`PeonConfig` is always complete and valid — every key present, of the type declared
here, within its bounds. Validation is strict: TOML already has types, so ``"100"`` is not an integer
and ``true`` is not a number; a key not declared here is refused. This module owns the model only:
where the values come from is :mod:`peon.client.config.layers`', and the sentence a refused value gets
is :mod:`peon.client.config.messages`'. The supervisor and its workers read the same tables through
:mod:`peon.core.config_view`, which must declare exactly these keys (``tests/unit/test_config_view.py``).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from peon.approval.hooks import check_matcher
from peon.approval.policy import Action, check_command_prefix, check_path_prefix
from peon.approval.rule_examples import example_problem, examples_refused
from peon.core.agent_control import AGENT_CONTROL_PATHS, check_entry
from peon.core.environment import ENV_NAME, LOGIN_PROFILE
from peon.core.tool import ToolRisk


class _Section(BaseModel):
    # Strict: TOML already has types, so a string where a number belongs is a mistake, not a hint.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Limits(_Section):
    max_timeout_seconds: float = Field(gt=0)
    default_timeout_seconds: float = Field(gt=0)
    max_output_bytes: int = Field(ge=1024)
    read_max_bytes: int = Field(ge=1)
    max_input_bytes: int = Field(ge=1024)
    worker_grace_seconds: float = Field(gt=0)
    worker_start_seconds: float = Field(gt=0)
    worker_max_calls: int = Field(ge=1)
    approval_timeout_seconds: float = Field(gt=0)
    memory_max_bytes: int = Field(ge=1 << 20)
    max_processes: int = Field(ge=1)
    max_parallel_calls: int = Field(ge=1, le=256)
    max_queued_calls: int = Field(ge=1)
    max_queued_bytes: int = Field(ge=1024)
    yield_after_seconds: float = Field(ge=0)  # 0: a foreground call is answered at its end, never yielded

    @field_validator("max_timeout_seconds", "default_timeout_seconds", "worker_grace_seconds",
                     "worker_start_seconds", "approval_timeout_seconds", "yield_after_seconds")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number of seconds")
        return value


Policy = Action  # allow / ask / deny, as peon.approval.policy decides them
ContainmentMode = Literal["auto", "cgroup", "process-tree"]
SandboxMode = Literal["off", "auto", "required"]
SandboxKind = Literal["landlock", "bwrap"]
SandboxCaches = Literal["workspace", "session", "user", "off"]
# A risk name is a ToolRisk value; TOML gives a string, so the enum is validated by value.
RiskName = Annotated[ToolRisk, Field(strict=False)]


class ApprovalRule(_Section):
    """A per-call refinement of the per-risk policy; every matcher given must match."""

    tool: str | None = Field(default=None, min_length=1)
    risk: RiskName | None = None
    command_prefix: str | None = None
    path_prefix: str | None = None
    decision: Policy
    tighten_only: bool = False
    # Lines the rule must match and must not match, checked when the rule loads (peon.approval.rule_examples).
    examples: tuple[str, ...] = ()
    not_examples: tuple[str, ...] = ()

    @field_validator("command_prefix")
    @classmethod
    def _simple_command(cls, value: str | None) -> str | None:
        if value is not None:
            check_command_prefix(value)
        return value

    @field_validator("path_prefix")
    @classmethod
    def _workspace_path(cls, value: str | None) -> str | None:
        if value is not None:
            check_path_prefix(value)
        return value

    @model_validator(mode="after")
    def _has_matcher(self) -> ApprovalRule:
        if self.tool is None and self.risk is None and self.command_prefix is None and self.path_prefix is None:
            raise ValueError("a rule needs at least one of tool, risk, command_prefix, path_prefix")
        refused = examples_refused(self.command_prefix, self.path_prefix, self.examples, self.not_examples)
        if refused is not None:
            raise ValueError(refused)
        for expected, items in ((True, self.examples), (False, self.not_examples)):
            for example in items:
                problem = example_problem(self.decision, self.command_prefix, self.path_prefix, example, expected)
                if problem is not None:
                    raise ValueError(f"{problem}; fix the rule or the example")
        return self


class Approval(_Section):
    read_only: Policy
    filesystem: Policy
    process: Policy
    delegate: Policy
    # Process calls that run inside the OS sandbox; unset: the `process` value applies.
    process_sandboxed: Policy | None = None
    rules: tuple[ApprovalRule, ...] = ()


class Skills(_Section):
    max_skills: int = Field(ge=0)
    max_skill_bytes: int = Field(ge=1)


class AgentCommand(_Section):
    executable: str = Field(min_length=1)
    args: tuple[str, ...]
    sandbox: bool = False  # run this adapter inside the session's OS sandbox (see [sandbox])


class Agents(_Section):
    approval_prompt_chars: int = Field(ge=1)
    claude: AgentCommand
    codex: AgentCommand
    pi: AgentCommand


# One execve string (MAX_ARG_STRLEN, with its NUL) bounds a variable's NAME=value.
MAX_ENVIRONMENT_BYTES = 32 * 4096 - 1


def _environment_value(value: Any) -> str | bool:
    if value is False:
        return False
    if not isinstance(value, str):
        raise ValueError("must be a string (the value to set) or false (keep what the session inherited)")
    if "\0" in value:
        raise ValueError("must not contain a NUL character")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_ENVIRONMENT_BYTES:
        raise ValueError(f"must be at most {MAX_ENVIRONMENT_BYTES} bytes of UTF-8")
    return value


EnvironmentValue = Annotated[Any, BeforeValidator(_environment_value)]


def _environment_names(table: dict[str, Any]) -> dict[str, Any]:
    for name in table:
        if not ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an environment variable name (letters, digits and '_', "
                             "not beginning with a digit)")
    return table


def _login_profile_setting(table: Any) -> Any:
    """``login_profile`` is a setting, not a variable: a boolean; ``true`` (the default) is kept as its
    absence, ``false`` as the one false value the variables' rule accepts."""
    if isinstance(table, dict) and LOGIN_PROFILE in table:
        value = table[LOGIN_PROFILE]
        if not isinstance(value, bool):
            raise ValueError(f"{LOGIN_PROFILE} must be true (commands read the login profile: bash -lc) or false "
                             f"(bash -c with Peon's own clean profile), got {value!r}")
        if value:
            table = {name: v for name, v in table.items() if name != LOGIN_PROFILE}
    return table


Environment = Annotated[dict[str, EnvironmentValue], BeforeValidator(_login_profile_setting),
                        AfterValidator(_environment_names)]


class Runtime(_Section):
    containment: ContainmentMode


def _sandbox_path(value: str) -> str:
    if "\0" in value:
        raise ValueError("a path cannot contain NUL")
    if not (value.startswith("/") or value == "~" or value.startswith("~/")):
        raise ValueError(f"{value!r} must be an absolute path or start with ~/")
    return value


class Sandbox(_Section):
    """The OS sandbox for commands (see docs/security.md)."""

    mode: SandboxMode
    kind: SandboxKind
    writable: tuple[str, ...]
    readable: tuple[str, ...]
    network: bool | tuple[str, ...]  # a tuple: the egress allowlist (host names, host:port)
    network_deny: tuple[str, ...] = ()  # entries the proxy refuses whatever allows them (same grammar)
    network_ask: bool = False  # a host not on the allowlist is put to the approver rather than refused
    isolate_signals: bool
    isolate_abstract_sockets: bool
    protected: tuple[str, ...] = AGENT_CONTROL_PATHS  # the one agent-control list (peon/core/agent_control.py)
    caches: SandboxCaches = "workspace"

    @field_validator("writable", "readable")
    @classmethod
    def _paths(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_sandbox_path(item) for item in value)

    @field_validator("network", "network_deny")
    @classmethod
    def _allowlist(cls, value: bool | tuple[str, ...]) -> bool | tuple[str, ...]:
        if isinstance(value, tuple):
            from peon.approval.network_allowlist import parse_entry  # the grammar the egress proxy applies

            for item in value:
                parse_entry(item)  # raises ValueError naming the rule
        return value

    @field_validator("protected")
    @classmethod
    def _relative(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            problem = check_entry(item)
            if problem is not None:
                raise ValueError(problem)
        return value


class ToolsConfig(_Section):
    extra: tuple[str, ...] = ()
    entry_points: bool = True


class Audit(_Section):
    max_bytes: int = Field(ge=1024)
    backups: int = Field(ge=0, le=100)
    fsync: bool = False


def _valid_patterns(allow: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    for kind, patterns in allow.items():
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"redaction.allow.{kind}: {pattern!r} is not a regular expression ({exc})") from None
    return allow


class Redaction(_Section):
    """Redaction of credentials in what Peon returns, keeps and logs (docs/security.md)."""

    enabled: bool = True
    allow: Annotated[dict[str, tuple[str, ...]], AfterValidator(_valid_patterns)] = Field(default_factory=dict)


class Jobs(_Section):
    """Background jobs, the output store and the text given to the model (docs/jobs.md)."""

    max_running: int = Field(ge=0)
    max_lifetime_seconds: float = Field(gt=0)
    output_buffer_bytes: int = Field(ge=1024)
    session_output_bytes: int = Field(ge=1024)
    clean_output: bool = True
    progress_lines: int = Field(ge=0, le=100)
    progress_line_bytes: int = Field(ge=16, le=4096)
    max_write_bytes: int = Field(ge=1, le=1 << 20)
    max_queued_input_bytes: int = Field(ge=1024, le=1 << 26)

    @field_validator("max_lifetime_seconds")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number of seconds")
        return value


class Checkpoints(_Section):
    """The workspace's checkpoints around each call that can change it (docs/changes.md)."""

    enabled: bool = True
    exclude: tuple[str, ...] = ()
    max_file_bytes: int = Field(ge=1)
    max_store_bytes: int = Field(ge=1048576)
    max_seconds: float = Field(gt=0, le=3600)

    @field_validator("exclude")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            if not pattern.strip("/") or "\0" in pattern or pattern.startswith(":"):
                raise ValueError(f"{pattern!r} is not a directory name or a glob of workspace paths")
        return value


class Hook(_Section):
    """A program or URL the supervisor consults around each call it matches (user configuration only)."""

    event: Literal["before_call", "after_call"]
    matcher: str = ""  # Claude Code's: empty or "*" for every tool, else a regular expression on the tool's name
    command: tuple[str, ...] = ()
    url: str = ""
    timeout_seconds: float = Field(default=10.0, gt=0, le=600)

    @field_validator("matcher")
    @classmethod
    def _pattern(cls, value: str) -> str:
        return check_matcher(value)

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _one_target(self) -> Hook:
        if bool(self.command) == bool(self.url):
            raise ValueError("a hook needs exactly one of command (an argv list) and url")
        if self.command and not self.command[0]:
            raise ValueError("a hook's command starts with the program to run")
        return self


class PeonConfig(_Section):
    limits: Limits
    jobs: Jobs
    checkpoints: Checkpoints
    approval: Approval
    skills: Skills
    agents: Agents
    runtime: Runtime
    tools: ToolsConfig
    audit: Audit
    redaction: Redaction = Field(default_factory=Redaction)
    environment: Environment
    sandbox: Sandbox
    hooks: tuple[Hook, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
