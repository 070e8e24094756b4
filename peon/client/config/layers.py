"""Finding, reading and merging the configuration's layers into one validated configuration.

Promises:

* layers apply in order — the shipped defaults (``config/defaults.toml``, package data), the user's
  file (``$PEON_CONFIG``, else ``$XDG_CONFIG_HOME/peon/config.toml``, else
  ``~/.config/peon/config.toml``), the project's file (``<workspace>/.peon/config.toml``), then the
  embedding application's or command line's overrides (a table, or the path of a TOML file) — later
  layers win key by key, except that ``[[approval.rules]]`` accumulate;
* each layer is validated as it is merged, so an error names the layer that caused it (its file path
  or "overrides") and a rule's index in that layer (:mod:`peon.client.config.messages`); a project
  layer may only tighten (:mod:`peon.client.config.project`);
* :attr:`LoadedConfig.layers` records, per layer, the dotted keys it set;
* only regular files are read (a FIFO, device or directory in place of a configuration file is a
  ``config_invalid`` error, never a hang; see :mod:`peon.core.statefile`), and a layer nested deeper
  than :data:`~peon.client.config.tables.MAX_CONFIG_DEPTH` levels is a ``config_invalid`` error naming
  its source, never a ``RecursionError``.

The environment (for the user file's location) is passed in, never read implicitly by the supervisor.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal
from collections.abc import Mapping

from peon.client.config.messages import show_value, toml_type, validate
from peon.client.config.model import PeonConfig
from peon.client.config.project import project_floors, project_refusals
from peon.client.config.tables import check_nesting, dotted_keys, merge, nesting_error
from peon.core.errors import ConfigError
from peon.core.statefile import RefusedFile, read_regular_file
from peon.core.userdir import user_peon_dir

MAX_CONFIG_FILE_BYTES = 1 << 20
PROJECT_CONFIG = Path(".peon") / "config.toml"
LayerKind = Literal["defaults", "user", "project", "overrides"]


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
        raise nesting_error(str(path), None) from None
    check_nesting(data, str(path))
    return data


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


def _split_rules(data: Mapping[str, Any], source: str) -> tuple[dict[str, Any], list[Any]]:
    approval = data.get("approval")
    if not isinstance(approval, Mapping) or "rules" not in approval:
        return dict(data), []
    rules = approval["rules"]
    if not isinstance(rules, (list, tuple)):
        raise ConfigError(f"invalid configuration in {source}: key 'approval.rules' must be an array of tables, "
                          f"got {toml_type(rules)} {show_value(rules)}", {"source": source, "key": "approval.rules"})
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
                              f"got {toml_type(layer.data)}", {"source": layer.source})
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
            own_rules, sources = project_floors(layer.data, layer.source)
        else:
            sources = [f"approval.rules[{i}] in {layer.source}" for i in range(len(own_rules))]
        rules.extend(own_rules)
        rule_sources.extend(sources)
        merged = candidate
        recorded.append(Layer(layer.source, layer.data, layer.kind, tuple(dotted_keys(layer.data))))
    config = validate(_with_rules(merged, rules), "the merged configuration")
    return LoadedConfig(config, tuple(recorded), tuple(rule_sources))
