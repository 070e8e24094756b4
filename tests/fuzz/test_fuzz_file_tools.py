"""Hostile input for edit, grep and glob: whatever a model sends, the answer is a result or an error with a stable
code — never ``tool_failed``, a crashed worker, a hang, or a change outside the workspace."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peon.core.errors import ErrorCode

STABLE = {code.value for code in ErrorCode} - {"tool_failed", "worker_crashed", "worker_hung", "supervisor_died"}
PIECES = [*"ab*?[]{},/\\.!^$()|+-_ \n\t\ré😀\0", "\ud800", "..", "**", "src", "../", "{1..9}"]
TEXT = st.lists(st.sampled_from(PIECES), max_size=12).map("".join)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    import peon
    from helpers import ALLOW_ALL
    from helpers import Leftovers

    base = tmp_path_factory.mktemp("fuzz-tools")
    leftovers = Leftovers(tmp_path_factory.mktemp("home"))
    workspace = base / "ws"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "a.py").write_text("alpha\nbeta é\n")
    (workspace / "b.txt").write_text("a*b?c\n")
    (base / "outside.txt").write_text("outside\n")
    session = peon.Session(workspace, ALLOW_ALL, env=leftovers.env(), state_dir=base / "state")
    yield base, workspace, session
    session.close()
    assert leftovers.kill_all() == []


def check(result) -> None:
    if not result.ok:
        assert result.error.code in STABLE, result.error
        assert result.error.message, result.error


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pattern=TEXT, glob=st.none() | TEXT, path=st.none() | TEXT, output=st.sampled_from(["files", "lines", "count"]))
def test_grep_and_glob_answer_any_input(world, pattern, glob, path, output):
    base, _, session = world
    args = {"pattern": pattern or "a", "output": output, "timeout_seconds": 20}
    if glob is not None:
        args["glob"] = glob
    if path is not None:
        args["path"] = path
    check(session.call("grep", args))
    check(session.call("glob", {"pattern": glob or pattern or "*", **({"path": path} if path is not None else {})}))
    assert (base / "outside.txt").read_text() == "outside\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["src/a.py", "b.txt", "../outside.txt", "src", "missing", "src/a.py/x"]) | TEXT,
       old=TEXT, new=TEXT, replace_all=st.booleans())
def test_edit_answers_any_input(world, path, old, new, replace_all):
    base, workspace, session = world
    before = {p: p.read_bytes() for p in (workspace / "src" / "a.py", workspace / "b.txt")}
    result = session.call("edit", {"path": path, "edits": [{"old_string": old or "x", "new_string": new,
                                                            "replace_all": replace_all}]})
    check(result)
    if not result.ok:
        assert {p: p.read_bytes() for p in before} == before
    else:  # put the file back for the next example
        Path(workspace / result.value["path"]).write_bytes(before[workspace / result.value["path"]])
    assert (base / "outside.txt").read_text() == "outside\n"
