"""The session's checkpoints around its calls and jobs: which calls are checkpointed, and which ran
beside which.

Promises:

* a call of a tool that can change the workspace (any risk but ``read_only``; the job tools, served
  here, aside) gets a checkpoint before it runs and its ``changes`` after
  (:class:`peon.checkpoints.book.Book`, its store in the session's state directory): in its result,
  beside the value or error (a tool's value keeps its schema), and in the audit's ``result`` line;
  a background job begins at its call's checkpoint and gets its own ``after`` when it ends, so what
  it writes after its call was answered is the job's;
* changes made while other calls or jobs ran are never attributed by guess: the record names every
  call and job whose run overlapped (``shared_with``), and such a snapshot is checked for files that
  changed while it was taken (``unsettled``);
* it answers the ``changes`` and ``rewind`` tools (``ToolContext.checkpoints``) from the session's own
  store, in a thread (:class:`peon.checkpoints.review.Review`): a rewind checkpoints the workspace
  first, like ``peon rewind``;
* the first snapshot (the one that stores every file) starts as the session opens, in a thread of its
  own; the snapshots run in a thread, one at a time, bounded by ``checkpoints.max_seconds``; a failure is
  reported as ``not_checkpointed`` and never fails the call; with ``checkpoints.enabled`` false (or no
  git) nothing is recorded and results carry no ``changes``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peon.checkpoints.book import Book
from peon.checkpoints.gitstore import StoreError
from peon.checkpoints.review import Review, ReviewError
from peon.core.config_view import CheckpointsView
from peon.core.errors import ErrorCode, ToolError
from peon.core.threads import helper_thread
from peon.core.tool import Tool, ToolRisk


@dataclass
class Mark:
    """One call's or job's checkpoint while it runs: its tree before and who ran beside it."""

    ident: str
    before: str | None
    beside: set[str] = field(default_factory=set)


class Checkpointing:
    def __init__(self, book: Book | None):
        self.book = book
        self.active: dict[str, Mark] = {}
        self.jobs: dict[str, Mark] = {}

    @classmethod
    def open(cls, config: CheckpointsView, state_dir: Path, workspace: Path) -> Checkpointing:
        if not config.enabled:
            return cls(None)
        try:
            book = Book(state_dir, workspace, exclude=config.exclude, max_file_bytes=config.max_file_bytes,
                        max_store_bytes=config.max_store_bytes, max_seconds=config.max_seconds, watch=True)
        except (StoreError, ValueError) as exc:
            print(f"peon: checkpoints are off for this session: {exc}", file=sys.stderr)
            return cls(None)
        helper_thread(book.prime, name="peon-checkpoint-prime").start()
        return cls(book)

    def wants(self, tool: Tool) -> bool:
        return self.book is not None and tool.risk != ToolRisk.READ_ONLY and not tool.served_by_supervisor

    def _join(self, mark: Mark) -> None:
        for other in self.active.values():
            other.beside.add(mark.ident)
            mark.beside.add(other.ident)
        self.active[mark.ident] = mark

    async def begin(self, ident: str, tool: str) -> Mark:
        assert self.book is not None
        mark = Mark(ident, None)
        beside = bool(self.active)
        self._join(mark)  # from now: whatever starts meanwhile ran beside it
        mark.before = await asyncio.to_thread(self.book.begin, ident, tool, check_settled=beside)
        return mark

    async def end(self, mark: Mark) -> dict[str, Any]:
        assert self.book is not None
        self.active.pop(mark.ident, None)
        beside = sorted(mark.beside)
        return await asyncio.to_thread(self.book.end, mark.ident, mark.before, shared_with=beside,
                                       check_settled=bool(self.active))

    def job_began(self, job_id: str, call_id: str, tool: str, mark: Mark) -> None:
        """A background job, started by the call ``mark`` checkpoints, runs on after its call's answer."""
        assert self.book is not None
        job = Mark(job_id, mark.before)
        self._join(job)
        job.beside |= {call_id}
        self.jobs[job_id] = job
        self.book.adopt(job_id, mark.before, tool, kind="job", call_id=call_id)

    async def job_ended(self, job_id: str) -> dict[str, Any] | None:
        mark = self.jobs.pop(job_id, None)
        if mark is None or self.book is None:
            return None
        return await self.end(mark)

    async def around(self, tool: Tool, call_id: str,
                     running: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """Run the call (``running()`` starts it, its time starting then) between its checkpoint and its
        changes; its reply, with them."""
        if not self.wants(tool):
            return await running()
        try:
            mark = await self.begin(call_id, tool.name)
            reply = await running()
        except BaseException:
            self.active.pop(call_id, None)  # torn down: its end is not recorded (a reader compares with now)
            raise
        value = reply.get("value")
        if reply.get("ok") and isinstance(value, dict) and value.get("background") and value.get("state") == "running":
            self.job_began(str(value.get("job_id")), call_id, tool.name, mark)
        changes = await self.end(mark)
        return with_changes(reply, changes)

    # -- what the changes and rewind tools ask (ToolContext.checkpoints) ----------------------------------

    def _review(self) -> Review:
        if self.book is None:
            raise ToolError(ErrorCode.NOT_FOUND, "this session keeps no checkpoints (checkpoints.enabled is false, "
                            "or git is missing)")
        try:
            return Review(self.book.directory.parent, self.book.workspace)
        except ReviewError as exc:
            raise ToolError(ErrorCode.NOT_FOUND, str(exc)) from None

    async def changes(self, call_id: str | None, since: str | None, diff: bool) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            review = self._review()
            if call_id is None and since is None:
                return review.listing()
            return review.changes(call_id, since=since, diff=diff)

        return await self._asked(read)

    async def rewind(self, call_id: str) -> dict[str, Any]:
        return await self._asked(lambda: self._review().rewind(call_id))

    async def _asked(self, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        try:
            return await asyncio.to_thread(work)
        except ReviewError as exc:
            raise ToolError(ErrorCode.NOT_FOUND, str(exc)) from None


def with_changes(reply: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``reply`` carrying ``changes`` beside its value or error (a tool's value keeps its own schema)."""
    return {**reply, "changes": changes}
