"""``completion/complete``, sans I/O: which candidates an argument completes from, and the answer.

Promises:

* ``ref/resource`` completes the variables of the served templates: a skill's ``name``, a job's ``id``
  and a file's ``path``; ``ref/prompt`` completes a prompt's arguments (which have no known values, so
  nothing); anything else is :class:`CompletionProblem` (``-32602`` naming the rule);
* an answer holds at most :data:`MAX_VALUES` values that start with what was typed, in order, with the
  total and whether there are more — the shape every revision defines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .jsonrpc import shown
from .resources import FILE_TEMPLATE, JOB_TEMPLATE, SKILL_TEMPLATE

MAX_VALUES = 100  # the protocol's most per answer
MAX_TYPED_CHARS = 4096

Source = Literal["skills", "jobs", "files", "none"]


class CompletionProblem(ValueError):
    """A ``completion/complete`` that cannot be answered (the message is the ``-32602`` error's)."""


@dataclass(frozen=True)
class Wanted:
    source: Source
    typed: str


def wanted(params: Mapping[str, Any], prompt_names: Iterable[str]) -> Wanted:
    ref, argument = params.get("ref"), params.get("argument")
    if not isinstance(ref, Mapping) or not isinstance(argument, Mapping):
        raise CompletionProblem('completion/complete needs "ref" and "argument" (objects)')
    name, typed = argument.get("name"), argument.get("value", "")
    if not isinstance(name, str) or not isinstance(typed, str) or len(typed) > MAX_TYPED_CHARS:
        raise CompletionProblem(f'"argument" needs a "name" and a "value" of at most {MAX_TYPED_CHARS} characters '
                                f"(strings), got {shown(argument)}")
    kind = ref.get("type")
    if kind == "ref/prompt":
        if ref.get("name") not in set(prompt_names):
            raise CompletionProblem(f"Unknown prompt {shown(ref.get('name'))}")
        return Wanted("none", typed)
    if kind == "ref/resource":
        template = ref.get("uri")
        sources: dict[Any, tuple[str, Source]] = {SKILL_TEMPLATE: ("name", "skills"), JOB_TEMPLATE: ("id", "jobs"),
                                                  FILE_TEMPLATE: ("path", "files")}
        if template not in sources:
            raise CompletionProblem(f"{shown(template)} is not a served template "
                                    f"({', '.join(sources)})")
        variable, source = sources[template]
        if name != variable:
            raise CompletionProblem(f"{template} has no variable {shown(name)} (it has {variable!r})")
        return Wanted(source, typed)
    raise CompletionProblem(f'"ref.type" must be "ref/prompt" or "ref/resource", got {shown(kind)}')


def completion_result(candidates: Iterable[str], typed: str) -> dict[str, Any]:
    matches = [value for value in candidates if value.startswith(typed)]
    return {"completion": {"values": matches[:MAX_VALUES], "total": len(matches),
                           "hasMore": len(matches) > MAX_VALUES}}
