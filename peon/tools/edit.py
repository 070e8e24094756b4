"""``edit``: replace exact strings in a workspace file, all or nothing, installed atomically. Risk: filesystem.

Promise: the path is resolved, rated and approved like ``write``'s ``replace`` (:mod:`peon.tools.shared.target`:
by where it resolves, symlinks that stay inside followed, secret-like and other listed paths named in
the risk), and the worker writes only into the approved directory entry (else
``changed_since_approval``). The edits are applied in memory by :func:`peon.tools.shared.text_edit.apply_edits`
(each ``old_string`` exactly once unless ``replace_all``, in order, ``not_found`` / ``ambiguous`` naming
the edit) and the result is installed by :func:`peon.workers.fs.write_file` — crash-atomic, mode and
owner kept — only if the file still has the content the edits were applied to (else ``stale``);
``expected_sha256`` (from ``read``) must match the file before any edit (else ``stale``).

The approval request shows the unified diff of the change (computed in the supervisor for files of at
most :data:`APPROVAL_DIFF_MAX_FILE_BYTES`, with the file's ``sha256``); the worker then applies the
edits only to that same content, so what runs is what was shown. The result carries the new
``sha256`` and the diff, bounded (:mod:`peon.tools.shared.unified_diff`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from peon.core.errors import ErrorCode, ToolError
from peon.core.paths import WorkspacePath, parse_file_path
from peon.tools.shared.text_edit import Applied, Edit, apply_edits, decode_utf8
from peon.core.tool import Prepared, SessionView, Tool, ToolContext, ToolRisk
from peon.core.output.truncation import HeadTail
from peon.tools.shared.unified_diff import unified_diff
from peon.core.text import lone_surrogate
from peon.workers import fs

from peon.tools.shared.resolver import session_resolver
from peon.tools.shared.target import approved_expectation, resolve_target, risk_note

EDIT_MAX_FILE_BYTES = 64 << 20  # a larger file is too_large: it is held in memory several times over
APPROVAL_DIFF_MAX_FILE_BYTES = 8 << 20  # larger files show the edits, not the diff, to the approver
RESULT_DIFF_BYTES = 32 << 10
APPROVAL_DIFF_BYTES = 16 << 10
PREVIEW_BYTES = 2048  # of each old_string/new_string when no diff is shown

EDIT_OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "The normalized workspace-relative path edited (as typed)."},
        "sha256": {"type": "string", "description": "SHA-256 of the new content; pass it as the next expected_sha256."},
        "previous_sha256": {"type": "string", "description": "SHA-256 of the content the edits were applied to."},
        "replacements": {"type": "integer", "minimum": 1, "description": "Occurrences replaced over all edits."},
        "bytes": {"type": "integer", "minimum": 0, "description": "Size of the new content."},
        "line_ending": {"enum": ["lf", "crlf"], "description": "The line endings kept."},
        "diff": {"type": "string", "description": "Unified diff of the change (head and tail when long)."},
        "diff_truncated": {"type": "boolean"},
        "lines_added": {"type": "integer", "minimum": 0},
        "lines_removed": {"type": "integer", "minimum": 0},
    },
    "required": ["path", "sha256", "previous_sha256", "replacements", "bytes", "line_ending", "diff",
                 "diff_truncated", "lines_added", "lines_removed"],
}


def _edits(args: Mapping[str, Any]) -> list[Edit]:
    for index, e in enumerate(args["edits"]):
        for key in ("old_string", "new_string"):
            try:
                e[key].encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ToolError(ErrorCode.NOT_UTF8, f"edit {index}: {key} is not valid UTF-8: {lone_surrogate(e[key])}",
                                {"edit": index, "field": key, "index": exc.start}) from None
    return [Edit(e["old_string"], e["new_string"], bool(e.get("replace_all", False))) for e in args["edits"]]


def _edited(window: fs.Window, path: WorkspacePath, args: Mapping[str, Any]) -> tuple[str, Applied]:
    """(old text, the edits applied), or the error of the first edit that cannot apply."""
    expected = args.get("expected_sha256")
    if expected is not None and expected.lower() != window.sha256:
        raise ToolError(ErrorCode.STALE, f"path {path.shown} has sha256 {window.sha256}, not the expected "
                        f"{expected.lower()}; it changed since it was read", {
                            "expected_sha256": expected.lower(), "actual_sha256": window.sha256})
    old = decode_utf8(window.data, f"path {path.shown}")
    return old, apply_edits(old, _edits(args), f"path {path.shown}")


class EditTool(Tool):
    name = "edit"
    description = (
        "Edit a UTF-8 file in the workspace by exact string replacement: each edit's old_string must occur "
        "exactly once (or set replace_all), edits apply in order, all or nothing, and the file is replaced "
        "atomically with its mode and line endings kept. Copy old_string exactly from the file (no line-number "
        "prefixes). Returns the new sha256 and a unified diff. Pass expected_sha256 (from read) to fail with "
        "'stale' if the file changed since you read it."
    )
    risk = ToolRisk.FILESYSTEM
    input_schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Workspace-relative path of an existing UTF-8 file."},
            "edits": {
                "type": "array", "minItems": 1, "maxItems": 100,
                "items": {
                    "type": "object",
                    "properties": {
                        "old_string": {"type": "string", "minLength": 1,
                                       "description": "Exact text to replace (must occur once unless replace_all)."},
                        "new_string": {"type": "string", "description": "The replacement text."},
                        "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."},
                    },
                    "required": ["old_string", "new_string"],
                    "additionalProperties": False,
                },
                "description": "Replacements applied in order, each to the result of the previous one.",
            },
            "expected_sha256": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$",
                                "description": "The SHA-256 (hex) the file must still have (from read)."},
        },
        "required": ["path", "edits"],
        "additionalProperties": False,
    }
    output_schema = EDIT_OUTPUT_SCHEMA
    starts_processes = False  # may be served by a long-lived worker

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Prepared:
        """Rated by where the path resolves, and shown with that resolution and the unified diff of the
        change (or, for a file over :data:`APPROVAL_DIFF_MAX_FILE_BYTES`, each edit's strings, bounded). An
        edit that cannot apply fails here, before anyone is asked."""
        path = parse_file_path(args["path"])
        target = resolve_target(path, "replace", session)
        note = risk_note(target)
        reason = "edits a file inside the workspace" + (f" ({note})" if note else "")
        count = len(args["edits"])
        summary = f"edit {args['path']!r} ({count} replacement{'s' if count != 1 else ''})"
        details: dict[str, Any] = {**target.details(), "expected_sha256": args.get("expected_sha256")}
        with fs.workspace_root(session) as root:
            window = fs.read_whole(root, path, session_resolver(session), expected=target.resolution.file,
                                   max_bytes=APPROVAL_DIFF_MAX_FILE_BYTES)
        if window is None:
            details["edits_preview"] = [{"old_string": _preview(e.old), "new_string": _preview(e.new),
                                         "replace_all": e.replace_all} for e in _edits(args)]
        else:
            old, applied = _edited(window, path, args)
            diff = unified_diff(target.resolution.path, old, applied.text, APPROVAL_DIFF_BYTES)
            details.update({"sha256": window.sha256, "diff": diff.text, "diff_truncated": diff.truncated})
        return Prepared(ToolRisk.FILESYSTEM, reason, summary, details)

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        path = parse_file_path(args["path"])
        resolver = session_resolver(ctx.session)
        with fs.workspace_root(ctx.session) as root:
            expected = approved_expectation(ctx.approved, path, "replace", root)
            window = fs.read_whole(root, path, resolver, expected=expected.file, max_bytes=EDIT_MAX_FILE_BYTES)
            if window is None:
                raise ToolError(ErrorCode.TOO_LARGE, f"path {path.shown} is larger than {EDIT_MAX_FILE_BYTES} bytes, "
                                "the most edit holds in memory; use bash (sed) or write",
                                {"limit": EDIT_MAX_FILE_BYTES})
            shown_sha = ctx.approved.get("sha256")
            if shown_sha is not None and shown_sha != window.sha256:
                raise ToolError(ErrorCode.STALE, f"path {path.shown} changed after its diff was shown for approval "
                                f"(sha256 {shown_sha}, now {window.sha256}); nothing was written",
                                {"expected_sha256": shown_sha, "actual_sha256": window.sha256})
            old, applied = _edited(window, path, args)
            data = applied.text.encode("utf-8")
            outcome = fs.write_file(root, path, data, create=False, expected_sha256=window.sha256,
                                    resolver=resolver, expected=expected)
        diff = unified_diff(str(ctx.approved.get("path", path.normalized)), old, applied.text, RESULT_DIFF_BYTES)
        return {"path": path.normalized, "sha256": outcome.sha256, "previous_sha256": window.sha256,
                "replacements": applied.replacements, "bytes": len(data), "line_ending": applied.line_ending,
                "diff": diff.text, "diff_truncated": diff.truncated,
                "lines_added": diff.added, "lines_removed": diff.removed}


def _preview(text: str) -> str:
    preview = HeadTail(PREVIEW_BYTES)
    preview.feed(text.encode("utf-8", "surrogatepass"))
    return preview.render().text
