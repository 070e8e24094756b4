"""edit, apply_patch, grep and glob through ``peon mcp``, driven by the official MCP Python SDK client: each
tool's annotations and outputSchema, and each result checked against that schema."""

from __future__ import annotations

import jsonschema
import pytest

from helpers.mcp import MODES, client, error_code, run


@pytest.mark.parametrize("mode", MODES)
def test_each_file_tool_through_the_python_sdk(workspace, env, mode):
    (workspace / "notes.md").write_text("# Notes\nremember the milk\n")

    async def scenario():
        async with client(workspace, env, "--allow", "filesystem", mode=mode) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            for name, read_only in (("edit", False), ("apply_patch", False), ("grep", True), ("glob", True)):
                hints = tools[name].annotations
                assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint) == \
                    (read_only, not read_only, read_only), name
            calls = {
                "edit": {"path": "notes.md", "edits": [{"old_string": "milk", "new_string": "eggs"}]},
                "apply_patch": {"patch": "*** Begin Patch\n*** Update File: notes.md\n # Notes\n+added line\n"
                                         "*** End Patch\n"},
                "grep": {"pattern": "eggs|added", "output": "lines"},
                "glob": {"pattern": "*.md"},
            }
            results = {}
            for name, arguments in calls.items():
                result = await c.call_tool(name, arguments)
                assert not result.is_error, (name, result)
                jsonschema.validate(result.structured_content, tools[name].output_schema)
                results[name] = result.structured_content
            errors = [error_code(await c.call_tool("edit", {"path": "notes.md", "edits": [
                          {"old_string": "added line", "new_string": "x"}, {"old_string": "e", "new_string": "E"}]})),
                      error_code(await c.call_tool("grep", {"pattern": "x", "path": "../"}))]
            return results, errors

    results, errors = run(scenario())
    assert (workspace / "notes.md").read_text() == "# Notes\nadded line\nremember the eggs\n"
    assert [e["text"] for e in results["grep"]["entries"]] == ["added line", "remember the eggs"]
    assert results["glob"]["paths"] == ["notes.md"] and results["apply_patch"]["files"][0]["action"] == "update"
    assert errors == ["ambiguous", "outside_workspace"]
