"""``apply_patch``: add, update, move and delete workspace files with one patch, all or nothing. Risk: filesystem.

Promise: the patch is parsed (:mod:`peon.tools.shared.patch`, the format Codex models write) and every file it touches
— each source and each destination — is resolved and rated in the supervisor before anyone is asked,
exactly as ``write`` rates its target (:mod:`peon.tools.shared.target`: ``replace`` rules for updated,
moved and deleted files, ``create`` rules for added files and move destinations); the approval shows
every resolved file with its action. In the worker each file is resolved again and must be the
approved one (else ``changed_since_approval``); the updates are computed in memory from the files as
read, and :func:`peon.workers.fs.apply_changes` installs all of them or none: nothing is written
until every new content is staged and every check passed, and an install that fails puts back the
files already changed. A file that changed between its read and the install is ``stale``. An added
file or a move's destination gets the directories of its path that do not exist, as ``write``'s create
makes them (shown in each file's ``create_directories``). The result lists each file with its action
and new ``sha256``, and the directories made.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from peon.approval.policy import AGENT_CONTROL
from peon.core.errors import ErrorCode, ToolError
from peon.tools.shared.patch import FileOp, apply_hunks, parse_patch
from peon.core.paths import WorkspacePath
from peon.tools.shared.text_edit import decode_utf8
from peon.core.tool import Prepared, SessionView, Tool, ToolContext, ToolRisk
from peon.core.output.truncation import HeadTail
from peon.core.text import lone_surrogate
from peon.workers import fs

from peon.tools.edit import EDIT_MAX_FILE_BYTES
from peon.tools.shared.resolver import session_resolver
from peon.tools.shared.target import Access, Target, approved_expectation, resolve_target, risk_note

MAX_PATCH_CHARS = 16 << 20
MAX_FILES = 1000
PREVIEW_BYTES = 16 << 10

APPLY_PATCH_OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "files": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "The file as named in the patch (normalized)."},
                    "action": {"enum": ["add", "update", "delete", "move"]},
                    "move_to": {"type": ["string", "null"], "description": "The new path of a moved file."},
                    "sha256": {"type": ["string", "null"],
                               "description": "SHA-256 of the new content; null when deleted."},
                },
                "required": ["path", "action", "move_to", "sha256"],
            },
        },
        "fuzzy_hunks": {"type": "integer", "minimum": 0,
                        "description": "Hunks whose lines matched only with surrounding whitespace ignored."},
        "created_directories": {"type": "array", "items": {"type": "string"},
                                "description": "The directories made for added and moved files, outermost "
                                               "first (only when it made any)."},
    },
    "required": ["files", "fuzzy_hunks"],
}


@dataclass(frozen=True)
class _Touch:
    """One path a patch touches, and how."""

    op: int  # index of the operation
    role: str  # "source" or "destination"
    path: WorkspacePath
    access: Access


def _ops(args: Mapping[str, Any]) -> list[FileOp]:
    text = args["patch"]
    problem = lone_surrogate(text)
    if problem is not None:
        raise ToolError(ErrorCode.NOT_UTF8, f"the patch is not valid UTF-8: {problem}", {"rule": "patch"})
    ops = parse_patch(text)
    if not ops:
        raise ToolError(ErrorCode.INVALID_PATCH, "the patch has no file operation", {"rule": "empty_patch"})
    if len(ops) > MAX_FILES:
        raise ToolError(ErrorCode.TOO_LARGE, f"the patch touches {len(ops)} files; at most {MAX_FILES} per call",
                        {"limit": MAX_FILES})
    return ops


def _touches(ops: list[FileOp]) -> list[_Touch]:
    touches = []
    for index, op in enumerate(ops):
        touches.append(_Touch(index, "source", op.path, "create" if op.action == "add" else "replace"))
        if op.move_to is not None:
            touches.append(_Touch(index, "destination", op.move_to, "create"))
    return touches


def _plan(args: Mapping[str, Any], session: SessionView) -> tuple[list[FileOp], list[tuple[_Touch, Target]]]:
    """The patch's operations, and every path they touch resolved (once per call, in the supervisor)."""
    ops = _ops(args)
    return ops, [(touch, resolve_target(touch.path, touch.access, session)) for touch in _touches(ops)]


def _action(op: FileOp) -> str:
    return "move" if op.move_to is not None else op.action


def _details(args: Mapping[str, Any], ops: list[FileOp], planned: list[tuple[_Touch, Target]]) -> dict[str, Any]:
    """What the approver is shown and the worker insists on: each file's action and resolved target."""
    files: list[dict[str, Any]] = [{"action": _action(op)} for op in ops]
    for touch, target in planned:
        if touch.role == "source":
            files[touch.op].update(target.details())
        else:
            files[touch.op]["move_to"] = target.details()
    preview = HeadTail(PREVIEW_BYTES)
    preview.feed(args["patch"].encode("utf-8"))
    details: dict[str, Any] = {"files": files, "patch_preview": preview.render().text}
    # The approval policy reads a written target's agent-control entry at the top of the details.
    control = next((t.details()[AGENT_CONTROL] for _, t in planned if AGENT_CONTROL in t.details()), None)
    if control is not None:
        details[AGENT_CONTROL] = control
    return details


