"""Configuration model and layered loading.

Promises:

* a :class:`PeonConfig` is always complete and valid;
* layers apply in order — the shipped defaults (``config/defaults.toml``, package data), the user's
  file (``$PEON_CONFIG``, else ``$XDG_CONFIG_HOME/peon/config.toml``, else
  ``~/.config/peon/config.toml``), the project's file (``<workspace>/.peon/config.toml``), then the
  embedding application's or command line's overrides (a table, or the path of a TOML file) — later
  layers win key by key, except that ``[[approval.rules]]`` accumulate;
* an unknown key or a value of the wrong type is a :class:`~peon.core.errors.ConfigError` naming the layer
  (file path or "overrides"), the dotted key and the expected type — never a silent default or a
  coercion (``"100"`` is not an integer, ``true`` is not a number);
* a project file can only tighten what the layers below it resolved to: it may lower limits, make
  approval stricter (allow < ask < deny) and add rules that ask or deny; anything else it sets —
  raising a limit, loosening approval, an ``allow`` rule, agent adapters, tools, the audit log, or any
  key not listed as tightenable — makes loading fail with one error naming every refused key;
* a project's approval settings are floors: they become ``tighten_only`` rules that no later layer
  can loosen;
* :attr:`LoadedConfig.layers` records, per layer, the dotted keys it set;
* only regular files are read (a FIFO, device or directory in place of a configuration file is a
  ``config_invalid`` error, never a hang; see :mod:`peon.core.statefile`), and a layer whose tables and
  arrays nest deeper than :data:`MAX_CONFIG_DEPTH` levels is a ``config_invalid`` error naming its
  source, never a ``RecursionError``.

The environment (for the user file's location) is passed in, never read implicitly by the supervisor.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import tomllib
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal
from collections.abc import Mapping

from pydantic import (
    AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator,
)

from peon.approval.policy import STRICTNESS, Action, check_command_prefix, check_path_prefix
from peon.core.tool import RISK_NAMES, ToolRisk

from peon.core.environment import ENV_NAME
from peon.core.errors import ConfigError
from peon.core.text import shorten
from peon.core.statefile import RefusedFile, read_regular_file
from peon.core.userdir import user_peon_dir

MAX_CONFIG_FILE_BYTES = 1 << 20
# The model nests at most four levels (approval.rules[i].tool); anything far deeper is a mistake or an
# attack on the recursive steps that follow (merging, validation, error messages).
MAX_CONFIG_DEPTH = 16
PROJECT_CONFIG = Path(".peon") / "config.toml"


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
    max_queued_calls: int = Field(ge=1)
    max_queued_bytes: int = Field(ge=1024)

    @field_validator("max_timeout_seconds", "default_timeout_seconds", "worker_grace_seconds",
                     "worker_start_seconds", "approval_timeout_seconds")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number of seconds")
        return value


Policy = Action  # allow / ask / deny, as peon.approval.policy decides them
ContainmentMode = Literal["auto", "cgroup", "process-tree"]
SandboxMode = Literal["off", "auto", "required"]
SandboxKind = Literal["landlock", "bwrap"]
SandboxCaches = Literal["session", "user", "off"]
LayerKind = Literal["defaults", "user", "project", "overrides"]
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


Environment = Annotated[dict[str, EnvironmentValue], AfterValidator(_environment_names)]


class Runtime(_Section):
    containment: ContainmentMode


_HOST_ENTRY = re.compile(r"(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]{0,252})(:[0-9]{1,5})?")


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
    isolate_signals: bool
    isolate_abstract_sockets: bool
    protected: tuple[str, ...] = ()
    caches: SandboxCaches = "session"

    @field_validator("writable", "readable")
    @classmethod
    def _paths(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_sandbox_path(item) for item in value)

    @field_validator("network")
    @classmethod
    def _allowlist(cls, value: bool | tuple[str, ...]) -> bool | tuple[str, ...]:
        if isinstance(value, tuple):
            for item in value:
                if not _HOST_ENTRY.fullmatch(item):
                    raise ValueError(f"{item!r} is not a host name, *.domain, or host:port")
        return value

    @field_validator("protected")
    @classmethod
    def _relative(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            parts = item.split("/")
            if not item or item.startswith("/") or "\0" in item or any(p in ("", ".", "..") for p in parts):
                raise ValueError(f"{item!r} must be a relative path without '.', '..' or empty parts")
        return value


class ToolsConfig(_Section):
    extra: tuple[str, ...] = ()
    entry_points: bool = True


class Audit(_Section):
    max_bytes: int = Field(ge=1024)
    backups: int = Field(ge=0, le=100)
    fsync: bool = False


class Jobs(_Section):
    """Background jobs, the output store and the text given to the model (docs/jobs.md)."""

    max_running: int = Field(ge=0)
    max_lifetime_seconds: float = Field(gt=0)
    output_buffer_bytes: int = Field(ge=1024)
    session_output_bytes: int = Field(ge=1024)
    clean_output: bool = True
    progress_lines: int = Field(ge=0, le=100)
    progress_line_bytes: int = Field(ge=16, le=4096)

    @field_validator("max_lifetime_seconds")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number of seconds")
        return value


class PeonConfig(_Section):
    limits: Limits
    jobs: Jobs
    approval: Approval
    skills: Skills
    agents: Agents
    runtime: Runtime
    tools: ToolsConfig
    audit: Audit
    environment: Environment
    sandbox: Sandbox

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# -- layers ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    """One configuration source: where it came from, the raw table it contributed, the keys it set."""

    source: str  # a file path, "defaults" or "overrides"
    data: Mapping[str, Any]
    kind: LayerKind = "overrides"
    keys: tuple[str, ...] = ()  # dotted keys, rules as "approval.rules[i]"


@dataclass(frozen=True)
class LoadedConfig:
    config: PeonConfig
    layers: tuple[Layer, ...] = field(default=())
    rule_sources: tuple[str, ...] = ()  # for each config.approval.rules entry: "approval.rules[i] in <source>"

    def source_of(self, key: str) -> str | None:
        """The source of the last layer that set dotted ``key``."""
        for layer in reversed(self.layers):
            if key in layer.keys:
                return layer.source
        return None

    def describe_layers(self) -> list[dict[str, Any]]:
        return [{"source": layer.source, "kind": layer.kind, "keys": list(layer.keys)} for layer in self.layers]

    def to_wire(self) -> dict[str, Any]:
        """Plain data for :class:`peon.core.config_view.ResolvedConfig` in the supervisor and workers."""
        return {"config": self.config.to_dict(), "layers": self.describe_layers(),
                "rule_sources": list(self.rule_sources)}


def shipped_defaults() -> dict[str, Any]:
    text = resources.files("peon._config").joinpath("defaults.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def read_toml(path: Path, *, missing_ok: bool = False) -> dict[str, Any] | None:
    """Parse one configuration file. Only a regular file of at most 1 MiB is read (a FIFO or a device
    would hang or flood the loader; it is never even opened for reading), and its tables and arrays may
    nest at most :data:`MAX_CONFIG_DEPTH` levels."""
    try:
        raw = read_regular_file(path, max_bytes=MAX_CONFIG_FILE_BYTES, follow_symlinks=True)
    except (FileNotFoundError, NotADirectoryError):
        if missing_ok:
            return None
        raise ConfigError(f"configuration file {path} does not exist", {"file": str(path)}) from None
    except RefusedFile as exc:
        raise ConfigError(f"configuration file {exc}", {"file": str(path)}) from None
    except OSError as exc:
        raise ConfigError(f"configuration file {path} cannot be read: {exc.strerror}", {"file": str(path)}) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"configuration file {path} is not UTF-8 (byte {exc.start})", {"file": str(path)}) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"configuration file {path} is not valid TOML: {exc}", {"file": str(path)}) from None
    except RecursionError:
        raise _too_deep(str(path), None) from None
    check_nesting(data, str(path))
    return data


def _too_deep(source: str, key: str | None) -> ConfigError:
    where = f" (at {key!r})" if key else ""
    return ConfigError(
        f"invalid configuration in {source}: tables and arrays nest deeper than {MAX_CONFIG_DEPTH} levels{where}; "
        f"Peon's configuration never nests more than a few",
        {"source": source, "rule": "max_depth", "limit": MAX_CONFIG_DEPTH},
    )


def check_nesting(data: Any, source: str, limit: int | None = None) -> None:
    """Refuse tables and arrays nested deeper than ``limit`` levels (walked without recursion, so any
    depth is refused cleanly and every later, recursive step is safe)."""
    limit = MAX_CONFIG_DEPTH if limit is None else limit
    stack: list[tuple[Any, int, str]] = [(data, 0, "")]
    while stack:
        value, depth, key = stack.pop()
        if isinstance(value, Mapping):
            children = [(v, f"{key}.{k}" if key else str(k)) for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            children = [(v, f"{key}[{i}]") for i, v in enumerate(value)]
        else:
            continue
        if depth >= limit and children:
            raise _too_deep(source, key or None)
        stack.extend((child, depth + 1, name) for child, name in children)


def user_config_path(env: Mapping[str, str]) -> tuple[Path | None, bool]:
    """Where the user's file is, and whether it must exist (it must when named by ``PEON_CONFIG``)."""
    named = env.get("PEON_CONFIG")
    if named:
        if named.startswith("~/") and env.get("HOME"):
            named = env["HOME"] + named[1:]
        if not os.path.isabs(named):
            raise ConfigError(f"PEON_CONFIG must be an absolute path, got {named!r}", {"PEON_CONFIG": named})
        return Path(named), True
    directory = user_peon_dir(env)
    return (directory / "config.toml" if directory else None), False


def merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge two tables; values in ``top`` win, sub-tables merge key by key."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def dotted_keys(data: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The leaf keys a table sets, e.g. ``limits.max_output_bytes``; rules as ``approval.rules[i]``."""
    keys = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            keys.extend(dotted_keys(value, name + "."))
        elif name == "approval.rules" and isinstance(value, (list, tuple)):
            keys.extend(f"{name}[{i}]" for i in range(len(value)))
        else:
            keys.append(name)
    return keys


# -- validation and error messages -----------------------------------------------------------------

_EXPECTED = {
    "int_type": "an integer", "int_from_float": "an integer", "float_type": "a number",
    "bool_type": "true or false", "string_type": "a string", "tuple_type": "an array", "list_type": "an array",
    "model_type": "a table", "model_attributes_type": "a table", "dict_type": "a table",
}


def _toml_type(value: Any) -> str:
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "float"), (str, "string"),
                       ((list, tuple), "array"), (Mapping, "table")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _show(value: Any, limit: int = 80) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return shorten(text, limit)


def _key_name(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] | None = PeonConfig
    for part in loc:
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part) if model else None
        model = _model_in(info.annotation) if info else None
        if model is None:
            return []
    return list(model.model_fields) if model else []


def _problem(err: Mapping[str, Any]) -> str:
    loc = tuple(err["loc"])
    key = _key_name(loc)
    value = err.get("input")
    if err["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(loc[-1]), _known_keys(loc[:-1]), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown key {key!r}{hint}"
    if err["type"] == "missing":
        return f"missing key {key!r}"
    if err["type"] in _EXPECTED:
        return f"key {key!r} must be {_EXPECTED[err['type']]}, got {_toml_type(value)} {_show(value)}"
    if err["type"] == "literal_error":
        return f"key {key!r} must be one of {err['ctx']['expected']}, got {_show(value)}"
    message = err["msg"].removeprefix("Value error, ")
    message = message[0].lower() + message[1:] if message else message
    return f"key {key!r}: {message} (got {_show(value)})"


def describe_validation_error(source: str, exc: ValidationError) -> ConfigError:
    """One sentence per problem naming source, dotted key and expectation."""
    errors = exc.errors()
    return ConfigError(
        f"invalid configuration in {source}: " + "; ".join(_problem(e) for e in errors),
        {"source": source, "errors": [{"key": _key_name(tuple(e["loc"])), "type": e["type"]} for e in errors]},
    )


def _arrays_as_tuples(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _arrays_as_tuples(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return tuple(_arrays_as_tuples(v) for v in value)
    return value


def validate(data: Mapping[str, Any], source: str) -> PeonConfig:
    try:
        return PeonConfig.model_validate(_arrays_as_tuples(data))
    except ValidationError as exc:
        raise describe_validation_error(source, exc) from None


# -- what a project may do -------------------------------------------------------------------------

CONTAINMENT_STRENGTH = {"process-tree": 0, "auto": 1, "cgroup": 2}


def project_refusals(data: Mapping[str, Any], user: PeonConfig) -> list[tuple[str, str]]:
    """(dotted key, why) for everything a project table sets that is not a tightening of ``user``.

    Anything not explicitly tightenable is refused, so a key added later is safe by default.
    """
    refused = []
    section = data.get("approval")
    approval: Mapping[str, Any] = section if isinstance(section, Mapping) else {}
    for index, rule in enumerate(approval.get("rules") or ()):
        key = f"approval.rules[{index}]"
        if rule.get("decision") == "allow":
            refused.append((key, 'decision = "allow": a project rule may only "ask" or "deny"'))
        if rule.get("tighten_only") is False:
            refused.append((f"{key}.tighten_only", "every project rule is tighten_only"))
    for key in dotted_keys(data):
        if key.startswith("approval.rules["):
            continue
        section, _, name = key.partition(".")
        value = _lookup(data, key)
        if section in ("limits", "skills", "jobs") and "." not in name:
            current = getattr(getattr(user, section), name)
            if value > current:
                refused.append((key, f"{value!r} is above the user's {current!r}: a project may only lower limits"))
        elif section == "approval" and name in RISK_NAMES:
            current = getattr(user.approval, name)
            if STRICTNESS[value] < STRICTNESS[current]:
                refused.append((key, f"{value!r} is looser than the user's {current!r}: a project may only make "
                                     "approval stricter (allow < ask < deny)"))
        elif key == "runtime.containment":
            current = user.runtime.containment
            if CONTAINMENT_STRENGTH[value] < CONTAINMENT_STRENGTH[current]:
                refused.append((key, f"{value!r} is weaker than the user's {current!r}: a project may only "
                                     "strengthen containment (process-tree < auto < cgroup)"))
        elif section == "sandbox":
            why = _sandbox_refusal(name, value, user.sandbox)
            if why:
                refused.append((key, why))
        elif key == "tools.entry_points":
            if value and not user.tools.entry_points:
                refused.append((key, "a project cannot enable tools the user disabled"))
        elif section == "agents":
            refused.append((key, "only the user configures agent adapters (executables, argument vectors, "
                                 "what the approver is shown)"))
        elif key == "tools.extra":
            refused.append((key, "a project cannot add tools"))
        elif section == "audit":
            refused.append((key, "only the user configures the audit log"))
        elif section == "environment":
            refused.append((key, "only the user configures the environment commands and agents run with"))
        else:
            refused.append((key, "not a setting a project may change"))
    return refused


SANDBOX_STRENGTH = {"off": 0, "auto": 1, "required": 2}


def _sandbox_refusal(name: str, value: Any, user: Any) -> str | None:
    """Why a project may not set ``sandbox.<name>`` to ``value``, or None: it may only make the sandbox
    stronger (mode up, network off, isolation on)."""
    if name == "mode":
        if SANDBOX_STRENGTH[value] < SANDBOX_STRENGTH[user.mode]:
            return (f"{value!r} is weaker than the user's {user.mode!r}: a project may only strengthen the "
                    "sandbox (off < auto < required)")
        return None
    if name == "network":
        if value is False or user.network is True:
            return None
        if isinstance(value, (list, tuple)) and isinstance(user.network, tuple) and set(value) <= set(user.network):
            return None
        return "a project may only turn the network off or narrow the user's allowlist"
    if name in ("isolate_signals", "isolate_abstract_sockets"):
        return None if value is True or getattr(user, name) is False else "a project may only turn isolation on"
    if name == "protected":
        missing = [item for item in user.protected if item not in value]
        return None if not missing else f"a project may only add protected paths, not remove {missing}"
    return "only the user chooses the sandbox's kind, its writable and readable paths and its caches"


def _lookup(data: Mapping[str, Any], key: str) -> Any:
    for part in key.split("."):
        data = data[part]
    return data


def _project_floors(data: Mapping[str, Any], source: str) -> tuple[list[dict[str, Any]], list[str]]:
    """A project's rules and per-risk settings as tighten_only rules, with their sources."""
    section = data.get("approval")
    approval: Mapping[str, Any] = section if isinstance(section, Mapping) else {}
    rules, sources = [], []
    for index, rule in enumerate(approval.get("rules") or ()):
        rules.append({**rule, "tighten_only": True})
        sources.append(f"approval.rules[{index}] in {source}")
    for risk in RISK_NAMES:
        value = approval.get(risk)
        if value in ("ask", "deny"):
            rules.append({"risk": risk, "decision": value, "tighten_only": True})
            sources.append(f"approval.{risk} in {source}")
    return rules, sources


# -- loading ---------------------------------------------------------------------------------------


def _split_rules(data: Mapping[str, Any], source: str) -> tuple[dict[str, Any], list[Any]]:
    approval = data.get("approval")
    if not isinstance(approval, Mapping) or "rules" not in approval:
        return dict(data), []
    rules = approval["rules"]
    if not isinstance(rules, (list, tuple)):
        raise ConfigError(f"invalid configuration in {source}: key 'approval.rules' must be an array of tables, "
                          f"got {_toml_type(rules)} {_show(rules)}", {"source": source, "key": "approval.rules"})
    return {**data, "approval": {k: v for k, v in approval.items() if k != "rules"}}, list(rules)


def _with_rules(data: Mapping[str, Any], rules: list[Any]) -> dict[str, Any]:
    return merge(data, {"approval": {"rules": list(rules)}})


def load_config(
    overrides: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> LoadedConfig:
    """Resolve the configuration: defaults, user file (located through ``env``, default
    ``os.environ``), project file (when ``workspace`` is given), then ``overrides``."""
    env = os.environ if env is None else env
    layers: list[Layer] = [Layer("defaults", shipped_defaults(), "defaults")]
    user_path, required = user_config_path(env)
    if user_path is not None:
        data = read_toml(user_path, missing_ok=not required)
        if data is not None:
            layers.append(Layer(str(user_path), data, "user"))
    if workspace is not None:
        project_path = Path(workspace) / PROJECT_CONFIG
        data = read_toml(project_path, missing_ok=True)
        if data is not None:
            layers.append(Layer(str(project_path), data, "project"))
    if isinstance(overrides, (str, os.PathLike)):
        layers.append(Layer(os.fspath(overrides), read_toml(Path(overrides)) or {}, "overrides"))
    elif overrides is not None:
        check_nesting(overrides, "overrides")
        layers.append(Layer("overrides", overrides, "overrides"))

    merged: dict[str, Any] = {}
    rules: list[Any] = []
    rule_sources: list[str] = []
    recorded = []
    for layer in layers:
        if not isinstance(layer.data, Mapping):
            raise ConfigError(f"invalid configuration in {layer.source}: expected a table of keys, "
                              f"got {_toml_type(layer.data)}", {"source": layer.source})
        plain, own_rules = _split_rules(layer.data, layer.source)
        candidate = merge(merged, plain)
        # Validated with only this layer's rules, so an error's rule index is the one in this file.
        validate(_with_rules(candidate, own_rules), layer.source)
        if layer.kind == "project":
            user = validate(_with_rules(merged, rules), "the user's configuration")
            refused = project_refusals(layer.data, user)
            if refused:
                raise ConfigError(
                    f"project configuration {layer.source} may only tighten the user's settings; refused: "
                    + "; ".join(f"{key} ({why})" for key, why in refused),
                    {"source": layer.source, "refused": [{"key": key, "reason": why} for key, why in refused]},
                )
            own_rules, sources = _project_floors(layer.data, layer.source)
        else:
            sources = [f"approval.rules[{i}] in {layer.source}" for i in range(len(own_rules))]
        rules.extend(own_rules)
        rule_sources.extend(sources)
        merged = candidate
        recorded.append(Layer(layer.source, layer.data, layer.kind, tuple(dotted_keys(layer.data))))
    config = validate(_with_rules(merged, rules), "the merged configuration")
    return LoadedConfig(config, tuple(recorded), tuple(rule_sources))
