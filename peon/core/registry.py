"""The tool registry: which tools a session offers, and the checks a tool must pass to be offered.

Promise: every tool in a :class:`Registry` has a unique, well-formed name, a valid JSON Schema for an
object that rejects unknown fields, a stable :class:`~peon.core.tool.ToolRisk` and an ``async`` executor.
Anything else is refused at registration with a :class:`~peon.core.errors.RegistrationError` that names the
tool, its origin and the rule it broke.
"""

from __future__ import annotations

import importlib
import inspect
import re
from importlib import metadata
from typing import Any
from collections.abc import Iterable, Iterator, Mapping

from peon.core.errors import RegistrationError
from peon.core.tool import Tool, ToolRisk

NAME_RULE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ENTRY_POINT_GROUP = "peon.tools"


def _check_object_schema(schema: Any, what: str, origin: str, *, closed: bool, against_metaschema: bool) -> None:
    if not isinstance(schema, Mapping):
        raise RegistrationError(f"{what} of {origin} must be a JSON Schema object, got {type(schema).__name__}")
    if against_metaschema:
        from jsonschema import Draft202012Validator  # here: a forkserver imports this module without validating
        from jsonschema.exceptions import SchemaError

        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            raise RegistrationError(f"{what} of {origin} is not a valid JSON Schema: {exc.message}") from None
    if schema.get("type") != "object":
        raise RegistrationError(f'{what} of {origin} must have "type": "object", got {schema.get("type")!r}')
    if closed and schema.get("additionalProperties") is not False:
        raise RegistrationError(
            f'{what} of {origin} must set "additionalProperties": false so unknown fields are rejected'
        )


def check_tool(tool: Any, origin: str, *, builtin: bool = False) -> Tool:
    """``tool`` if it keeps the contract. A built-in tool's schemas are fixed by its class and checked
    against the metaschema by the test suite (``tests/session/test_registry.py``), so a session does not check
    them again: that took 70-74 ms of every session's start."""
    if not isinstance(tool, Tool):
        raise RegistrationError(f"{origin} is not a peon.Tool (got {type(tool).__name__})")
    name = getattr(tool, "name", None)
    if not isinstance(name, str) or not NAME_RULE.match(name):
        raise RegistrationError(
            f"tool name {name!r} from {origin} breaks the naming rule: 1-64 characters of A-Z a-z 0-9 _ -"
        )
    label = f"tool {name!r} ({origin})"
    description = getattr(tool, "description", None)
    if not isinstance(description, str) or not description.strip():
        raise RegistrationError(f"{label} needs a non-empty description")
    try:
        ToolRisk(getattr(tool, "risk", None))
    except ValueError:
        raise RegistrationError(
            f"{label} declares risk {getattr(tool, 'risk', None)!r}; "
            f"expected one of {', '.join(r.value for r in ToolRisk)}"
        ) from None
    _check_object_schema(getattr(tool, "input_schema", None), "input schema", label, closed=True,
                         against_metaschema=not builtin)
    if tool.output_schema is not None:
        _check_object_schema(tool.output_schema, "output schema", label, closed=False, against_metaschema=not builtin)
    if not inspect.iscoroutinefunction(tool.execute):
        raise RegistrationError(f"{label}: execute() must be an async function")
    return tool


def instantiate(obj: Any, origin: str, *, builtin: bool = False) -> Tool:
    if isinstance(obj, type):
        if not issubclass(obj, Tool):
            raise RegistrationError(f"{origin} is not a peon.Tool subclass")
        try:
            obj = obj()
        except Exception as exc:  # a third-party constructor may raise anything
            raise RegistrationError(f"{origin} could not be constructed: {exc}") from None
    return check_tool(obj, origin, builtin=builtin)


def import_tool(path: str) -> Tool:
    """Load ``"package.module:Attribute"`` (a Tool subclass or instance) and check it."""
    return instantiate(resolve_import_path(path), path)


def resolve_import_path(path: str) -> Any:
    """The object named by ``"package.module:Attribute"``, unchecked."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise RegistrationError(f"tool import path {path!r} must look like 'package.module:ToolClass'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise RegistrationError(f"tool import path {path!r}: cannot import {module_name}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RegistrationError(f"tool import path {path!r}: {module_name} has no attribute {attr}") from None
    return obj


class Registry:
    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._origins: dict[str, str] = {}
        self._import_paths: dict[str, str] = {}  # how another interpreter loads the same tool

    def register(self, tool: Any, origin: str | None = None, import_path: str | None = None, *,
                 builtin: bool = False) -> Tool:
        cls = tool if isinstance(tool, type) else type(tool)
        class_path = f"{cls.__module__}:{cls.__qualname__}"
        origin = origin or class_path
        instance = instantiate(tool, origin, builtin=builtin)
        if instance.name in self._tools:
            raise RegistrationError(
                f"a tool named {instance.name!r} is already registered (from {self._origins[instance.name]}); "
                f"{origin} cannot register the same name",
                {"name": instance.name},
            )
        self._tools[instance.name] = instance
        self._origins[instance.name] = origin
        self._import_paths[instance.name] = import_path or class_path
        return instance

    def register_import_path(self, path: str) -> Tool:
        return self.register(resolve_import_path(path), path, path)

    def register_entry_points(self) -> list[Tool]:
        loaded = []
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            origin = f"entry point {ep.name} = {ep.value}"
            try:
                obj = ep.load()
            except Exception as exc:
                raise RegistrationError(f"{origin} failed to load: {exc}") from None
            loaded.append(self.register(obj, origin, ep.value))
        return loaded

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def origin(self, name: str) -> str:
        return self._origins[name]

    def import_paths(self) -> list[str]:
        """Paths that load every registered tool in another interpreter (see peon.workers.forkserver)."""
        return list(self._import_paths.values())

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        return list(self._tools)


def build_registry(builtins: Iterable[Any], extra: Iterable[str] = (), entry_points: bool = True) -> Registry:
    registry = Registry()
    for tool in builtins:
        registry.register(tool, builtin=True)
    for path in extra:
        registry.register_import_path(path)
    if entry_points:
        registry.register_entry_points()
    return registry
