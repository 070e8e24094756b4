"""Tool registration: the contract's rules, import paths, entry points, and package shadowing."""

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


def test_third_party_tool_by_import_path_runs_in_a_worker(open_session):
    session = open_session(env={"PYTHONPATH": str(FIXTURES)}, tools=["peon_test_tools:EchoTool"])
    r = session.call("echo", {"text": "hi"})
    assert r.ok and r.value["text"] == "hi"
    assert r.value["pid"] not in (session.supervisor_pid,)
    assert r.value["call_id"] == r.call_id


def test_a_tool_is_warmed_up_in_the_forkserver_and_again_in_its_standby(open_session):
    session = open_session(env={"PYTHONPATH": str(FIXTURES)}, tools=["peon_test_tools:WarmingTool"])
    r = session.call("warming", {})
    assert r.ok, r.error  # its warm-up raised: the call runs all the same
    worker, warmed = r.value["pid"], r.value["warmed"]
    assert {"pid": worker, "processes": False} in warmed, warmed  # its standby: no process started
    assert any(w["pid"] != worker and w["processes"] for w in warmed), warmed  # the forkserver, before it forked
    assert session.call("warming", {}).value["pid"] != worker  # a dedicated worker per call, warmed as well


def test_third_party_tool_by_entry_point(open_session, tmp_path):
    site = tmp_path / "site"
    dist = site / "peon_example-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: peon-example\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[peon.tools]\necho = peon_test_tools:EchoTool\n")
    session = open_session(env={"PYTHONPATH": f"{FIXTURES}:{site}"})
    assert "echo" in [t["name"] for t in session.tools()]
    assert session.call("echo", {"text": "ep"}).value["text"] == "ep"


def test_registration_failure_stops_the_session_with_a_clear_error(workspace, tmp_path, leftovers):
    import peon
    with pytest.raises(RegistrationError, match="already registered"):
        peon.Session(workspace, {"approval": {"process": "allow"}}, env=leftovers.env({"PYTHONPATH": str(FIXTURES)}),
                     tools=["peon_test_tools:DuplicateBash"], state_dir=tmp_path / "s")


def test_validation_errors_are_stable(session):
    r = session.call("bash", {"command": "x" * 10, "timeout_seconds": "soon"})
    assert r.error.code == "invalid_input"
    assert r.error.details == {"rule": "type", "pointer": "/timeout_seconds", "value": '"soon"'}



@pytest.mark.parametrize("tool, import_path, summary, reason, details", [
    ("hooked", "contract_tools:HookedTool", "hooked call for n1", "the hooks rate n1 as filesystem",
     {"name": "n1", "workspace": None}),
    ("preparing", "contract_tools:PreparingTool", "prepared call for n1", "prepare rates n1 as filesystem",
     {"name": "n1"}),
])
def test_each_form_of_the_contract_reaches_the_approver_and_the_worker(open_session, workspace, tool, import_path,
                                                                        summary, reason, details):
    """A tool written against the four hooks (``hooked``) is prepared from them, and one that overrides
    ``prepare`` alone (``preparing``) needs no ``approval_summary``: for both, the risk, its reason, the
    summary and the details reach the approver, the details reach the worker as approved, and the call
    runs with its own timeout."""
    from helpers import Recorder

    if "workspace" in details:
        details = {**details, "workspace": str(workspace)}
    approver = Recorder("allow_once")
    session = open_session({"approval": {"filesystem": "ask"}}, env={"PYTHONPATH": str(FIXTURES)},
                           tools=[import_path], approver=approver)
    r = session.call(tool, {"name": "n1", "seconds": 40})
    assert r.ok, r.error
    (request,) = approver.requests
    assert (request["risk"], request["risk_reason"], request["summary"]) == ("filesystem", reason, summary)
    assert request["details"] == details and r.value["approved"] == details
    assert 30 < r.value["remaining"] <= 40  # the call's own timeout, not limits.max_timeout_seconds
