"""``write``: create or replace a workspace file, atomically. Risk: filesystem.

Promise: ``create`` installs the file only if nothing exists at the path (not even a dangling
symlink), so of two racing creates exactly one wins, and makes the directories of the path that do not
exist yet — beneath the workspace root's descriptor, never through a symlink, each one listed in the
approval and in the result; ``replace`` only replaces an existing regular file (following symlinks that
stay inside the workspace) and keeps its permission bits. Without ``mode`` the call is a ``create``
when nothing is at the path and a ``replace`` otherwise (always a ``replace`` with ``expected_sha256``),
decided when it is approved and shown as such. With ``expected_sha256`` the file observed immediately
before the install must have that hash, else the call fails with ``stale`` and the actual hash — this
detects stale input, it does not lock the file against other writers. The call is rated, shown and
approved by the path it resolves to (a new directory on the agent-control list asks as the path does),
and the worker writes only into the approved directory entry (else ``changed_since_approval``, see
:mod:`peon.tools.shared.target`). The install is crash-atomic (see :mod:`peon.workers.fs`), so the
executor runs synchronously in its worker: if the deadline backstop kills a stuck write, the
destination still holds the old or the new content. Semantics in ``docs/files.md``.
"""

from __future__ import annotations

import hashlib
from typing import Any
from collections.abc import Mapping

from peon.core.errors import ErrorCode, ToolError
from peon.core.paths import WorkspacePath, parse_file_path
from peon.core.tool import Prepared, SessionView, Tool, ToolContext, ToolRisk
from peon.core.output.truncation import HeadTail
from peon.core.text import lone_surrogate
from peon.workers import fs

from peon.tools.shared.resolver import session_resolver
from peon.tools.shared.target import CREATE_DIRECTORIES, Access, Target, approved_expectation, resolve_target, risk_note

PREVIEW_BYTES = 4096  # of the content, shown to the approver (head and tail)

WRITE_OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "The normalized workspace-relative path written."},
        "bytes_written": {"type": "integer", "minimum": 0},
        "sha256": {"type": "string", "description": "SHA-256 of the new content (lower-case hex)."},
        "created": {"type": "boolean", "description": "True when the file was created, false when replaced."},
        "created_directories": {"type": "array", "items": {"type": "string"},
                                "description": "The directories made for the file, outermost first (only "
                                               "when it made any)."},
    },
    "required": ["path", "bytes_written", "sha256", "created"],
}
MODES = ("create", "replace")


def _checked(args: Mapping[str, Any]) -> tuple[WorkspacePath, bytes, str | None]:
    path = parse_file_path(args["path"])
    expected = args.get("expected_sha256")
    if expected is not None and args.get("mode") == "create":
        raise ToolError(ErrorCode.INVALID_INPUT,
                        "expected_sha256 only applies to mode 'replace'; mode 'create' requires that no file exists",
                        {"rule": "expected_sha256", "pointer": "/expected_sha256"})
    try:
        data = args["content"].encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(ErrorCode.NOT_UTF8, f"content is not valid UTF-8: {lone_surrogate(args['content'])}",
                        {"index": exc.start}) from None
    return path, data, None if expected is None else expected.lower()


def _target(path: WorkspacePath, args: Mapping[str, Any], session: SessionView) -> tuple[Access, Target]:
    """The mode the call has (asked, or decided by what is at the path) and its resolved target."""
    mode = args.get("mode")
    if mode is None and args.get("expected_sha256") is None:
        try:
            return "create", resolve_target(path, "create", session)
        except ToolError as exc:  # something is there already: a replace (below)
            if exc.code is not ErrorCode.ALREADY_EXISTS:
                raise
    access: Access = "create" if mode == "create" else "replace"
    try:
        return access, resolve_target(path, access, session)
    except ToolError as exc:
        missing = (exc.details or {}).get("at")  # the component that is not there (None: the file itself)
        if mode == "replace" and exc.code is ErrorCode.NOT_FOUND and missing not in (None, path.normalized):
            raise ToolError(exc.code, f"{exc.message} (mode 'replace' does not create directories; mode 'create' "
                            "does)", exc.details) from None
        raise


def _approved_mode(ctx: ToolContext, args: Mapping[str, Any]) -> Access:
    """In the worker: the mode the call was approved with (a call without ``mode`` had it decided then)."""
    mode = ctx.approved.get("mode")
    if mode not in MODES or (args.get("mode") is not None and mode != args["mode"]):
        raise ToolError(ErrorCode.CHANGED_SINCE_APPROVAL, "the call does not carry the mode it was approved with; "
                        "nothing was done", {"rule": "approved_details"})
    return "create" if mode == "create" else "replace"


class WriteTool(Tool):
    name = "write"
    starts_processes = False
    description = (
        "Write a file in the workspace with the given UTF-8 content, installed atomically; missing parent "
        "directories are created. Without mode it creates the file or replaces the existing one. mode "
        "'create' fails if the path exists; mode 'replace' fails if it does not (pass expected_sha256 to fail "
        "with 'stale' if the file changed since you read it)."
    )
    risk = ToolRisk.FILESYSTEM
    input_schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Workspace-relative path of the file."},
            "content": {"type": "string", "description": "The complete new content."},
            "mode": {"enum": list(MODES),
                     "description": "Optional. 'create': only if nothing exists there (missing directories are "
                                    "created); 'replace': only an existing file. Default: create it, or replace "
                                    "the existing file."},
            "expected_sha256": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$",
                                "description": "For a replace: the SHA-256 (hex) the file must still have."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }
    output_schema = WRITE_OUTPUT_SCHEMA

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Prepared:
        """Rated and shown by where the path resolves; the details carry the mode (decided here when the
        call gives none), the directories it makes (``create_directories``), the content's size, hash and
        preview (head and tail)."""
        path, _, _ = _checked(args)
        mode, target = _target(path, args, session)
        note = risk_note(target)
        data = args["content"].encode("utf-8", "surrogatepass")
        condition = f", only if its sha256 is still {args['expected_sha256']}" if args.get("expected_sha256") else ""
        preview = HeadTail(PREVIEW_BYTES)
        preview.feed(data)
        details = {**target.details(), "mode": mode, "bytes": len(data),
                   "sha256": hashlib.sha256(data).hexdigest(), "expected_sha256": args.get("expected_sha256"),
                   "content_preview": preview.render().text}
        made = details.get(CREATE_DIRECTORIES) or []
        noun = "directories" if len(made) > 1 else "directory"
        directories = f", making the {noun} {', '.join(map(repr, made))}" if made else ""
        reason = f"{mode}s a file inside the workspace" + (f" ({note})" if note else "")
        summary = f"{mode} {args['path']!r} with {len(data)} bytes{condition}{directories}"
        return Prepared(ToolRisk.FILESYSTEM, reason, summary, details)

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        path, data, expected_sha256 = _checked(args)
        mode = _approved_mode(ctx, args)
        resolver = session_resolver(ctx.session)
        with fs.workspace_root(ctx.session) as root:
            expected = approved_expectation(ctx.approved, path, mode, root)
            outcome = fs.write_file(root, path, data, create=mode == "create",
                                    expected_sha256=expected_sha256, resolver=resolver, expected=expected)
        value: dict[str, Any] = {"path": path.normalized, "bytes_written": outcome.bytes_written,
                                 "sha256": outcome.sha256, "created": outcome.created}
        if outcome.created_directories:
            value["created_directories"] = list(outcome.created_directories)
        return value
