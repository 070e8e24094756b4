"""``glob``: list the workspace files whose path matches a glob, newest first. Risk: read_only.

Promise: ripgrep lists the files beneath the searched directory (``rg --files``: in the worker, under the
shared process runner, killed at the deadline, entered through the approved directory's descriptor —
see :mod:`peon.tools.grep`), never following a symlink (nothing outside the workspace is listed),
``.gitignore`` respected unless ``respect_gitignore`` is false, ``.git`` never listed. The paths are
matched here against the glob (:func:`peon.tools.shared.globs.compile_glob`: ``*`` within a component, ``**``
across components; a glob without ``/`` matches at any depth), so ``.gitignore`` still applies to
files the glob names. Order: modification time, newest first (ripgrep's ``--sortr modified``).
Paged with ``offset``/``limit``/``next_offset``; ``total`` counts every match.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from peon.core.errors import ErrorCode, ToolError
from peon.tools.shared.globs import compile_glob
from peon.tools.shared.search import DEFAULT_LIMIT, MAX_LIMIT, Page, PathReader, rg_base_argv
from peon.core.tool import Prepared, SessionView, Tool, ToolContext, ToolRisk

from peon.tools.grep import check_rg_failed, open_search_root, resolve_search_root, rg_executable, run_rg
from peon.tools.shared.process import TIMEOUT_PROPERTY, effective_timeout, with_session_timeout

GLOB_OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "paths": {"type": "array", "items": {"type": "string"},
                  "description": "Workspace-relative paths of matching files, newest first."},
        "offset": {"type": "integer", "minimum": 0},
        "next_offset": {"type": ["integer", "null"], "description": "Where the next page starts; null: no more."},
        "total": {"type": "integer", "minimum": 0, "description": "Matching files in all (when not timed out)."},
        "timed_out": {"type": "boolean", "description": "The deadline stopped the listing: paths are partial."},
    },
    "required": ["paths", "offset", "next_offset", "total", "timed_out"],
}


class GlobTool(Tool):
    name = "glob"
    description = (
        "List files in the workspace whose path matches a glob ('**/*.py', 'src/**/*.ts', '*.{json,toml}'), "
        "newest first. '*' stays within a directory, '**' crosses directories; a glob without '/' matches at "
        "any depth. .gitignore is respected (respect_gitignore: false lists ignored files too); symlinks are "
        "not followed. Paged with offset, limit and next_offset."
    )
    risk = ToolRisk.READ_ONLY
    input_schema = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "maxLength": 1000,
                        "description": "The glob, relative to path."},
            "path": {"type": "string", "pattern": "^[^\\u0000]*$",
                     "description": "Workspace-relative directory to list beneath (default: the workspace)."},
            "respect_gitignore": {"type": "boolean", "description": "Skip ignored files (default true)."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                      "description": f"Paths per page (default {DEFAULT_LIMIT})."},
            "offset": {"type": "integer", "minimum": 0, "maximum": 2**31,
                       "description": "Paths to skip (the previous answer's next_offset)."},
            "timeout_seconds": TIMEOUT_PROPERTY,
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    output_schema = GLOB_OUTPUT_SCHEMA

    def schema_for(self, session: SessionView) -> Mapping[str, Any]:
        return with_session_timeout(self.input_schema, session)

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Prepared:
        """Shown with the resolved directory. A pattern that does not compile, or a path that is not a
        directory, fails here."""
        compile_glob(args["pattern"])  # refused here, before anyone is asked
        details = resolve_search_root(args, session)
        if details["kind"] != "directory":
            raise ToolError(ErrorCode.NOT_A_DIRECTORY, f"path {args.get('path')!r} resolves to {details['path']!r}, "
                            "a file; glob lists beneath a directory", {"kind": "file"})
        timeout = effective_timeout(args, session)
        details = {**details, "respect_gitignore": args.get("respect_gitignore", True), "timeout_seconds": timeout}
        return Prepared(ToolRisk.READ_ONLY, "lists file names inside the workspace",
                        f"list files matching {args['pattern']!r} in {args.get('path') or '.'!r}", details, timeout)

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        rg = rg_executable()
        matcher = compile_glob(args["pattern"])
        page = Page(int(args.get("offset", 0)), int(args.get("limit", DEFAULT_LIMIT)))
        search = open_search_root(args, ctx)
        offset = len(search.prefix) + 1 if search.prefix else 0
        try:
            argv = [*rg_base_argv(rg, respect_ignore=args.get("respect_gitignore", True) is not False),
                    "--files", "--null", "--sortr", "modified", "--", "."]
            reader = PathReader(search.prefix, lambda path: matcher(path[offset:]),
                                lambda path, escaped: page.offer({"path": path}))
            run = await run_rg(argv, search, ctx, reader.records.feed)
            reader.finish()
        finally:
            search.close()
        check_rg_failed(run, reader.errors, page.seen > 0)
        return {"paths": [entry["path"] for entry in page.entries], "offset": page.offset,
                "next_offset": page.next_offset, "total": page.seen, "timed_out": run.outcome.timed_out}

    async def warm_up(self, ctx: ToolContext, *, processes: bool) -> None:
        """Compile and match a glob: loads the glob matcher once, in the forkserver, not in each call."""
        compile_glob("src/**/*.{py,txt}")("src/a/b.py")
