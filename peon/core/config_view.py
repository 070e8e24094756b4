"""The resolved configuration as the supervisor and its workers read it: typed, frozen, plain data.

Promises:

* a :class:`ConfigView` has exactly the tables and keys of the client's model
  (:class:`peon.client.config.PeonConfig`; ``tests/unit/test_config_view.py`` checks that the two
  declare the same), each of the type declared here, so readers need no default and a type checker
  checks every read: ``config.limits.max_output_bytes`` is an ``int``;
* it is built only from what :func:`peon.client.config.load_config` produced and validated
  (``LoadedConfig.to_wire()``), and built whole or not at all: a table or key missing, an unknown
  key, or a value of another type is a :class:`~peon.core.errors.ConfigError` naming the dotted key;
* it is read-only (frozen dataclasses, tuples, a read-only mapping for ``[environment]``), and
  :meth:`ConfigView.to_dict` gives back the plain data it was built from.

The client resolves and validates the layers (and reports a bad file before any process starts); the
supervisor and its workers only read the result, without importing the validation machinery
(pydantic), which keeps them small and quick to fork. This module owns the view's shape and its
building; the bounds of each value are the model's.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal
from collections.abc import Mapping

from peon.core.errors import ConfigError
from peon.core.risk import ToolRisk
from peon.core.text import shorten

Decision = Literal["allow", "ask", "deny"]  # as peon.approval.policy decides them


@dataclass(frozen=True, slots=True)
class LimitsView:
    max_timeout_seconds: float
    default_timeout_seconds: float
    max_output_bytes: int
    read_max_bytes: int
    max_input_bytes: int
    worker_grace_seconds: float
    worker_start_seconds: float
    worker_max_calls: int
    approval_timeout_seconds: float
    memory_max_bytes: int
    max_processes: int
    max_parallel_calls: int
    max_queued_calls: int
    max_queued_bytes: int
    yield_after_seconds: float


@dataclass(frozen=True, slots=True)
class JobsView:
    max_running: int
    max_lifetime_seconds: float
    output_buffer_bytes: int
    session_output_bytes: int
    clean_output: bool
    progress_lines: int
    progress_line_bytes: int
    max_write_bytes: int
    max_queued_input_bytes: int


@dataclass(frozen=True, slots=True)
class CheckpointsView:
    enabled: bool
    exclude: tuple[str, ...]
    max_file_bytes: int
    max_store_bytes: int
    max_seconds: float


@dataclass(frozen=True, slots=True)
class ApprovalRuleView:
    tool: str | None
    risk: ToolRisk | None
    command_prefix: str | None
    path_prefix: str | None
    decision: Decision
    tighten_only: bool
    examples: tuple[str, ...]
    not_examples: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ApprovalView:
    read_only: Decision
    filesystem: Decision
    process: Decision
    delegate: Decision
    process_sandboxed: Decision | None  # None: the ``process`` value applies
    rules: tuple[ApprovalRuleView, ...]


@dataclass(frozen=True, slots=True)
class SkillsView:
    max_skills: int
    max_skill_bytes: int


@dataclass(frozen=True, slots=True)
class AgentCommandView:
    executable: str
    args: tuple[str, ...]
    sandbox: bool


@dataclass(frozen=True, slots=True)
class AgentsView:
    approval_prompt_chars: int
    claude: AgentCommandView
    codex: AgentCommandView
    pi: AgentCommandView


@dataclass(frozen=True, slots=True)
class RuntimeView:
    containment: Literal["auto", "cgroup", "process-tree"]


@dataclass(frozen=True, slots=True)
class ToolsView:
    extra: tuple[str, ...]
    entry_points: bool


@dataclass(frozen=True, slots=True)
class AuditView:
    max_bytes: int
    backups: int
    fsync: bool


@dataclass(frozen=True, slots=True)
class RedactionView:
    enabled: bool
    allow: Mapping[str, tuple[str, ...]]  # per kind, the values kept (regular expressions matched whole)


@dataclass(frozen=True, slots=True)
class SandboxView:
    mode: Literal["off", "auto", "required"]
    kind: Literal["landlock", "bwrap"]
    writable: tuple[str, ...]
    readable: tuple[str, ...]
    network: bool | tuple[str, ...]  # a tuple: the egress allowlist (host names, host:port)
    network_deny: tuple[str, ...]
    network_ask: bool
    isolate_signals: bool
    isolate_abstract_sockets: bool
    protected: tuple[str, ...]
    caches: Literal["workspace", "session", "user", "off"]


@dataclass(frozen=True, slots=True)
class HookView:
    event: Literal["before_call", "after_call"]
    matcher: str
    command: tuple[str, ...]
    url: str
    timeout_seconds: float


@dataclass(frozen=True, slots=True)
class ConfigView:
    """The whole configuration, one attribute per table."""

    limits: LimitsView
    jobs: JobsView
    checkpoints: CheckpointsView
    approval: ApprovalView
    skills: SkillsView
    agents: AgentsView
    runtime: RuntimeView
    tools: ToolsView
    audit: AuditView
    redaction: RedactionView
    # Each variable commands and agents run with: a string sets it, False keeps what the session inherited.
    environment: Mapping[str, str | bool]
    sandbox: SandboxView
    hooks: tuple[HookView, ...]  # the user's [[hooks]] (a project file cannot declare one)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConfigView:
        """The view of a validated configuration's plain data (``PeonConfig.to_dict()``)."""
        view: ConfigView = _build(cls, data, "")
        return view

    def to_dict(self) -> dict[str, Any]:
        """The plain data (JSON types) this view was built from."""
        plain: dict[str, Any] = _plain(self)
        return plain


