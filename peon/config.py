"""Configuration model and loading.

Promise: a :class:`PeonConfig` is always complete and valid. Loading starts from the shipped defaults
(``config/defaults.toml``, installed as package data) and applies override layers in order; an unknown
key or a value of the wrong type is a :class:`~peon.errors.ConfigError` naming the layer (file path or
"overrides"), the dotted key and the expected type — never a silent default.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import ConfigError


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class Limits(_Section):
    max_timeout_seconds: float = Field(gt=0)
    max_output_bytes: int = Field(ge=1024)
    read_max_bytes: int = Field(ge=1)
    max_input_bytes: int = Field(ge=1024)
    worker_grace_seconds: float = Field(gt=0)
    approval_timeout_seconds: float = Field(gt=0)

    @field_validator("max_timeout_seconds", "worker_grace_seconds", "approval_timeout_seconds")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number of seconds")
        return value


Policy = Literal["allow", "ask", "deny"]


class Approval(_Section):
    read_only: Policy
    filesystem: Policy
    process: Policy
    delegate: Policy


class Skills(_Section):
    max_skills: int = Field(ge=0)
    max_skill_bytes: int = Field(ge=1)


class AgentCommand(_Section):
    executable: str = Field(min_length=1)
    args: tuple[str, ...]


class Agents(_Section):
    approval_prompt_chars: int = Field(ge=1)
    claude: AgentCommand
    codex: AgentCommand
    pi: AgentCommand


class Runtime(_Section):
    containment: Literal["auto", "cgroup", "process-tree"]


class ToolsConfig(_Section):
    extra: tuple[str, ...] = ()
    entry_points: bool = True


class PeonConfig(_Section):
    limits: Limits
    approval: Approval
    skills: Skills
    agents: Agents
    runtime: Runtime
    tools: ToolsConfig

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


@dataclass(frozen=True)
class Layer:
    """One configuration source: where it came from and the raw table it contributed."""

    source: str  # a file path, "defaults" or "overrides"
    data: Mapping[str, Any]


@dataclass(frozen=True)
class LoadedConfig:
    config: PeonConfig
    layers: tuple[Layer, ...] = field(default=())


def shipped_defaults() -> dict[str, Any]:
    text = resources.files("peon._config").joinpath("defaults.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist", {"file": str(path)}) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"configuration file {path} is not valid TOML: {exc}", {"file": str(path)}) from None
    except OSError as exc:
        raise ConfigError(f"configuration file {path} cannot be read: {exc.strerror}", {"file": str(path)}) from None


def merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge two tables; values in ``top`` win, sub-tables merge key by key."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def describe_validation_error(source: str, exc: ValidationError) -> ConfigError:
    """Turn pydantic's report into one sentence per problem naming source, key and expectation."""
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            problems.append(f"unknown key {key!r}")
        elif err["type"] == "missing":
            problems.append(f"missing key {key!r}")
        else:
            problems.append(f"key {key!r}: {err['msg'].lower()} (got {err.get('input')!r})")
    return ConfigError(
        f"invalid configuration in {source}: " + "; ".join(problems),
        {"source": source, "errors": [{"key": ".".join(map(str, e["loc"])), "type": e["type"]} for e in exc.errors()]},
    )


def validate(data: Mapping[str, Any], source: str) -> PeonConfig:
    try:
        return PeonConfig.model_validate(data)
    except ValidationError as exc:
        raise describe_validation_error(source, exc) from None


def load_config(overrides: Mapping[str, Any] | str | Path | None = None) -> LoadedConfig:
    """Shipped defaults, then ``overrides`` (a table, or the path of a TOML file)."""
    layers = [Layer("defaults", shipped_defaults())]
    if isinstance(overrides, (str, Path)):
        path = Path(overrides)
        layers.append(Layer(str(path), read_toml(path)))
    elif overrides is not None:
        layers.append(Layer("overrides", dict(overrides)))
    merged: dict[str, Any] = {}
    for layer in layers:
        if not isinstance(layer.data, Mapping):
            raise ConfigError(f"invalid configuration in {layer.source}: expected a table of keys")
        # Validate each layer's keys against the model so an error names the layer that caused it.
        candidate = merge(merged, layer.data)
        validate(candidate, layer.source)
        merged = candidate
    return LoadedConfig(validate(merged, "the merged configuration"), tuple(layers))
