"""``grep``: search file contents beneath a workspace directory with ripgrep. Risk: read_only (filesystem
when secret-like files are to be searched too).

Promises:

* ripgrep (the pinned ``ripgrep`` package's ``rg``, never one found on ``PATH``) runs in the call's
  worker under the shared process runner (:mod:`peon.workers.runner`): its own process group, no
  descriptor of Peon's, killed at the deadline like any command — the answer then carries what was
  found so far and ``timed_out: true``; nothing it started is alive when the call returns. It runs
  in the searched directory, entered through a descriptor opened beneath the pinned root and
  checked against the approved identity (else ``changed_since_approval``), with the options of
  :func:`peon.tools.shared.search.rg_base_argv`: ``.gitignore`` respected, symlinks never followed (so nothing
  outside the workspace is read or listed), binary files skipped.
* Order is stable (``--sort path``) and results are paged: ``offset``/``limit`` count entries (files,
  lines, or per-file counts), ``next_offset`` is set when there are more, and ripgrep is stopped as
  soon as one entry past the page is seen. Lines are cut at :data:`peon.tools.shared.search.MAX_LINE_CHARS`.
* The call's ``glob`` is decided by Peon's one glob engine (:func:`peon.tools.shared.globs.compile_glob`)
  for every file returned; ripgrep filters by it first only where its own engine agrees
  (:func:`~peon.tools.shared.globs.ripgrep_agrees`).
* Secret-like files (:mod:`peon.approval.secret_paths`) beneath the searched directory are never returned
  without approval: every one is listed first (ripgrep lists names without reading them), by name as
  bytes and without the call's glob, decided by Peon's matcher, and each one ripgrep could open (any,
  unless ripgrep filters by the glob) is excluded from the search by its exact path
  (:func:`~peon.tools.shared.search.literal_glob`); a result whose path is secret-like all the same (a
  file made between the listing and the search) is dropped. ``skipped`` reports those the
  call's glob names, with the rule that matched. ``include_secret_paths`` lifts all this and makes the
  call filesystem risk, so the approval policy decides.
* A regex or glob ripgrep refuses is ``invalid_pattern`` with ripgrep's own explanation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import sysconfig
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from peon.core.cancel import CancelToken, Deadline
from peon.core.environment import command_environment
from peon.core.errors import ErrorCode, ToolError
from peon.tools.shared.globs import compile_glob, ripgrep_agrees
from peon.core.paths import parse_workspace_path
from peon.tools.shared.search import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    TYPE_NAME,
    CountReader,
    JsonLineReader,
    Page,
    PathReader,
    SecretPrefilter,
    literal_glob,
    looks_like_pattern_error,
    rg_base_argv,
    rg_error,
    shown_name,
)
from peon.approval.secret_paths import SecretMatch, secret_match, secret_patterns
from peon.core.tool import Prepared, SessionView, Tool, ToolContext, ToolRisk
from peon.workers import fs
from peon.workers.runner import ProcessOutcome, ProcessSpec, run_process

from peon.tools.shared.process import TIMEOUT_PROPERTY, effective_timeout, with_session_timeout
from peon.tools.shared.resolver import session_resolver

ANSWER_MARGIN_SECONDS = 0.15  # ripgrep is stopped this long before the deadline, so the answer is in time
MAX_SKIPPED_LISTED = 200
MAX_EXCLUSION_BYTES = 256 << 10  # of secret-like names passed to ripgrep (argv is bounded by the kernel)


# -- the searched directory (shared with glob) -----------------------------------------------------------------


def resolve_search_root(args: Mapping[str, Any], session: SessionView) -> dict[str, Any]:
    """Approval details of the searched path: ``path`` (resolved, workspace-relative, ``.`` for the
    root), ``kind`` (``directory`` or ``file``) and ``id`` (device:inode). Resolved by ``read``'s rules."""
    path = parse_workspace_path(args.get("path") or ".")
    with fs.workspace_root(session) as root:
        if not path.parts:
            return {"path": ".", "kind": "directory", "id": str(fs.FileId.of(os.fstat(root)))}
        resolution = fs.resolve(root, path, follow_final=True, must_exist=True)
    if resolution.kind not in ("directory", "regular file"):
        raise ToolError(ErrorCode.NOT_A_REGULAR_FILE, f"path {path.shown} resolves to {resolution.path!r}, a "
                        f"{resolution.kind}; search a directory or a regular file", {"kind": resolution.kind})
    return {"path": resolution.path, "kind": "directory" if resolution.kind == "directory" else "file",
            "id": str(resolution.file)}


