"""Tool registration without a session: the built-in tools register, the contract's rules, the metaschema
skipped only for built-ins, duplicate names, and clear import path errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from peon import RegistrationError, Tool, ToolRisk
from peon.core.registry import Registry, import_tool
from peon.tools import BUILTIN_TOOLS

FIXTURES = Path(__file__).parent.parent / "fixtures"


def make_tool(**overrides):
    attrs = {
        "name": "ok_tool", "description": "does things", "risk": ToolRisk.READ_ONLY,
        "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
        "approval_summary": lambda self, args: "summary",
    }
    attrs.update(overrides)
    if "execute" not in attrs:
        async def execute(self, args, ctx):
            return {}
        attrs["execute"] = execute
    return type("T", (Tool,), attrs)


def test_builtins_register():
    """Checked here against the metaschema as any third-party tool is: sessions skip that for built-ins."""
    registry = Registry()
    for tool in BUILTIN_TOOLS:
        registry.register(tool)
    assert set(registry.names()) == {tool.name for tool in BUILTIN_TOOLS}


def test_a_session_skips_the_metaschema_only_for_built_in_tools():
    bad = make_tool(input_schema={"type": "object", "properties": {"x": {"type": 5}}, "additionalProperties": False})
    with pytest.raises(RegistrationError, match="not a valid JSON Schema"):
        Registry().register(bad)
    Registry().register(bad, builtin=True)  # what build_registry does for BUILTIN_TOOLS only


def test_duplicate_names_are_rejected_naming_both_origins():
    registry = Registry()
    registry.register(make_tool(name="same"), origin="first")
    with pytest.raises(RegistrationError) as exc:
        registry.register(make_tool(name="same"), origin="second")
    assert "already registered (from first)" in exc.value.message and "second" in exc.value.message


@pytest.mark.parametrize("overrides, fragment", [
    ({"name": "has space"}, "naming rule"),
    ({"name": ""}, "naming rule"),
    ({"description": " "}, "description"),
    ({"risk": "dangerous"}, "declares risk 'dangerous'"),
    ({"input_schema": {"type": "array"}}, '"type": "object"'),
    ({"input_schema": {"type": "object"}}, "additionalProperties"),
    ({"input_schema": {"type": "object", "additionalProperties": False, "properties": {"x": {"type": "nope"}}}},
     "not a valid JSON Schema"),
])
def test_contract_rules(overrides, fragment):
    with pytest.raises(RegistrationError) as exc:
        Registry().register(make_tool(**overrides))
    assert fragment in exc.value.message
    assert exc.value.code.value == "registration_failed"


def test_approval_summary_is_required_only_of_a_tool_that_does_not_prepare():
    from peon.core.tool import Prepared

    async def execute(self, args, ctx):
        return {}

    attrs = {"name": "t", "description": "does things", "risk": ToolRisk.READ_ONLY, "execute": execute,
             "input_schema": {"type": "object", "properties": {}, "additionalProperties": False}}
    with pytest.raises(RegistrationError, match="approval_summary"):
        Registry().register(type("Hooked", (Tool,), attrs))
    preparing = type("Preparing", (Tool,), {**attrs, "prepare": lambda self, args, session: Prepared(
        ToolRisk.FILESYSTEM, "why", "what", timeout_seconds=5.0)})
    prepared = Registry().register(preparing).prepare({}, None)
    assert (prepared.risk, prepared.risk_reason, prepared.summary, prepared.timeout_seconds) == (
        ToolRisk.FILESYSTEM, "why", "what", 5.0)


def test_executor_must_be_async():
    def execute(self, args, ctx):
        return {}
    with pytest.raises(RegistrationError, match="async"):
        Registry().register(make_tool(execute=execute))


def test_import_path_errors_are_clear(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    assert import_tool("peon_test_tools:EchoTool").name == "echo"
    for path, fragment in [("no_colon", "must look like"), ("nosuchmodule_xyz:T", "cannot import"),
                           ("peon_test_tools:Missing", "has no attribute"),
                           ("peon_test_tools:OBJECT", "not a peon.Tool")]:
        with pytest.raises(RegistrationError, match=fragment):
            import_tool(path)

