"""What Peon's MCP servers tell the model in ``initialize`` (``instructions``), pure.

Promise: :func:`server_instructions` says what every call goes through and, from the session's actual
sandbox status, what the OS sandbox does for commands (:func:`peon.core.sandbox_words.session_sandbox_sentence`)
— never a fixed claim. ``peon serve`` answers only once its session is up, so it tells the real status;
``peon mcp`` answers ``initialize`` before its session has started, so it says where each result tells it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from peon.core.sandbox_words import session_sandbox_sentence


def server_instructions(workspace: str, sandbox: Mapping[str, Any] | None) -> str:
    return (f"Peon runs these tools in the workspace {workspace}. Every call is validated, risk-rated and approved, "
            "runs in its own worker with bounded time and output, and everything it started is killed when it "
            f"ends. {session_sandbox_sentence(sandbox)}")