@dataclass
class SearchRoot:
    """The approved directory, open (``fd``); ``only`` names the one file searched in it, if any."""

    fd: int
    prefix: str  # workspace-relative path of the directory ("" for the root)
    only: str | None

    def close(self) -> None:
        os.close(self.fd)


def open_search_root(args: Mapping[str, Any], ctx: ToolContext) -> SearchRoot:
    """In the worker: the approved directory (or a file's directory), opened beneath the root and
    checked against the approved identity."""
    approved = ctx.approved
    expected = fs.FileId.parse(approved.get("id"))
    resolved, kind = approved.get("path"), approved.get("kind")
    if expected is None or not isinstance(resolved, str) or kind not in ("directory", "file"):
        raise ToolError(ErrorCode.CHANGED_SINCE_APPROVAL, "the call does not carry the approved search path; "
                        "nothing was searched", {"rule": "approved_details"})
    typed = parse_workspace_path(args.get("path") or ".")
    resolver = session_resolver(ctx.session)
    with fs.workspace_root(ctx.session) as root:
        if kind == "directory":
            fd = (fs.open_beneath(root, typed, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, resolver) if typed.parts
                  else os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root))
            found = fs.FileId.of(os.fstat(fd))
            prefix, only = ("" if resolved == "." else resolved), None
        else:
            fd, name = fs.open_parent(root, typed, resolver, follow_final=True)
            try:
                found = fs.FileId.of(os.stat(name, dir_fd=fd, follow_symlinks=False))
            except OSError:
                os.close(fd)
                raise fs.changed_since_approval(typed, "the file is gone") from None
            prefix, only = resolved.rpartition("/")[0], name
    if found != expected:
        os.close(fd)
        raise fs.changed_since_approval(typed, f"it is no longer the approved {kind} ({expected})")
    return SearchRoot(fd, prefix, only)


def rg_executable() -> str:
    """The ``rg`` of the pinned ``ripgrep`` package, installed beside this interpreter's scripts."""
    for directory in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(directory, "rg")
        if os.access(candidate, os.X_OK):
            return candidate
    raise ToolError(ErrorCode.IO_ERROR, "ripgrep is not installed beside Peon (the 'ripgrep' package provides rg); "
                    "reinstall peon-runtime", {"rule": "ripgrep_missing"})


def rg_environment(session: SessionView) -> dict[str, str]:
    """The session's command environment (ripgrep's ignore rules read the global git excludes through
    HOME and XDG_CONFIG_HOME), without ripgrep's configuration file: every option is Peon's."""
    env = command_environment(session)
    env.pop("RIPGREP_CONFIG_PATH", None)
    return env


@dataclass
class RgRun:
    """One ripgrep process: its outcome and whether it was stopped for having found enough."""

    outcome: ProcessOutcome
    stopped_early: bool


class _Sink:
    """The runner's output sink (:class:`peon.core.tool.OutputSink`): feeds a reader, never pushes back."""

    def __init__(self, feed: Callable[[bytes | memoryview], None]) -> None:
        self.feed = feed

    def spawned(self) -> None:
        return None

    def push(self, data: bytes | memoryview) -> bool:
        self.feed(data)
        return True

    def when_drained(self, callback: Callable[[], None]) -> None:
        callback()


async def run_rg(argv: list[str], search: SearchRoot, ctx: ToolContext, feed: Callable[[bytes | memoryview], None],
                 enough: Callable[[], bool] = lambda: False) -> RgRun:
    """Run ripgrep in ``search``'s directory under the process runner, feeding its output to ``feed``;
    stopped (TERM) once ``enough()``, and killed ``ANSWER_MARGIN_SECONDS`` before the call's deadline."""
    stop = CancelToken()
    stopped_early = False

    def feed_and_check(data: bytes | memoryview) -> None:
        nonlocal stopped_early
        feed(data)
        if not stopped_early and enough():
            stopped_early = True
            stop.cancel("enough results for the page")

    async def forward_cancel() -> None:
        stop.cancel(await ctx.cancel.wait())

    forward = asyncio.create_task(forward_cancel())
    sub = dataclasses.replace(ctx, cancel=stop, output=_Sink(feed_and_check), wants_progress=False,
                              deadline=Deadline(max(0.0, ctx.deadline.at - ANSWER_MARGIN_SECONDS)))
    try:
        outcome = await run_process(ProcessSpec(argv, "/", rg_environment(ctx.session), cwd_fd=search.fd), sub)
    finally:
        forward.cancel()
    if ctx.cancel.cancelled:
        raise ToolError(ErrorCode.CANCELLED, f"the search was cancelled: {ctx.cancel.reason}")
    return RgRun(outcome, stopped_early)


