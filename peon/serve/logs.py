"""Logs of ``peon serve`` on stderr: readable lines, or one JSON object per line (``--log-format json``).

Promise: every record is one line; in JSON mode it is an object with ``ts`` (RFC 3339, UTC), ``level``,
``logger``, ``message`` and the record's structured fields (``extra={"fields": {...}}``), so a log
pipeline can index requests by ``status``, ``mcp_method``, ``tool``, ``outcome`` without parsing text.
Values that JSON cannot carry are written with ``repr``. Bearer tokens are never passed to a logger.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Literal

LogFormat = Literal["text", "json"]


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=repr)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = f"peon serve: {record.getMessage()}"
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields:
            text += " " + " ".join(f"{k}={v}" for k, v in fields.items() if v is not None)
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def configure(fmt: LogFormat, level: int = logging.INFO) -> None:
    """Send Peon's and uvicorn's records to stderr in the chosen format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    for name in ("peon", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level)
        logger.propagate = False
    logging.getLogger("uvicorn.access").disabled = True  # requests are logged once, with their MCP fields
