"""Each tool's errors name that tool's rules only: a failing read, edit, patch, grep or glob never carries
write's advice about directories or modes, and a patch's details name the path as given (unquoted)."""

from __future__ import annotations

import json
import re

PATCH = "*** Begin Patch\n*** Update File: {path}\n@@\n-missing line\n+b\n*** End Patch\n"
# What another tool's rules sound like: write's modes and whether it creates directories.
FOREIGN = {
    "write": re.compile(r"create directories|mode '(create|replace)'"),
}


def failing_calls(workspace):
    (workspace / "app.py").write_text("present\n")
    (workspace / "dir").mkdir()
    return [
        ("read", {"path": "no/such/file.txt"}),
        ("read", {"path": "dir/missing.txt"}),
        ("edit", {"path": "no/such/file.txt", "edits": [{"old_string": "a", "new_string": "b"}]}),
        ("edit", {"path": "app.py", "edits": [{"old_string": "absent", "new_string": "b"}]}),
        ("apply_patch", {"patch": PATCH.format(path="no/such/app.py")}),
        ("apply_patch", {"patch": PATCH.format(path="app.py")}),
        ("grep", {"pattern": "x", "path": "no/such"}),
        ("glob", {"pattern": "*", "path": "no/such"}),
        ("write", {"path": "no/such/file.txt", "content": "x", "mode": "replace"}),
        ("write", {"path": "dir/new.txt", "content": "x", "mode": "replace"}),
        ("write", {"path": "f.txt", "content": "x", "mode": "bogus"}),
    ]


def test_each_tools_errors_name_only_its_own_rules(open_session, workspace):
    session = open_session()
    said = {}
    for tool, args in failing_calls(workspace):
        result = session.call(tool, args)
        assert not result.ok, (tool, args)
        text = f"{result.error.message} {json.dumps(result.error.details)}"
        said.setdefault(tool, []).append(text)
        for owner, rule in FOREIGN.items():
            if owner != tool:
                assert not rule.search(text), f"{tool}'s error names {owner}'s rule: {text}"
    # write's own errors say what it does: replace does not make directories, and the modes are listed.
    assert any("mode 'replace' does not create directories" in text for text in said["write"])
    assert not any("create directories" in text for text in said["write"][1:2])  # the directory exists
    assert any("'create'" in text and "'replace'" in text and "bogus" in text for text in said["write"])


def test_a_patch_error_names_the_path_unquoted(open_session, workspace):
    (workspace / "app.py").write_text("present\n")
    result = open_session().call("apply_patch", {"patch": PATCH.format(path="app.py")})
    assert result.error.code == "not_found" and result.error.details["path"] == "app.py"