def check_rg_failed(run: RgRun, errors: list[str], found_any: bool) -> None:
    """ripgrep exits 2 on a bad pattern (nothing found) and on unreadable files (results kept)."""
    outcome = run.outcome
    if outcome.exit_code != 2 or found_any or run.stopped_early or outcome.timed_out:
        return
    text = rg_error(errors, outcome.output.text)
    if looks_like_pattern_error(text):
        raise ToolError(ErrorCode.INVALID_PATTERN, f"ripgrep refused the pattern: {text}", {"ripgrep": text})
    if text:
        raise ToolError(ErrorCode.IO_ERROR, f"ripgrep failed: {text}", {"ripgrep": text})


def _everything(path: str) -> bool:
    return True


@dataclass
class Filters:
    """What the call's ``glob`` and ``type`` make of a search."""

    options: list[str]  # ripgrep's
    accept: Callable[[str], bool]  # every path ripgrep returns: Peon's glob engine decides
    named: Callable[[str], bool]  # the glob alone: the secret-like files the answer reports
    opened: Callable[[str], bool]  # what ripgrep may open: the secret-like ones are left out by name


def filters(args: Mapping[str, Any], search: SearchRoot) -> Filters:
    """The :class:`Filters` of a call. ripgrep filters by the glob too only where its engine reads it as
    Peon's does (:func:`ripgrep_agrees`), and only by name, since its own ``--glob`` would override
    ``.gitignore``; then it opens no file the glob does not name, otherwise any."""
    options: list[str] = []
    accept: Callable[[str], bool] = _everything
    named: Callable[[str], bool] = _everything
    opened: Callable[[str], bool] = _everything
    glob = args.get("glob")
    if search.only is not None:
        options += ["--glob", "/" + literal_glob(search.only)]  # the one file, found by walking its directory
        only = f"{search.prefix}/{search.only}" if search.prefix else search.only
        accept = lambda path: path == only  # noqa: E731
    elif glob is not None:
        matcher = compile_glob(glob)
        offset = len(search.prefix) + 1 if search.prefix else 0
        accept = named = lambda path: matcher(path[offset:])
        if ripgrep_agrees(glob):  # a file type: filters like --glob but never overrides .gitignore
            options += ["--type-add", f"{TYPE_NAME}:{glob}", "--type", TYPE_NAME]
            opened = named
    if args.get("type"):
        options += ["--type", args["type"]]
    return Filters(options, accept, named, opened)


# -- the tool ----------------------------------------------------------------------------------------------------

ENTRY = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "line": {"type": "integer", "description": "1-based line number (output 'lines')."},
        "kind": {"enum": ["match", "context"], "description": "A matching line or a context line (output 'lines')."},
        "text": {"type": "string", "description": "The line without its line break (output 'lines')."},
        "text_truncated": {"type": "boolean"},
        "count": {"type": "integer", "description": "Matching lines in the file (output 'count')."},
    },
    "required": ["path"],
}

GREP_OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "output": {"enum": ["files", "lines", "count"]},
        "entries": {"type": "array", "items": ENTRY,
                    "description": "Files, lines or per-file counts, in path order (then line order)."},
        "offset": {"type": "integer", "minimum": 0},
        "next_offset": {"type": ["integer", "null"], "description": "Where the next page starts; null: no more."},
        "timed_out": {"type": "boolean", "description": "The deadline stopped the search: entries are partial."},
        "skipped": {
            "type": "array",
            "description": "Secret-like files that were not searched, with the rule that matched.",
            "items": {"type": "object", "properties": {"path": {"type": "string"}, "rule": {"type": "string"}},
                      "required": ["path", "rule"]},
        },
        "skipped_count": {"type": "integer", "minimum": 0},
    },
    "required": ["output", "entries", "offset", "next_offset", "timed_out", "skipped", "skipped_count"],
}


