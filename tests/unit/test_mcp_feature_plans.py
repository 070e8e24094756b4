"""Prompts, resources, completion and logging of ``peon mcp`` as pure plans (no server, no session): log messages
rate-limited, prompt arguments from a skill's front matter, resource URIs parsed, feature requests planned
without I/O, and a file path completion planned as one ``glob`` call."""

from __future__ import annotations

import json
import time

import pytest


def test_log_messages_are_rate_limited():
    from peon.mcp.logs import BURST, LogFeed

    feed = LogFeed()
    assert feed.message("error", {"event": "x"}, 1.0) is None  # no level set: nothing is sent
    feed.set_level("warning")
    assert feed.message("info", {"event": "x"}, 1.0) is None
    sent = [feed.message("warning", {"event": "x"}, 1.0) for _ in range(BURST + 5)]
    assert sum(m is not None for m in sent) == BURST and feed.dropped == 5
    later = feed.message("error", {"event": "y"}, 2.0)
    assert later is not None and later["params"]["data"]["dropped_before"] == 5
    assert time.monotonic() > 0


@pytest.mark.parametrize(("declared", "names"), [
    ("version, branch", ("version", "branch")), ("[version, branch]", ("version", "branch")),
    ("\n  - version\n  - branch", ("version", "branch")), ("bad name!", ()), ("a, a", ()), ("", ()),
])
def test_front_matter_declares_prompt_arguments(declared, names):
    from peon.core.skills import prompt_arguments

    assert prompt_arguments({"arguments": declared}) == names


def test_resource_uris_are_parsed_purely():
    from peon.mcp.resources import FileUri, JobUri, ResourceProblem, SkillUri, parse_uri

    assert parse_uri("skill://release-checks", "/ws") == SkillUri("release-checks")
    assert parse_uri("job://job-3/output?offset=10&limit=100", "/ws") == JobUri("job-3", 10, 100)
    assert parse_uri("file:///ws/src/a.py", "/ws") == FileUri("src/a.py")
    assert parse_uri("file:///src/a%20b.py", "/ws") == FileUri("src/a b.py")
    assert parse_uri("file:///wsx/a.py", "/ws") == FileUri("wsx/a.py")  # not under /ws: workspace-relative
    for bad in ("skill://Bad_Name", "job://x/other", "job://x/output?offset=1&offset=2", "file://host/a",
                "file:///ws", "file:///a%00b", "ftp://x"):
        with pytest.raises(ResourceProblem):
            parse_uri(bad, "/ws")


def test_a_system_path_outside_the_workspace_is_refused_not_read_as_relative():
    from peon.mcp.resources import FileUri, ResourceProblem, parse_uri

    for uri in ("file:///etc/passwd", "file:///home/me/.ssh/id_rsa", "file://localhost/proc/self/environ"):
        with pytest.raises(ResourceProblem, match="outside the workspace: file resources serve the workspace's"):
            parse_uri(uri, "/tmp/ws")
    assert parse_uri("file:///tmp/ws/etc/passwd", "/tmp/ws") == FileUri("etc/passwd")  # in the workspace
    assert parse_uri("file:///notes.txt", "/tmp/ws") == FileUri("notes.txt")


