"""Skills, jobs' output and workspace files as MCP resources, sans I/O: URIs parsed, listings built, and
``resources/read`` answers shaped from the tool value that served them.

Promises:

* three kinds of URI are served, each read through the tool that already serves it — so it is approved,
  audited and contained like that tool: ``skill://<name>`` (``read_skill``), ``job://<id>/output``
  (``job_output``; ``?offset=N`` reads from that absolute byte offset, and the contents' ``_meta`` says
  the next offset, the job's state and whether it ended) and ``file:///<path>`` (``read``: a path under
  the workspace's absolute path, or else taken as relative to the workspace; the tool decides on the
  resolved path, its secret-path rule and its risk);
* a ``file:`` path outside the workspace that names a system location (its first component is one of
  :data:`SYSTEM_ROOTS`: ``file:///etc/passwd``, ``file:///home/…``) is refused, saying it is outside the
  workspace — never quietly read as ``etc/passwd`` in the workspace;
* anything else is :class:`ResourceProblem` (``-32602`` naming the URI and the rule), never a read;
* ``resources/list`` lists the skills and the jobs; the templates describe every job and file URI.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from peon.core.jobs import DEFAULT_PAGE_BYTES, MAX_PAGE_BYTES

from peon.mcp.jsonrpc import shown
from peon.mcp.prompts import UNTRUSTED_META_KEY

MAX_URI_CHARS = 8192
_SKILL_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
SKILL_TEMPLATE = "skill://{name}"
JOB_TEMPLATE = "job://{id}/output"
FILE_TEMPLATE = "file:///{path}"
# The top-level directories of a Linux filesystem: a file URI beginning with one outside the workspace means
# that absolute path, not a workspace-relative one (decided without I/O).
SYSTEM_ROOTS = frozenset({"bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "media", "mnt",
                          "nix", "opt", "proc", "root", "run", "sbin", "snap", "srv", "sys", "tmp", "usr", "var"})


class ResourceProblem(ValueError):
    """A URI this server does not serve (the message is the ``-32602`` error's)."""


@dataclass(frozen=True)
class SkillUri:
    name: str


@dataclass(frozen=True)
class JobUri:
    job_id: str
    offset: int = 0
    limit: int = DEFAULT_PAGE_BYTES


@dataclass(frozen=True)
class FileUri:
    path: str  # workspace-relative, as the read tool takes it


Target = SkillUri | JobUri | FileUri


def skill_uri(name: str) -> str:
    return f"skill://{name}"


def job_uri(job_id: str, offset: int | None = None) -> str:
    return f"job://{job_id}/output" + (f"?offset={offset}" if offset else "")


def parse_uri(uri: Any, workspace: str) -> Target:
    """What a resource URI names, or :class:`ResourceProblem`."""
    if not isinstance(uri, str) or not uri or len(uri) > MAX_URI_CHARS:
        raise ResourceProblem(f'"uri" must be a string of 1-{MAX_URI_CHARS} characters, got {shown(uri)}')
    parts = urlsplit(uri)
    if parts.scheme == "skill":
        if parts.path not in ("", "/") or parts.query or not _SKILL_NAME.fullmatch(parts.netloc):
            raise ResourceProblem(f"{shown(uri)} is not skill://<name> with a skill's name")
        return SkillUri(parts.netloc)
    if parts.scheme == "job":
        if parts.path != "/output" or not _JOB_ID.fullmatch(parts.netloc):
            raise ResourceProblem(f"{shown(uri)} is not job://<id>/output")
        query = parse_qs(parts.query, keep_blank_values=True)
        unknown = set(query) - {"offset", "limit"}
        if unknown:
            raise ResourceProblem(f"{shown(uri)}: a job URI takes only offset and limit, not {sorted(unknown)}")
        offset = _number(query, "offset", 0, 0, 2**62, uri)
        limit = _number(query, "limit", DEFAULT_PAGE_BYTES, 4, MAX_PAGE_BYTES, uri)
        return JobUri(parts.netloc, offset, limit)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
            raise ResourceProblem(f"{shown(uri)} is not file:///<path> (no host, query or fragment)")
        try:
            path = unquote(parts.path, errors="strict")
        except UnicodeDecodeError:
            raise ResourceProblem(f"{shown(uri)}: the path's escapes are not UTF-8") from None
        if "\x00" in path:
            raise ResourceProblem(f"{shown(uri)}: a path cannot contain NUL")
        root = workspace.rstrip("/")
        if root and (path == root or path.startswith(root + "/")):
            path = path[len(root):]
        elif path.lstrip("/").split("/", 1)[0] in SYSTEM_ROOTS:
            raise ResourceProblem(f"{shown(uri)} names {shown(path)}, outside the workspace: file resources serve "
                                  f"the workspace's files only (file://{root}/<path>, or file:///<path> relative to "
                                  "the workspace)")
        relative = path.lstrip("/")
        if not relative or posixpath.normpath(relative) == ".":
            raise ResourceProblem(f"{shown(uri)} names the workspace itself, not a file in it")
        return FileUri(relative)
    raise ResourceProblem(f"{shown(uri)}: served URIs are skill://<name>, job://<id>/output and file:///<path>")


def _number(query: Mapping[str, list[str]], key: str, default: int, low: int, high: int, uri: str) -> int:
    values = query.get(key)
    if not values:
        return default
    if len(values) != 1 or not values[0].isdigit() or not low <= int(values[0]) <= high:
        raise ResourceProblem(f"{shown(uri)}: {key} must be one integer from {low} to {high}")
    return int(values[0])


def tool_for(target: Target) -> tuple[str, dict[str, Any]]:
    """The tool call that reads a target."""
    if isinstance(target, SkillUri):
        return "read_skill", {"name": target.name}
    if isinstance(target, JobUri):
        return "job_output", {"job_id": target.job_id, "offset": target.offset, "limit": target.limit}
    return "read", {"path": target.path}


def resource_list(skills: Sequence[Mapping[str, Any]], jobs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    resources: list[dict[str, Any]] = []
    for skill in sorted(skills, key=lambda record: str(record["name"])):
        resources.append({"uri": skill_uri(str(skill["name"])), "name": str(skill["name"]),
                          "title": f"Skill {skill['name']}", "mimeType": "text/markdown",
                          "description": f"{skill['description']} (untrusted: written by the skill's author)"})
    for job in jobs:
        state = job.get("state")
        resources.append({"uri": job_uri(str(job["job_id"])), "name": f"job {job['job_id']}",
                          "title": f"Output of job {job['job_id']} ({state})", "mimeType": "text/plain",
                          "description": f"{job.get('tool')} job, {state}, {job.get('output_bytes', 0)} bytes of "
                                         "output; read ?offset=N to page, subscribe for updates",
                          "size": int(job.get("output_bytes") or 0)})
    return {"resources": resources}


def template_list(files: bool) -> dict[str, Any]:
    templates = [
        {"uriTemplate": SKILL_TEMPLATE, "name": "skill", "title": "A skill's SKILL.md", "mimeType": "text/markdown"},
        {"uriTemplate": JOB_TEMPLATE, "name": "job output", "title": "A job's output (paged with ?offset=N)",
         "mimeType": "text/plain"},
    ]
    if files:
        templates.append({"uriTemplate": FILE_TEMPLATE, "name": "workspace file",
                          "title": "A file of the workspace (read rules apply)", "mimeType": "text/plain"})
    return {"resourceTemplates": templates}


def read_result(uri: str, target: Target, value: Mapping[str, Any]) -> dict[str, Any]:
    """The ``resources/read`` result from the tool value that read ``target``."""
    if isinstance(target, SkillUri):
        meta: dict[str, Any] = {UNTRUSTED_META_KEY: True, "peon/truncated": bool(value.get("truncated"))}
        content = {"uri": uri, "mimeType": "text/markdown", "text": str(value.get("content", "")), "_meta": meta}
    elif isinstance(target, JobUri):
        next_offset = int(value.get("next_offset") or 0)
        meta = {"peon/offset": value.get("offset"), "peon/next_offset": next_offset,
                "peon/next": job_uri(target.job_id, next_offset), "peon/state": value.get("state"),
                "peon/eof": bool(value.get("eof")), "peon/output_bytes": value.get("output_bytes"),
                "peon/dropped_before": value.get("dropped_before"), "peon/exit_code": value.get("exit_code")}
        content = {"uri": uri, "mimeType": "text/plain", "text": str(value.get("output", "")), "_meta": meta}
    else:
        meta = {"peon/path": value.get("path"), "peon/total_bytes": value.get("total_bytes"),
                "peon/truncated": bool(value.get("truncated")), "peon/next_offset": value.get("next_offset"),
                "peon/sha256": value.get("sha256")}
        content = {"uri": uri, "mimeType": "text/plain", "text": str(value.get("content", "")), "_meta": meta}
    return {"contents": [content]}
