"""The asyncio flavour of the embedding API.

Promise: :meth:`AsyncSession.call` never blocks the event loop. Cancelling the task that awaits it
cancels the call in the supervisor (TERM → 2 s → KILL for processes) and the ``CancelledError``
propagates only after the call has finished, so when the task is done nothing the call started is
alive.
"""

from __future__ import annotations

import asyncio
from typing import Any

from peon.client.result import ToolResult
from peon.client.session import ProgressCallback, Session


class AsyncSession:
    def __init__(self, workspace: Any, config: Any = None, **options: Any):
        self._args = (workspace, config)
        self._options = options
        self.session: Session | None = None

    async def start(self) -> AsyncSession:
        self.session = await asyncio.to_thread(Session, *self._args, **self._options)
        return self

    async def __aenter__(self) -> AsyncSession:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self.session is not None:
            await asyncio.to_thread(self.session.close)

    def tools(self) -> list[dict[str, Any]]:
        assert self.session is not None, "start the session first"
        return self.session.tools()

    async def call(self, name: str, args: Any, *, on_progress: ProgressCallback | None = None) -> ToolResult:
        assert self.session is not None, "start the session first"
        loop = asyncio.get_running_loop()
        progress: ProgressCallback | None = None
        if on_progress is not None:
            callback = on_progress

            def progress(update: dict[str, Any]) -> None:
                loop.call_soon_threadsafe(callback, update)

        handle = self.session.submit(name, args, on_progress=progress)
        done: asyncio.Future[ToolResult] = loop.create_future()

        def settle(result: ToolResult) -> None:
            if not done.done():
                done.set_result(result)

        def resolve(result: ToolResult) -> None:
            loop.call_soon_threadsafe(settle, result)

        handle.add_done_callback(resolve)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            handle.cancel()
            await asyncio.shield(done)  # the call's processes are gone when this returns
            raise