def test_feature_requests_are_planned_without_io():
    from peon.mcp import protocol as p
    from peon.client.result import ToolResult

    skill = {"name": "release-checks", "description": "Steps.", "origin": "project", "arguments": ["version"]}
    catalog = p.Catalog((skill,), frozenset({"read_skill", "job_output", "job_list", "read"}), "/ws")
    listed = p.plan("prompts/list", {}, catalog, "2025-11-25")
    assert isinstance(listed, p.Answer) and listed.result["prompts"][0]["arguments"] == [
        {"name": "version", "required": False}]
    assert {"ttlMs", "cacheScope"} <= set(p.plan("prompts/list", {}, catalog, "2026-07-28").result)
    get = p.plan("prompts/get", {"name": "release-checks", "arguments": {"version": "1"}}, catalog, "2025-11-25")
    assert isinstance(get, p.Step) and (get.tool, get.arguments) == ("read_skill", {"name": "release-checks"})
    shaped = get.finish({"name": "release-checks", "origin": "project", "path": "/ws/x", "content": "body"})
    assert shaped["messages"][0]["content"]["text"].endswith("body") and "version: 1" in json.dumps(shaped)
    read = p.plan("resources/read", {"uri": "job://job-1/output?offset=5"}, catalog, "2025-11-25")
    assert isinstance(read, p.Step) and read.arguments == {"job_id": "job-1", "offset": 5, "limit": 65536}
    missing = p.failure(read, ToolResult.failure("c1", "job_output", p_error("unknown_job"), "no such job"))
    assert missing.code == p.RESOURCE_NOT_FOUND and missing.data == {"code": "unknown_job", "tool": "job_output"}
    denied = p.failure(read, ToolResult.failure("c1", "job_output", p_error("denied"), "no"))
    assert denied.code == p.INTERNAL_ERROR and denied.message.startswith("denied: ")
    unknown_skill = p.plan("resources/read", {"uri": "skill://other"}, catalog, "2025-11-25")
    assert isinstance(unknown_skill, p.Refused) and unknown_skill.code == p.RESOURCE_NOT_FOUND
    without_read = p.Catalog((skill,), frozenset({"read_skill"}), "/ws")
    assert isinstance(p.plan("resources/read", {"uri": "file:///a"}, without_read, "2025-11-25"), p.Refused)
    templates = p.plan("resources/templates/list", {}, without_read, "2025-11-25").result["resourceTemplates"]
    assert "file:///{path}" not in {t["uriTemplate"] for t in templates}
    jobs = p.plan("completion/complete", {"ref": {"type": "ref/resource", "uri": "job://{id}/output"},
                                          "argument": {"name": "id", "value": "job-1"}}, catalog, "2025-11-25")
    assert isinstance(jobs, p.Step) and jobs.finish({"jobs": [{"job_id": "job-1"}, {"job_id": "job-12"},
                                                              {"job_id": "job-2"}]})["completion"] == {
        "values": ["job-1", "job-12"], "total": 2, "hasMore": False}


def p_error(code: str):
    from peon.core.errors import ErrorCode

    return ErrorCode(code)


def test_file_path_completion_plans_one_glob_call():
    from peon.mcp import protocol as p
    from peon.client.result import ToolResult

    catalog = p.Catalog((), frozenset({"read", "glob"}), "/ws", lambda parts: parts[-1] == ".env")

    def planned(typed: str):
        return p.plan("completion/complete", {"ref": {"type": "ref/resource", "uri": "file:///{path}"},
                                              "argument": {"name": "path", "value": typed}}, catalog, "2025-11-25")

    step = planned("src/a,[b")
    assert isinstance(step, p.Step) and step.tool == "glob"
    assert step.arguments == {"pattern": "a\\,\\[b*{,/**}", "path": "src", "limit": 1000}
    listed = step.finish({"paths": ["src/a,[b.py", "src/a,[bc/d.txt", "src/a,[bc/.env", "lib/a,[b"],
                          "next_offset": None, "timed_out": False})
    assert listed["completion"] == {"values": ["src/a,[b.py", "src/a,[bc/"], "total": 2, "hasMore": False}
    partial = step.finish({"paths": ["src/a,[b.py"], "next_offset": 1000, "timed_out": False})
    assert partial["completion"] == {"values": ["src/a,[b.py"], "hasMore": True}
    gone = p.settle(step, ToolResult.failure("c1", "glob", p_error("not_found"), "no such directory"))
    assert isinstance(gone, p.Answer) and gone.result["completion"]["values"] == []
    outside = p.settle(step, ToolResult.failure("c1", "glob", p_error("outside_workspace"), "leaves"))
    assert isinstance(outside, p.Refused) and outside.code == p.INVALID_PARAMS
    assert planned("/ws/src/").arguments["path"] == "src"
    assert planned("src/" + "x" * 256).result["completion"]["values"] == []  # no name is that long: no call
    for typed in ("../x", "a/../../b", "a\x00"):
        refused = planned(typed)
        assert isinstance(refused, p.Refused) and refused.code == p.INVALID_PARAMS, typed
    assert isinstance(p.plan("completion/complete", {"ref": {"type": "ref/resource", "uri": "file:///{path}"},
                                                     "argument": {"name": "path", "value": ""}},
                             p.Catalog((), frozenset({"read"}), "/ws"), "2025-11-25"), p.Answer)  # no glob tool

