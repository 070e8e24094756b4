"""``rewind``: put the workspace back as it was just before a call of this session. Risk: filesystem.

Promises:

* approved like a write of every file it restores: ``prepare`` reads the session's checkpoints, resolves
  every path the rewind would write or remove beneath the workspace root and rates each as ``write``
  rates it (:func:`peon.tools.shared.restore.rate_restore`: an agent-control path is asked whatever
  ``approval.filesystem`` says, a secret-like one is named in the risk reason, a path that resolves out
  of the workspace fails the call before anyone is asked); the approver is shown the paths (up to
  :data:`SHOWN_PATHS`, with the count and a digest of them all) and the rated ones, and the executor
  rates them again and refuses to run when what it would restore is no longer what was approved;
* served by the supervisor (``ctx.checkpoints``): the workspace is checkpointed first, so the rewind
  can itself be rewound (its id is in the result); the stored files are restored byte for byte, those
  added since removed, excluded trees, files too large to store and the workspace's ``.git`` left
  alone; nothing is written outside the workspace (:mod:`peon.checkpoints.review`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, ClassVar

from peon.core.errors import ErrorCode, ToolError
from peon.core.tool import Prepared, SessionView, Tool, ToolContext, ToolRisk
from peon.workers import fs

from peon.tools.changes import CALL_ID_PROPERTY
from peon.tools.shared.restore import RestoreRating, paths_digest, rate_restore

SHOWN_PATHS = 200


class RewindTool(Tool):
    name = "rewind"
    description = ("Undo calls: put the workspace back as it was just before call_id (files restored byte for byte, "
                   "files added since removed; .git untouched). The rewind is itself checkpointed and can be undone.")
    risk = ToolRisk.FILESYSTEM
    served_by_supervisor = True
    input_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object", "properties": {"call_id": CALL_ID_PROPERTY}, "required": ["call_id"],
        "additionalProperties": False,
    }
    output_schema: ClassVar[Mapping[str, Any] | None] = {"type": "object"}

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Prepared:
        paths, why = restored_paths(session, str(args["call_id"]))
        rating = rated(session, paths)
        count = f"{len(paths)} file{'s' if len(paths) != 1 else ''}"
        summary = (f"rewind the workspace to just before call {args['call_id']}: write or remove {count}"
                   if why is None else f"rewind the workspace to just before call {args['call_id']} ({why})")
        note = rating.note()
        reason = f"writes or removes {count} inside the workspace" + (f" ({note})" if note else "")
        return Prepared(self.risk, reason, summary,
                        {"call_id": args["call_id"], "paths": paths[:SHOWN_PATHS], "path_count": len(paths),
                         "paths_sha256": paths_digest(paths), **rating.details()},
                        timeout_seconds=120.0)

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        paths, _why = await asyncio.to_thread(restored_paths, ctx.session, str(args["call_id"]))
        await asyncio.to_thread(rated, ctx.session, paths)  # a path that now resolves out of the workspace: refused
        if (ctx.approved.get("paths_sha256") != paths_digest(paths)
                or len(paths) != ctx.approved.get("path_count")):
            raise ToolError(ErrorCode.STALE, "the files this rewind would restore changed since it was approved; "
                            "ask again", {"call_id": args["call_id"]})
        result: dict[str, Any] = await ctx.checkpoints.rewind(str(args["call_id"]))
        return result


def rated(session: SessionView, paths: list[str]) -> RestoreRating:
    """``paths`` resolved beneath the session's pinned root and rated as writes of each."""
    with fs.workspace_root(session) as root:
        return rate_restore(root, paths, session.env, session.config.sandbox.protected)


def restored_paths(session: SessionView, call_id: str) -> tuple[list[str], str | None]:
    """Every path a rewind to before ``call_id`` would write or remove (a rename: both), or why they
    cannot be known."""
    if session.spill_dir is None:
        return [], "this session keeps no checkpoints"
    from peon.checkpoints.review import Review, ReviewError

    try:
        bound = float(session.config.checkpoints.max_seconds)  # prepare runs on the supervisor's loop
        return Review(session.spill_dir, session.workspace, max_seconds=bound).restored_paths(call_id), None
    except (ReviewError, OSError) as exc:
        return [], str(exc)
