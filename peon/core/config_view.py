"""The resolved configuration as the supervisor and workers hold it: plain data, read-only.

Promise: a :class:`ResolvedConfig` is built only from what :func:`peon.client.config.load_config` produced
and validated (``LoadedConfig.to_wire()``), so every key is present with the type the model declared;
it offers the same reading surface — ``config.limits.max_output_bytes``, ``source_of(key)``,
``rule_sources``, ``describe_layers()`` — without importing the validation machinery. The client
resolves and validates the layers (and reports a bad file before any process starts); the
supervisor and its workers only read the result, which keeps them small and quick to fork.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping


class ConfigView:
    """Attribute access over a table of the resolved configuration; tables nest, lists stay lists."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]):
        object.__setattr__(self, "_data", {key: _view(value) for key, value in data.items()})

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(f"the configuration has no key {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("the resolved configuration is read-only")

    def to_dict(self) -> dict[str, Any]:
        return {key: _plain(value) for key, value in self._data.items()}

    def __repr__(self) -> str:
        return f"ConfigView({self.to_dict()!r})"


def _view(value: Any) -> Any:
    if isinstance(value, Mapping):
        return ConfigView(value)
    if isinstance(value, list):
        return tuple(_view(item) for item in value)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, ConfigView):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


class ResolvedConfig:
    def __init__(self, wire: Mapping[str, Any]):
        self.config = ConfigView(wire["config"])
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
