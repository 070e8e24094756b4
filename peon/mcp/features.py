"""Prompts, resources and completion as plans, sans I/O: each request becomes an answer, a refusal, or
one tool call whose value the plan turns into the answer.

Promises:

* a request that needs nothing of the session's (``prompts/list``, ``resources/templates/list``,
  completing a skill name) is answered from the :class:`Catalog` at once;
* a request that reads something (``prompts/get``, ``resources/read``, ``resources/list``, completing a
  job id or a file path) is a :class:`Step`: one call of a registered tool (``read_skill``,
  ``job_output``, ``read``, ``job_list``, ``glob``), submitted like a ``tools/call`` — validated,
  approved, audited, contained — whose value :meth:`Step.finish` shapes (:func:`settle`); a failed call
  is a JSON-RPC error with the tool's stable code in ``data`` (:func:`failure`), ``-32002`` when the
  resource does not exist, except the codes a step answers with its ``empty`` result (a file path typed
  beneath a directory that is not there completes to nothing);
* bad parameters are a :class:`Refused` ``-32602`` naming the rule, before anything runs;
* :func:`prompts_changed` says whether two catalogs list different prompts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from peon.client.result import ToolResult

from peon.mcp.completion import (
    PATH_EMPTY_ON, CompletionProblem, IsSecret, completion_result, glob_arguments, path_completion, path_query, wanted,
)
from peon.mcp.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS
from peon.mcp.prompts import PromptProblem, check_get, prompt_list, prompt_result
from peon.mcp.revisions import is_modern
from peon.mcp.resources import ResourceProblem, SkillUri, parse_uri, read_result, resource_list, template_list, tool_for

RESOURCE_NOT_FOUND = -32002
FEATURE_METHODS = frozenset({"prompts/list", "prompts/get", "resources/list", "resources/templates/list",
                             "resources/read", "resources/subscribe", "resources/unsubscribe",
                             "completion/complete"})
_MISSING = frozenset({"unknown_skill", "unknown_job", "not_found", "skill_moved"})


@dataclass(frozen=True)
class Catalog:
    """What the session serves, as the plans need it."""

    skills: tuple[Mapping[str, Any], ...] = ()
    tools: frozenset[str] = frozenset()
    workspace: str = ""
    is_secret: IsSecret = field(default=lambda parts: True, compare=False)  # fails closed: no file completes

    @classmethod
    def of(cls, info: Mapping[str, Any], tools: Sequence[Mapping[str, Any]],
           env: Mapping[str, str] | None = None) -> Catalog:
        """``env`` is the session's environment: it names the user's secret-like path list."""
        skills = (info.get("skills") or {}).get("available") or ()
        return cls(tuple(skills), frozenset(str(tool["name"]) for tool in tools), str(info.get("workspace") or ""),
                   _secret_test(os.environ if env is None else env))


def _secret_test(env: Mapping[str, str]) -> IsSecret:
    def is_secret(parts: Sequence[str]) -> bool:
        from peon.core.errors import ConfigError
        from peon.approval.secret_paths import secret_match

        try:
            return secret_match(parts, env) is not None
        except ConfigError:
            return True  # the user's list cannot be read: every path counts as secret-like (read refuses too)
    return is_secret


@dataclass(frozen=True)
class Answer:
    result: dict[str, Any]


@dataclass(frozen=True)
class Refused:
    code: int
    message: str
    data: dict[str, Any] | None = None


@dataclass(frozen=True)
class Step:
    tool: str
    arguments: dict[str, Any]
    finish: Callable[[Mapping[str, Any]], dict[str, Any]] = field(compare=False)
    missing_is_not_found: bool = False  # a missing target is -32002 (a resource), not a tool error
    empty_on: frozenset[str] = frozenset()  # error codes answered with ``empty`` instead of an error
    empty: Mapping[str, Any] | None = None


Plan = Answer | Refused | Step


LIST_METHODS = frozenset({"prompts/list", "resources/list", "resources/templates/list"})


def plan(method: str, params: Mapping[str, Any], catalog: Catalog, version: str, *, files: bool = True) -> Plan:
    """How to answer ``method``; a list answered under the stateless revision says how long it may be cached."""
    try:
        planned = _plan(method, params, catalog, files)
    except (PromptProblem, ResourceProblem, CompletionProblem) as problem:
        return Refused(INVALID_PARAMS, f"Invalid params: {problem}")
    if method not in LIST_METHODS or not is_modern(version):
        return planned
    if isinstance(planned, Answer):
        return Answer(_uncached(planned.result))
    if isinstance(planned, Step):
        finish = planned.finish
        return replace(planned, finish=lambda value: _uncached(finish(value)))
    return planned


def _uncached(result: dict[str, Any]) -> dict[str, Any]:
    return {**result, "ttlMs": 0, "cacheScope": "private"}


def _plan(method: str, params: Mapping[str, Any], catalog: Catalog, files: bool) -> Plan:
    if method == "prompts/list":
        return Answer(prompt_list(catalog.skills))
    if method == "prompts/get":
        name, values = check_get(params, catalog.skills)
        return _step(catalog, "read_skill", {"name": name}, lambda value: prompt_result(value, values))
    if method == "resources/templates/list":
        return Answer(template_list(files and "read" in catalog.tools))
    if method == "resources/list":
        if "job_list" not in catalog.tools:
            return Answer(resource_list(catalog.skills, ()))
        return Step("job_list", {}, lambda value: resource_list(catalog.skills, list(value.get("jobs") or ())))
    if method == "resources/read":
        uri = params.get("uri")
        target = parse_uri(uri, catalog.workspace)
        if isinstance(target, SkillUri) and target.name not in {str(skill["name"]) for skill in catalog.skills}:
            return Refused(RESOURCE_NOT_FOUND, f"Resource not found: no skill named {target.name!r} was discovered "
                                               "in this session", {"code": "unknown_skill"})
        tool, arguments = tool_for(target)
        if tool == "read" and not files:
            raise ResourceProblem("file resources are not served by this server")
        assert isinstance(uri, str)
        return _step(catalog, tool, arguments, lambda value: read_result(uri, target, value), missing=True)
    if method == "completion/complete":
        want = wanted(params, (str(skill["name"]) for skill in catalog.skills))
        if want.source == "skills":
            return Answer(completion_result(sorted(str(s["name"]) for s in catalog.skills), want.typed))
        if want.source == "jobs" and "job_list" in catalog.tools:
            return Step("job_list", {}, lambda value: completion_result(
                [str(job["job_id"]) for job in value.get("jobs") or ()], want.typed))
        if want.source == "files" and files and "read" in catalog.tools and "glob" in catalog.tools:
            query = path_query(want.typed, catalog.workspace)
            if not query.may_match():
                return Answer(completion_result((), want.typed))
            return Step("glob", glob_arguments(query),
                        lambda value: path_completion(query, want.typed, value, catalog.is_secret),
                        empty_on=PATH_EMPTY_ON, empty=completion_result((), want.typed))
        return Answer(completion_result((), want.typed))
    return Refused(INVALID_PARAMS, f"{method} is not planned here")


def _step(catalog: Catalog, tool: str, arguments: dict[str, Any], finish: Callable[[Mapping[str, Any]], dict[str, Any]],
          missing: bool = False) -> Plan:
    if tool not in catalog.tools:
        return Refused(INVALID_PARAMS, f"Invalid params: this session has no {tool} tool, which serves this request")
    return Step(tool, arguments, finish, missing)


def prompts_changed(before: Catalog, after: Catalog) -> bool:
    """Whether ``prompts/list`` answers differently (the skills were discovered again, by a new supervisor)."""
    return prompt_list(before.skills) != prompt_list(after.skills)


def settle(step: Step, result: ToolResult) -> Answer | Refused:
    """The answer of a step whose call ended with ``result``."""
    if result.ok:
        return Answer(step.finish(result.value or {}))
    assert result.error is not None
    if step.empty is not None and result.error.code in step.empty_on:
        return Answer(dict(step.empty))
    return failure(step, result)


def failure(step: Step, result: ToolResult) -> Refused:
    """The JSON-RPC error of a step whose call failed."""
    assert result.error is not None
    data: dict[str, Any] = {"code": result.error.code, "tool": step.tool}
    if step.missing_is_not_found and result.error.code in _MISSING:
        return Refused(RESOURCE_NOT_FOUND, f"Resource not found: {result.error.message}", data)
    if result.error.code in _MISSING or result.error.code in {"invalid_input", "invalid_path", "outside_workspace"}:
        return Refused(INVALID_PARAMS, f"Invalid params: {result.error.code}: {result.error.message}", data)
    return Refused(INTERNAL_ERROR, f"{result.error.code}: {result.error.message}", data)
