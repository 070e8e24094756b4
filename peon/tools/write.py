"""``write``: create or replace a workspace file, atomically. Risk: filesystem.

Promise: ``create`` installs the file only if nothing exists at the path (not even a dangling
symlink), so of two racing creates exactly one wins; ``replace`` only replaces an existing regular file
(following symlinks that stay inside the workspace) and keeps its permission bits. With
``expected_sha256`` the file observed immediately before the install must have that hash, else the
call fails with ``stale`` and the actual hash — this detects stale input, it does not lock the file
against other writers. The destination directory must already exist: a missing parent is a
``not_found`` error, never a silent mkdir. The call is rated, shown and approved by the path it
resolves to, and the worker writes only into the approved directory entry (else
``changed_since_approval``, see :mod:`peon.tools.shared.target`). The install is crash-atomic (see
:mod:`peon.workers.fs`), so the executor runs synchronously in its worker: if the deadline backstop kills a stuck
write, the destination still holds the old or the new content. Semantics in ``docs/files.md``.
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
from peon.tools.shared.target import approved_expectation, resolve_target, risk_note

PREVIEW_BYTES = 4096  # of the content, shown to the approver (head and tail)

WRITE_OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "The normalized workspace-relative path written."},
        "bytes_written": {"type": "integer", "minimum": 0},
        "sha256": {"type": "string", "description": "SHA-256 of the new content (lower-case hex)."},
        "created": {"type": "boolean", "description": "True for mode 'create', false for 'replace'."},
    },
    "required": ["path", "bytes_written", "sha256", "created"],
}


def _checked(args: Mapping[str, Any]) -> tuple[WorkspacePath, bytes, str | None]:
    path = parse_file_path(args["path"])
    expected = args.get("expected_sha256")
    if expected is not None and args["mode"] == "create":
        raise ToolError(ErrorCode.INVALID_INPUT,
                        "expected_sha256 only applies to mode 'replace'; mode 'create' requires that no file exists",
                        {"rule": "expected_sha256", "pointer": "/expected_sha256"})
    try:
        data = args["content"].encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(ErrorCode.NOT_UTF8, f"content is not valid UTF-8: {lone_surrogate(args['content'])}",
                        {"index": exc.start}) from None
    return path, data, None if expected is None else expected.lower()


class WriteTool(Tool):
    name = "write"
    starts_processes = False
    description = (
        "Create or replace a file in the workspace with the given UTF-8 content, installed atomically. "
        "mode 'create' fails if the path exists; mode 'replace' fails if it does not (pass expected_sha256 "
        "to fail with 'stale' if the file changed since you read it). The directory must already exist."
    )
    risk = ToolRisk.FILESYSTEM
    input_schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Workspace-relative path of the file."},
            "content": {"type": "string", "description": "The complete new content."},
            "mode": {"enum": ["create", "replace"],
                     "description": "'create': only if nothing exists there; 'replace': only an existing file."},
            "expected_sha256": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$",
                                "description": "For 'replace': the SHA-256 (hex) the file must still have."},
        },
        "required": ["path", "content", "mode"],
        "additionalProperties": False,
    }
    output_schema = WRITE_OUTPUT_SCHEMA

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Prepared:
        """Rated and shown by where the path resolves; the details carry the content's size, hash and
        preview (head and tail)."""
        path, _, _ = _checked(args)
        target = resolve_target(path, args["mode"], session)
        note = risk_note(target)
        data = args["content"].encode("utf-8", "surrogatepass")
        condition = f", only if its sha256 is still {args['expected_sha256']}" if args.get("expected_sha256") else ""
        preview = HeadTail(PREVIEW_BYTES)
        preview.feed(data)
        details = {**target.details(), "mode": args["mode"], "bytes": len(data),
                   "sha256": hashlib.sha256(data).hexdigest(), "expected_sha256": args.get("expected_sha256"),
                   "content_preview": preview.render().text}
        reason = f"{args['mode']}s a file inside the workspace" + (f" ({note})" if note else "")
        summary = f"{args['mode']} {args['path']!r} with {len(data)} bytes{condition}"
        return Prepared(ToolRisk.FILESYSTEM, reason, summary, details)

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        path, data, expected_sha256 = _checked(args)
        resolver = session_resolver(ctx.session)
        with fs.workspace_root(ctx.session) as root:
            expected = approved_expectation(ctx.approved, path, args["mode"], root)
            outcome = fs.write_file(root, path, data, create=args["mode"] == "create",
                                    expected_sha256=expected_sha256, resolver=resolver, expected=expected)
        return {"path": path.normalized, "bytes_written": outcome.bytes_written, "sha256": outcome.sha256,
                "created": outcome.created}
