"""Progress notifications for a running call, sans I/O.

Promise: the ``progress`` values sent for one request only grow — it is the call's elapsed time in
milliseconds, and an update that would not move it forward is dropped instead of being sent out of
order. An update without a usable elapsed time sends nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def progress_notification(token: Any, update: Mapping[str, Any],
                          last: float | None) -> tuple[dict[str, Any], float] | None:
    """A progress notification for a process update and its ``progress``, or ``None`` when it would not
    increase ``progress`` beyond ``last``."""
    elapsed = update.get("elapsed_ms")
    if not isinstance(elapsed, (int, float)) or isinstance(elapsed, bool):
        return None
    progress = float(elapsed)
    if last is not None and progress <= last:
        return None
    parts = [f"running for {progress / 1000:.1f} s"]
    output = update.get("output_bytes")
    if isinstance(output, int) and not isinstance(output, bool):
        parts.append(f"{output} bytes of output so far")
    params = {"progressToken": token, "progress": progress, "message": ", ".join(parts)}
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}, progress