class ResolvedConfig:
    """A configuration as the client resolved it: the view, the layers and where each rule came from."""

    def __init__(self, wire: Mapping[str, Any]):
        self.config = ConfigView.from_dict(wire["config"])
        self.layers: list[dict[str, Any]] = [dict(layer) for layer in wire["layers"]]
        self.rule_sources: tuple[str, ...] = tuple(wire["rule_sources"])

    def source_of(self, key: str) -> str | None:
        """The source of the last layer that set dotted ``key``."""
        for layer in reversed(self.layers):
            if key in layer["keys"]:
                return str(layer["source"])
        return None

    def describe_layers(self) -> list[dict[str, Any]]:
        return [dict(layer) for layer in self.layers]


# -- building and taking apart ---------------------------------------------------------------------


def _refused(key: str, why: str) -> ConfigError:
    return ConfigError(f"the resolved configuration is not what the client validated: {key or 'the top level'} "
                       f"{why}", {"key": key})


def _build(cls: type[Any], data: Any, prefix: str) -> Any:
    """An instance of the view dataclass ``cls`` from the table ``data`` at dotted ``prefix``."""
    if not isinstance(data, Mapping):
        raise _refused(prefix, f"is {type(data).__name__}, not a table")
    hints = _hints(cls)
    unknown = sorted(str(key) for key in data if key not in hints)
    if unknown:
        raise _refused(prefix, f"has unknown key(s) {unknown}")
    values = {}
    for name, kind in hints.items():
        key = f"{prefix}.{name}" if prefix else name
        if name not in data:
            raise _refused(key, "is missing")
        values[name] = _value(kind, data[name], key)
    return cls(**values)


def _value(kind: Any, value: Any, key: str) -> Any:
    """``value`` as the declared ``kind``: checked, never coerced but int to float."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if dataclasses.is_dataclass(kind):
        return _build(typing.cast(type, kind), value, key)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for option in (arg for arg in args if arg is not type(None)):
            try:
                return _value(option, value, key)
            except ConfigError:
                continue
    elif origin is Literal:
        if isinstance(value, str) and value in args:
            return value
    elif origin is tuple:
        if isinstance(value, (list, tuple)):
            return tuple(_value(args[0], item, f"{key}[{index}]") for index, item in enumerate(value))
    elif origin is Mapping:
        if isinstance(value, Mapping) and all(isinstance(name, str) for name in value):
            table = {name: _value(args[1], item, f"{key}.{name}") for name, item in value.items()}
            return types.MappingProxyType(table)
    elif kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif kind in (int, str):
        if isinstance(value, kind) and not isinstance(value, bool):
            return value
    elif isinstance(kind, type) and issubclass(kind, enum.Enum):
        try:
            return kind(value)
        except ValueError:
            pass
    raise _refused(key, f"is {shorten(repr(value), 60)}, not {_kind_name(kind)}")


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {name: _plain(item) for name, item in value.items()}
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if isinstance(value, enum.Enum):
        return value.value
    return value


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    """The declared type of each field of the view dataclass ``cls`` (resolved once)."""
    if cls not in _HINTS:
        hints = typing.get_type_hints(cls)
        _HINTS[cls] = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    return _HINTS[cls]


def _kind_name(kind: Any) -> str:
    return kind.__name__ if isinstance(kind, type) else str(kind).replace("typing.", "")