class ApplyPatchTool(Tool):
    name = "apply_patch"
    description = (
        "Apply a patch that adds, updates, moves and deletes workspace files, all or nothing. Format:\n"
        "*** Begin Patch\n*** Add File: path\n+line\n*** Update File: path\n*** Move to: new/path (optional)\n"
        "@@ optional line to find first\n context line\n-removed line\n+added line\n*** Delete File: path\n"
        "*** End Patch\n"
        "Paths are workspace-relative; an added or moved file's missing directories are created. Each hunk gives "
        "about 3 lines of unchanged context around its changes. Returns each file's new sha256."
    )
    risk = ToolRisk.FILESYSTEM
    input_schema = {
        "type": "object",
        "properties": {
            "patch": {"type": "string", "minLength": 1, "maxLength": MAX_PATCH_CHARS,
                      "description": "The patch text, from '*** Begin Patch' to '*** End Patch'."},
        },
        "required": ["patch"],
        "additionalProperties": False,
    }
    output_schema = APPLY_PATCH_OUTPUT_SCHEMA
    starts_processes = False  # may be served by a long-lived worker

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Prepared:
        """Rated by every file it touches, where each resolves; shown with every file's action and resolved
        target (``files``; a move's destination under ``move_to``) and the patch itself (head and tail when
        long). A patch that does not parse, or a file that cannot be touched, fails here."""
        ops, planned = _plan(args, session)
        notes = [note for _, target in planned if (note := risk_note(target))]
        reason = (f"changes {len(ops)} file{'s' if len(ops) != 1 else ''} inside the workspace"
                  + (f" ({'; '.join(notes)})" if notes else ""))
        shown = ", ".join(f"{_action(op)} {op.path.text!r}" + (f" to {op.move_to.text!r}" if op.move_to else "")
                          for op in ops[:10])
        summary = f"apply a patch: {shown}" + (f" and {len(ops) - 10} more" if len(ops) > 10 else "")
        return Prepared(ToolRisk.FILESYSTEM, reason, summary, _details(args, ops, planned))

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        ops = _ops(args)
        approved = ctx.approved.get("files")
        if not isinstance(approved, list) or len(approved) != len(ops):
            raise ToolError(ErrorCode.CHANGED_SINCE_APPROVAL, "the call does not carry the approved files of its "
                            "patch; nothing was done", {"rule": "approved_details"})
        resolver = session_resolver(ctx.session)
        changes: list[fs.Change] = []
        results: list[dict[str, Any]] = []
        fuzzy = 0
        with fs.workspace_root(ctx.session) as root:
            for op, granted in zip(ops, approved, strict=True):
                if not isinstance(granted, Mapping):
                    raise ToolError(ErrorCode.CHANGED_SINCE_APPROVAL, "malformed approved files; nothing was done",
                                    {"rule": "approved_details"})
                source = approved_expectation(granted, op.path, "create" if op.action == "add" else "replace", root)
                data: bytes | None = None
                if op.action == "add":
                    data = op.content.encode("utf-8")
                    changes.append(fs.Change(op.path, data, True, source, None))
                else:
                    window = _read_whole(root, op.path, resolver, source.file)
                    if op.action == "update":
                        updated = apply_hunks(decode_utf8(window.data, f"path {op.path.shown}"), op.hunks,
                                              op.path.normalized)
                        fuzzy += updated.fuzzy_hunks
                        data = updated.text.encode("utf-8")
                    if op.move_to is not None:
                        moved = granted.get("move_to")
                        destination = approved_expectation(moved if isinstance(moved, Mapping) else {}, op.move_to,
                                                           "create", root)
                        changes.append(fs.Change(op.move_to, data, True, destination, None))
                        changes.append(fs.Change(op.path, None, False, source, window.sha256))
                    else:
                        changes.append(fs.Change(op.path, data, False, source, window.sha256))
                results.append({"path": op.path.normalized, "action": _action(op),
                                "move_to": None if op.move_to is None else op.move_to.normalized,
                                "sha256": None if data is None else hashlib.sha256(data).hexdigest()})
            made: list[str] = []
            fs.apply_changes(root, changes, resolver, made=made)
        return {"files": results, "fuzzy_hunks": fuzzy, **({"created_directories": made} if made else {})}


def _read_whole(root: int, path: WorkspacePath, resolver: fs.Resolver, expected: fs.FileId | None) -> fs.Window:
    window = fs.read_whole(root, path, resolver, expected=expected, max_bytes=EDIT_MAX_FILE_BYTES)
    if window is None:
        raise ToolError(ErrorCode.TOO_LARGE, f"path {path.shown} is larger than {EDIT_MAX_FILE_BYTES} bytes, the "
                        "most apply_patch holds in memory", {"limit": EDIT_MAX_FILE_BYTES})
    return window
