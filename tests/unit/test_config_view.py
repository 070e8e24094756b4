"""The configuration as the supervisor and workers read it (``peon.core.config_view``) cannot drift from
the client's model (``peon.client.config``): the same tables and keys, each read back as validated, and
nothing else accepted."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest
from pydantic import BaseModel

from peon.client.config import PeonConfig, load_config
from peon.core.config_view import ConfigView, ResolvedConfig
from peon.core.errors import ConfigError
from peon.core.risk import ToolRisk


def _nested(annotation: Any, is_table: typing.Callable[[Any], bool]) -> Any:
    """The table type inside a field's annotation (``Limits``, ``tuple[ApprovalRule, ...]``, ``X | None``)."""
    if is_table(annotation):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested(arg, is_table)
        if found is not None:
            return found
    return None


def model_keys(model: type[BaseModel]) -> dict[str, Any]:
    """Each key of the model, with the keys of the table it holds (None for a value)."""
    def is_model(kind: Any) -> bool:
        return isinstance(kind, type) and issubclass(kind, BaseModel)

    out = {}
    for name, info in model.model_fields.items():
        inner = _nested(info.annotation, is_model)
        out[name] = model_keys(inner) if inner is not None else None
    return out


def view_keys(view: type[Any]) -> dict[str, Any]:
    def is_view(kind: Any) -> bool:
        return isinstance(kind, type) and dataclasses.is_dataclass(kind)

    hints = typing.get_type_hints(view)
    out = {}
    for field in dataclasses.fields(view):
        inner = _nested(hints[field.name], is_view)
        out[field.name] = view_keys(inner) if inner is not None else None
    return out


def test_the_view_has_exactly_the_tables_and_keys_of_the_model():
    assert view_keys(ConfigView) == model_keys(PeonConfig)


EVERY_KIND = {
    "limits": {"max_timeout_seconds": 300},  # an integer where seconds are expected
    "approval": {"process_sandboxed": "allow",
                 "rules": [{"risk": "process", "command_prefix": "git status", "decision": "allow"},
                           {"tool": "write", "path_prefix": "docs/", "decision": "deny"}]},
    "environment": {"KEEP_ME": False, "SET_ME": "1"},
    "sandbox": {"network": ["example.com", "*.example.org:443"], "caches": "user"},
}


def test_the_view_reads_back_what_the_client_validated():
    loaded = load_config(EVERY_KIND, env={})
    view = ResolvedConfig(loaded.to_wire()).config
    assert view.to_dict() == loaded.config.to_dict()
    assert view.limits.max_timeout_seconds == 300.0 and isinstance(view.limits.max_timeout_seconds, float)
    assert view.jobs.progress_lines == loaded.config.jobs.progress_lines
    assert view.approval.process_sandboxed == "allow"
    assert view.approval.rules[0].risk is ToolRisk.PROCESS and view.approval.rules[1].risk is None
    assert view.environment["KEEP_ME"] is False and view.environment["SET_ME"] == "1"
    assert view.sandbox.network == ("example.com", "*.example.org:443")
    assert view.agents.claude.args == tuple(loaded.config.agents.claude.args)
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.limits.max_output_bytes = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        view.environment["SET_ME"] = "2"  # type: ignore[index]


def _without(table: str, key: str):
    def change(data: dict) -> None:
        del data[table][key]
    return change


def _with(table: str, key: str, value: Any):
    def change(data: dict) -> None:
        data[table][key] = value
    return change


@pytest.mark.parametrize(("change", "named"), [
    (_without("jobs", "progress_lines"), "jobs.progress_lines is missing"),
    (_with("limits", "max_queued_everything", 1), "limits has unknown key(s) ['max_queued_everything']"),
    (_with("limits", "max_output_bytes", "65536"), "limits.max_output_bytes is '65536', not int"),
    (_with("limits", "max_output_bytes", True), "limits.max_output_bytes is True, not int"),
    (_with("sandbox", "mode", "sometimes"), "sandbox.mode is 'sometimes'"),
    (_with("sandbox", "writable", "/tmp"), "sandbox.writable is '/tmp'"),
    (_with("environment", "PAGER", 1), "environment.PAGER is 1"),
    (_with("approval", "rules", [{"tool": "bash", "risk": "fatal", "command_prefix": None, "path_prefix": None,
                                  "decision": "allow", "tighten_only": False}]), "approval.rules[0].risk is 'fatal'"),
    (_with("approval", "rules", [{"tool": "bash", "decision": "allow"}]), "approval.rules[0].risk is missing"),
])
def test_what_the_model_did_not_validate_is_refused_by_its_dotted_key(change, named):
    data = load_config({}, env={}).config.to_dict()
    change(data)
    with pytest.raises(ConfigError) as caught:
        ConfigView.from_dict(data)
    assert named in caught.value.message


def test_a_missing_table_is_refused():
    data = load_config({}, env={}).config.to_dict()
    del data["audit"]
    with pytest.raises(ConfigError) as caught:
        ConfigView.from_dict(data)
    assert "audit is missing" in caught.value.message
