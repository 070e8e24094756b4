"""Progress notifications for a running call, sans I/O.

Promise: the ``progress`` values sent for one request only grow — it is the call's elapsed time in
milliseconds, and an update that would not move it forward is dropped instead of being sent out of
order. An update without a usable elapsed time sends nothing. The message names the elapsed time and
the output so far and then, one per line, the newest output lines the worker reported (already cleaned
of escape sequences), bounded here again: at most :data:`MAX_LINES` lines of at most
:data:`MAX_LINE_CHARS` characters, so a notification stays small whatever the update holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_LINES = 10
MAX_LINE_CHARS = 400


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
    message = ", ".join(parts)
    lines = update.get("lines")
    if isinstance(lines, list):
        shown = [line[:MAX_LINE_CHARS] for line in lines[-MAX_LINES:] if isinstance(line, str)]
        if shown:
            message += "\n" + "\n".join(shown)
    params = {"progressToken": token, "progress": progress, "message": message}
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}, progress
