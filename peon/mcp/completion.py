"""``completion/complete``, sans I/O: which candidates an argument completes from, and the answer.

Promises:

* ``ref/resource`` completes the variables of the served templates: a skill's ``name``, a job's ``id``
  and a file's ``path``; ``ref/prompt`` completes a prompt's arguments (which have no known values, so
  nothing); anything else is :class:`CompletionProblem` (``-32602`` naming the rule);
* an answer holds at most :data:`MAX_VALUES` values that start with what was typed, in order, with the
  total and whether there are more — the shape every revision defines;
* a file path completes one component at a time, like a shell: :func:`path_query` splits what was typed
  into the directory to list (workspace-relative, normalized; one that ``..`` takes out of the workspace
  is :class:`CompletionProblem`) and the start of the next component; :func:`glob_arguments` is the
  ``glob`` call that lists the files beneath it (resolved and contained by that tool, symlinks never
  followed, ``.gitignore`` respected, at most :data:`MAX_LISTED` paths); :func:`path_completion` turns
  the listed paths into the entries of that directory (``name`` or ``name/``), leaving out every path
  :data:`IsSecret` says is secret-like and every path not beneath the typed directory as written.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from peon.mcp.jsonrpc import shown
from peon.mcp.resources import FILE_TEMPLATE, JOB_TEMPLATE, SKILL_TEMPLATE

MAX_VALUES = 100  # the protocol's most per answer
MAX_TYPED_CHARS = 4096
NAME_MAX = 255  # bytes in one file name (Linux)
MAX_LISTED = 1000  # paths one completion asks glob for (its largest page)
PATH_EMPTY_ON = frozenset({"not_found", "not_a_directory", "not_a_regular_file"})  # nothing there: no values

IsSecret = Callable[[Sequence[str]], bool]  # whether a workspace path (its components) is secret-like

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


@dataclass(frozen=True)
class PathQuery:
    """A typed file path, split: ``kept + directory + stem`` is what was typed."""

    kept: str  # the workspace's absolute path (or leading slashes), kept as typed
    directory: str  # the directory part as typed, ending with "/" unless empty
    listed: str  # that directory, normalized and workspace-relative ("." for the workspace)
    stem: str  # the start of the next component

    def may_match(self) -> bool:
        """Whether a file name can start with the stem (none is longer than NAME_MAX bytes)."""
        return len(self.stem.encode("utf-8", "surrogatepass")) <= NAME_MAX


def path_query(typed: str, workspace: str) -> PathQuery:
    """Where a typed ``file:///{path}`` value points; :class:`CompletionProblem` when ``..`` leaves the
    workspace or the value holds a NUL (the tool decides the rest on the resolved path)."""
    if "\x00" in typed:
        raise CompletionProblem("a file path cannot contain NUL")
    root = workspace.strip("/")
    rest = typed.lstrip("/")
    kept = typed[:len(typed) - len(rest)]
    if root and rest.startswith(root + "/"):  # the workspace's absolute path, as resources/read takes it
        tail = rest[len(root):].lstrip("/")
        kept, rest = typed[:len(typed) - len(tail)], tail
    directory, slash, stem = rest.rpartition("/")
    listed = posixpath.normpath(directory) if directory else "."
    if listed == ".." or listed.startswith("../"):
        raise CompletionProblem(f"{typed!r} leaves the workspace ({directory!r} is outside it); file paths "
                                "complete beneath the workspace only")
    return PathQuery(kept, directory + slash, listed, stem)


def glob_arguments(query: PathQuery) -> dict[str, Any]:
    """The ``glob`` call listing every file beneath the typed directory whose next component starts with the stem."""
    from wcmatch.glob import escape

    stem = escape(query.stem).replace(",", "\\,")  # a comma would split the braces below
    # The directory as typed: glob resolves it as read would; what resolves elsewhere than it reads is
    # left out by path_completion.
    return {"pattern": stem + "*{,/**}", "path": query.directory.rstrip("/") or ".", "limit": MAX_LISTED}


def path_completion(query: PathQuery, typed: str, value: Mapping[str, Any], is_secret: IsSecret) -> dict[str, Any]:
    """The completion answer from ``glob``'s value: the directory's entries (``name/`` for a directory),
    sorted; ``hasMore`` when glob listed only part of the files."""
    beneath = "" if query.listed == "." else query.listed + "/"
    entries: set[str] = set()
    for path in value.get("paths") or ():
        if not isinstance(path, str) or not path.startswith(beneath):
            continue  # reached through a symlink to another directory: not beneath what was typed
        parts = path.split("/")
        if is_secret(parts):
            continue
        rest = path[len(beneath):]
        name, slash, _ = rest.partition("/")
        if name.startswith(query.stem):
            entries.add(name + slash)
    values = [query.kept + query.directory + entry for entry in sorted(entries)]
    partial = value.get("next_offset") is not None or bool(value.get("timed_out"))
    result = completion_result(values, typed)
    if partial:
        result["completion"]["hasMore"] = True
        result["completion"].pop("total")  # unknown: glob listed only part
    return result