@dataclass
class _Skipped:
    listed: list[dict[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # those ripgrep could open, relative to the searched directory
    found: int = 0


class GrepTool(Tool):
    name = "grep"
    description = (
        "Search file contents in the workspace with a regular expression (ripgrep, Rust regex syntax). "
        "output 'files' (default) lists matching files, 'lines' the matching lines (with context lines if "
        "asked), 'count' matching lines per file. .gitignore is respected, binary files and symlinks are "
        "skipped, results are in path order and paged (offset, limit, next_offset). Secret-like files "
        "(.env, keys...) are not searched but listed in 'skipped' unless include_secret_paths is set."
    )
    risk = ToolRisk.READ_ONLY
    input_schema = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "maxLength": 10000, "pattern": "^[^\\u0000]*$",
                        "description": "Regular expression (Rust regex syntax), e.g. 'fn\\s+main'."},
            "path": {"type": "string", "pattern": "^[^\\u0000]*$",
                     "description": "Workspace-relative directory or file to search (default: the workspace)."},
            "glob": {"type": "string", "minLength": 1, "maxLength": 1000,
                     "description": "Only files whose path matches, e.g. '*.py' or 'src/**/*.ts'."},
            "type": {"type": "string", "pattern": "^[A-Za-z0-9_+-]{1,64}$",
                     "description": "Only files of this ripgrep file type, e.g. 'py', 'rust', 'js'."},
            "case_insensitive": {"type": "boolean"},
            "context": {"type": "integer", "minimum": 0, "maximum": 20,
                        "description": "Lines of context before and after each match (output 'lines')."},
            "output": {"enum": ["files", "lines", "count"], "description": "What to return (default 'files')."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                      "description": f"Entries per page (default {DEFAULT_LIMIT})."},
            "offset": {"type": "integer", "minimum": 0, "maximum": 2**31,
                       "description": "Entries to skip (the previous answer's next_offset)."},
            "include_secret_paths": {"type": "boolean",
                                     "description": "Also search secret-like files (needs approval)."},
            "timeout_seconds": TIMEOUT_PROPERTY,
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    output_schema = GREP_OUTPUT_SCHEMA

    def schema_for(self, session: SessionView) -> Mapping[str, Any]:
        return with_session_timeout(self.input_schema, session)

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Prepared:
        """Filesystem risk when secret-like files are searched too; shown with the resolved search path. A
        glob that does not compile, or a path that cannot be searched, fails here."""
        secrets = bool(args.get("include_secret_paths"))
        if secrets:
            risk, reason = ToolRisk.FILESYSTEM, "searches inside the workspace, secret-like files included"
        else:
            risk, reason = ToolRisk.READ_ONLY, "searches inside the workspace (secret-like files skipped)"
        where = args.get("path") or "."
        summary = f"search {where!r} for /{args['pattern']}/" + (" including secret-like files" if secrets else "")
        if args.get("glob") is not None:
            compile_glob(args["glob"])  # refused here, before anyone is asked
        timeout = effective_timeout(args, session)
        details = {**resolve_search_root(args, session), "include_secret_paths": secrets, "timeout_seconds": timeout}
        return Prepared(risk, reason, summary, details, timeout)

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        rg = rg_executable()
        output = args.get("output", "files")
        page = Page(int(args.get("offset", 0)), int(args.get("limit", DEFAULT_LIMIT)))
        search = open_search_root(args, ctx)
        try:
            chosen = filters(args, search)
            accept = chosen.accept
            skipped = _Skipped()
            timed_out = False
            if not (ctx.approved.get("include_secret_paths") and args.get("include_secret_paths")):
                timed_out = await _list_secrets(rg, search, chosen, ctx, skipped)
                accept = _not_secret(accept, ctx)
            if search.only is not None and skipped.found:
                pass  # the one file searched is secret-like: nothing to search
            elif not timed_out:
                timed_out = await _search(rg, args, output, search, chosen.options, accept, page, skipped, ctx)
        finally:
            search.close()
        return {"output": output, "entries": page.entries, "offset": page.offset,
                "next_offset": page.next_offset, "timed_out": timed_out,
                "skipped": skipped.listed[:MAX_SKIPPED_LISTED], "skipped_count": len(skipped.listed)}


def _secret_test(ctx: ToolContext) -> Callable[[str], SecretMatch | None]:
    """What makes an exact workspace-relative path secret-like (:func:`secret_match`), or None; a
    :class:`SecretPrefilter` spares the exact decision almost every path."""
    may_be_secret = SecretPrefilter(secret_patterns(ctx.session.env))
    return lambda path: secret_match(tuple(path.split("/")), ctx.session.env) if may_be_secret(path) else None


def _not_secret(accept: Callable[[str], bool], ctx: ToolContext) -> Callable[[str], bool]:
    """``accept``, and not secret-like: a secret-like file made after the listing is read by ripgrep, never
    returned."""
    secret = _secret_test(ctx)
    return lambda path: accept(path) and secret(path) is None


async def _list_secrets(rg: str, search: SearchRoot, chosen: Filters, ctx: ToolContext, skipped: _Skipped) -> bool:
    """Find every secret-like file beneath the searched path by name, reading none of them (``rg --files``
    lists what the search would read; the exact names, bytes that are not UTF-8 included, are decided by
    :func:`secret_match`, never by the call's glob); those ripgrep could open are to be left out, those the
    call's glob names are reported. True if the deadline stopped the listing. ripgrep's own globs would do
    the matching at several times the cost of the listing (docs/architecture.md, "Editing and searching")."""
    offset = len(search.prefix) + 1 if search.prefix else 0
    secret = _secret_test(ctx)

    def on_path(path: str, _: bool) -> None:
        match = secret(path)
        if match is None:
            return
        skipped.found += 1
        if chosen.opened(path):
            skipped.paths.append(path[offset:])
        if chosen.named(path):
            skipped.listed.append({"path": shown_name(path)[0], "rule": shown_name(match.reason())[0]})

    if search.only is not None:
        on_path(f"{search.prefix}/{search.only}" if search.prefix else search.only, False)
        return False
    reader = PathReader(search.prefix, _everything, on_path, exact=True)
    run = await run_rg([*rg_base_argv(rg), "--files", "--null", "--", "."], search, ctx, reader.records.feed)
    reader.finish()
    skipped.listed.sort(key=lambda entry: entry["path"])
    skipped.paths.sort()
    return run.outcome.timed_out


def _exclusions(skipped: _Skipped) -> list[str]:
    """One anchored ``--glob !/path`` per secret-like file (its exact name, byte for byte: ripgrep never opens
    it; see :func:`literal_glob`)."""
    if sum(len(p) + 8 for p in skipped.paths) > MAX_EXCLUSION_BYTES:
        raise ToolError(ErrorCode.TOO_LARGE, f"{len(skipped.paths)} secret-like files beneath the searched path are "
                        f"too many to leave out (their names exceed {MAX_EXCLUSION_BYTES} bytes of ripgrep options); "
                        "search a narrower path, or set include_secret_paths", {"skipped": len(skipped.paths)})
    out = []
    for relative in skipped.paths:
        out += ["--glob", "!/" + literal_glob(relative)]
    return out


async def _search(rg: str, args: Mapping[str, Any], output: str, search: SearchRoot, options: list[str],
                  accept: Callable[[str], bool], page: Page, skipped: _Skipped, ctx: ToolContext) -> bool:
    argv = [*rg_base_argv(rg), "--sort", "path"]
    if args.get("case_insensitive"):
        argv.append("--ignore-case")
    errors: list[str]
    if output == "files":
        argv += ["--files-with-matches", "--null"]
        reader: Any = PathReader(search.prefix, accept, lambda path, escaped: page.offer({"path": path}))
        errors = reader.errors
    elif output == "count":
        argv += ["--count", "--null"]
        reader = CountReader(search.prefix, accept, lambda path, count: page.offer({"path": path, "count": count}))
        errors = reader.errors
    else:
        argv += ["--json"]
        if args.get("context"):
            argv += ["--context", str(int(args["context"]))]
        reader = JsonLineReader(search.prefix, accept, page.offer)
        errors = reader.errors
    argv += options + _exclusions(skipped) + ["--regexp", args["pattern"], "--", "."]
    run = await run_rg(argv, search, ctx, reader.records.feed, lambda: page.full)
    reader.finish()
    check_rg_failed(run, errors, page.seen > 0)
    return run.outcome.timed_out and not run.stopped_early
