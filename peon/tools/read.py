"""``read``: return a byte range of a workspace file as text. Risk: read_only, or filesystem for
secret-like paths (typed or resolved).

Promise: the path is resolved beneath the workspace (symlinks that leave are refused), rated and
approved by where it resolves, and the worker reads only the file that was approved (else
``changed_since_approval``, see :mod:`peon.tools.shared.target`); anything that is not a regular file is
refused before a byte is read. A file of at most :data:`SHA256_MAX_FILE_BYTES` is read once, whole, in
bounded chunks, and ``sha256`` is the hash of exactly those reads; a larger file is read only in the
selected range (``pread``), so a slice of a huge file costs what the slice costs, and ``sha256`` is
null. The selected range is returned exactly, as UTF-8, or the call fails with ``not_utf8`` naming
the offset of the offending byte.

Range rules (byte offsets):

* ``offset`` (default 0) may equal the file size (empty content, an end-of-file probe); larger is an
  ``invalid_input`` error naming the size. Negative values are refused by the schema.
* ``limit`` (default: up to the end of the file) is clamped to ``limits.read_max_bytes``. When the
  configured maximum (not the caller's ``limit``) cuts the range, the cut moves back to the previous
  character boundary so the result stays valid text. A ``limit`` the caller chose that ends inside a
  multi-byte character, like an ``offset`` that starts inside one, is a ``not_utf8`` error.
* ``truncated`` is true exactly when the returned range ends before the end of the file;
  ``truncated_by`` says why (``"limit"``: the caller's limit, ``"read_max_bytes"``: the configured
  maximum) and ``next_offset`` is where the next read should start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

from peon.core.errors import ErrorCode, ToolError
from peon.core.paths import WorkspacePath, parse_file_path
from peon.core.tool import Prepared, SessionView, Tool, ToolContext, ToolRisk
from peon.core.output.truncation import utf8_prefix_end
from peon.workers import fs

from peon.tools.shared.resolver import session_resolver
from peon.tools.shared.target import Target, approved_expectation, resolve_for, resolve_target

MAX_BYTE_VALUE = 2**63 - 1  # off_t
CONTEXT_BYTES = 3  # bytes read on each side of the range to explain a cut character
# Files up to this size are hashed whole (read once, in bounded chunks); larger ones are read only in
# the range and get sha256 null: hashing costs about 1 ms per MiB (docs/files.md).
SHA256_MAX_FILE_BYTES = 16 << 20

# -- range selection and UTF-8 checks (pure) --------------------------------------------------------------


@dataclass(frozen=True)
class Range:
    start: int
    end: int  # exclusive
    total: int
    cut_by_max: bool  # the configured maximum, not the caller's limit, ended the range early


def select_range(path: WorkspacePath, total: int, offset: int, limit: int | None, max_bytes: int) -> Range:
    if offset > total:
        raise ToolError(
            ErrorCode.INVALID_INPUT,
            f"offset {offset} is beyond the end of {path.shown}, which has {total} bytes "
            f"(the largest valid offset is {total})",
            {"rule": "offset", "offset": offset, "total_bytes": total},
        )
    requested_end = total if limit is None else min(total, offset + limit)
    end = min(requested_end, offset + max_bytes)
    return Range(offset, end, total, end < requested_end)


def _width(lead: int) -> int:
    return 2 if 0xC0 <= lead < 0xE0 else 3 if 0xE0 <= lead < 0xF0 else 4 if 0xF0 <= lead < 0xF8 else 1


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte < 0xC0


def _utf8_error(path: WorkspacePath, exc: UnicodeDecodeError, window: bytes, base: int, rng: Range,
                end: int) -> ToolError:
    payload_at = rng.start - base
    pos = rng.start + exc.start
    byte = window[payload_at + exc.start]
    shown = path.shown
    if exc.start == 0 and _is_continuation(byte) and rng.start > 0:
        # Does a character that starts before the range cover its first byte?
        i = payload_at - 1
        while i >= 0 and payload_at - i <= 3 and _is_continuation(window[i]):
            i -= 1
        if i >= 0 and payload_at - i <= 3 and _width(window[i]) > payload_at - i:
            lead, width = base + i, _width(window[i])
            return ToolError(
                ErrorCode.NOT_UTF8,
                f"the range of {shown} starts inside a multi-byte UTF-8 character: offset {rng.start} is byte "
                f"{rng.start - lead + 1} of the {width}-byte character at offset {lead}; "
                f"start at offset {lead} or {lead + width} instead",
                {"offset": rng.start, "reason": "starts_inside_character", "character_offset": lead},
            )
    if exc.reason == "unexpected end of data" and rng.start + exc.end == end:
        width = _width(byte)
        if end == rng.total:
            return ToolError(
                ErrorCode.NOT_UTF8,
                f"{shown} ends with an incomplete {width}-byte UTF-8 character at offset {pos}",
                {"offset": pos, "reason": "incomplete_at_end_of_file"},
            )
        after = window[end - base:]
        missing = pos + width - end
        if len(after) >= missing and all(_is_continuation(b) for b in after[:missing]):
            return ToolError(
                ErrorCode.NOT_UTF8,
                f"the range of {shown} ends inside a multi-byte UTF-8 character: the range ends at offset {end} "
                f"but the {width}-byte character at offset {pos} ends at offset {pos + width}; "
                f"use limit {pos - rng.start} or {pos + width - rng.start} instead",
                {"offset": end, "reason": "ends_inside_character", "character_offset": pos},
            )
    return ToolError(
        ErrorCode.NOT_UTF8,
        f"{shown} is not valid UTF-8 at offset {pos}: byte 0x{byte:02x} ({exc.reason})",
        {"offset": pos, "reason": "invalid_byte", "byte": byte},
    )


def decode_range(path: WorkspacePath, window: fs.Window, rng: Range) -> tuple[str, int, int]:
    """(text, end, total) of the range inside ``window``, which holds a few bytes of context around it."""
    data, base = window.data, window.start
    end, total = rng.end, rng.total
    if base + len(data) < end:  # the file shrank since fstat: its end is where the data stops
        end = total = base + len(data)
    payload_at = rng.start - base
    if rng.cut_by_max:
        keep = utf8_prefix_end(data[payload_at:], end - rng.start)
        if keep == 0 and end > rng.start:
            raise ToolError(
                ErrorCode.TOO_LARGE,
                f"the character at offset {rng.start} of {path.shown} is longer than limits.read_max_bytes",
                {"offset": rng.start},
            )
        end = rng.start + keep
    try:
        text = data[payload_at: end - base].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _utf8_error(path, exc, data, base, rng, end) from None
    return text, end, total


# -- the tool ---------------------------------------------------------------------------------------------

READ_OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "The normalized workspace-relative path that was read."},
        "content": {"type": "string", "description": "The selected bytes, decoded as UTF-8."},
        "offset": {"type": "integer", "minimum": 0},
        "bytes": {"type": "integer", "minimum": 0, "description": "Length of the content in bytes."},
        "total_bytes": {"type": "integer", "minimum": 0, "description": "Size of the whole file."},
        "truncated": {"type": "boolean",
                      "description": "True exactly when the returned range ends before the end of the file."},
        "truncated_by": {"enum": [None, "limit", "read_max_bytes"],
                         "description": "What ended the range early: the caller's limit or the configured maximum."},
        "next_offset": {"type": ["integer", "null"], "description": "Where the rest begins, when truncated."},
        "sha256": {"type": ["string", "null"],
                   "description": "SHA-256 (lower-case hex) of the whole file as read by this call; pass it as "
                                  "write's expected_sha256. Null for files over 16 MiB, which are not hashed."},
    },
    "required": ["path", "content", "offset", "bytes", "total_bytes", "truncated", "truncated_by", "next_offset",
                 "sha256"],
}


class ReadTool(Tool):
    name = "read"
    starts_processes = False
    description = (
        "Read a byte range of a file in the workspace as UTF-8 text. Returns the content, the file's total "
        "size and whether the range ended before the end of the file (then next_offset says where to "
        "continue). The range is at most the configured read maximum; offset and limit are in bytes."
    )
    risk = ToolRisk.READ_ONLY
    input_schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Workspace-relative path of a regular file."},
            "offset": {"type": "integer", "minimum": 0, "maximum": MAX_BYTE_VALUE,
                       "description": "First byte to return (default 0); at most the file size."},
            "limit": {"type": "integer", "minimum": 0, "maximum": MAX_BYTE_VALUE,
                      "description": "Most bytes to return (default: to the end of the file); "
                                     "larger than the configured maximum is clamped to it."},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    output_schema = READ_OUTPUT_SCHEMA

    def prepare(self, args: Mapping[str, Any], session: SessionView) -> Prepared:
        """Rated by where the path resolves (filesystem risk for a secret-like path, typed or resolved),
        and shown with that resolution."""
        target = resolve_target(parse_file_path(args["path"]), "read", session)
        where = f"from byte {int(args.get('offset', 0))}"
        if args.get("limit") is not None:
            where += f", at most {int(args['limit'])} bytes"
        summary = f"read {args.get('path')!r} ({where})"
        secret = target.secret_reason()
        if secret is not None:
            risk, reason = ToolRisk.FILESYSTEM, secret
        else:
            redirected = target.where()
            risk, reason = ToolRisk.READ_ONLY, "reads a file inside the workspace" + (f" ({redirected})" if redirected
                                                                                     else "")
        return Prepared(risk, reason, summary, target.details())

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        with fs.workspace_root(ctx.session) as root:
            return _read_approved(root, args, ctx.approved, ctx)

    async def warm_up(self, ctx: ToolContext, *, processes: bool) -> None:
        """Read the start of this module's own file, beneath its own directory, as a call reads: approved
        by the resolution the supervisor makes, that resolution insisted on, then read — the whole read
        path, outside the workspace. Without the approval check it left 34 page faults (and 0.2 ms) to
        every apart ``read``'s first resolution in a fresh worker."""
        here = os.path.dirname(os.path.abspath(__file__))
        root = os.open(here, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            path = parse_file_path(os.path.basename(__file__))
            approved = Target(path, resolve_for(root, path, "read"), None, False).details()
            _read_approved(root, {"path": path.text, "limit": 256}, approved, ctx)
        finally:
            os.close(root)


def _read_approved(root: int, args: Mapping[str, Any], approved: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """The worker's side of a call: insist on the approved resolution of ``args["path"]``, then read it."""
    path = parse_file_path(args["path"])
    limit = None if args.get("limit") is None else int(args["limit"])
    expected = approved_expectation(approved, path, "read", root)
    return read_file(root, path, int(args.get("offset", 0)), limit, ctx.limits.read_max_bytes,
                     session_resolver(ctx.session), expected=expected.file)


def read_file(root: int, path: WorkspacePath, offset: int, limit: int | None, max_bytes: int,
              resolver: fs.Resolver, *, expected: fs.FileId | None = None,
              hash_max_bytes: int = SHA256_MAX_FILE_BYTES) -> dict[str, Any]:
    """Read the range of ``path`` beneath ``root`` (with ``expected``: only if it opens that file)."""
    chosen: list[Range] = []

    def select(total: int) -> tuple[int, int]:
        rng = select_range(path, total, offset, limit, max_bytes)
        chosen.append(rng)
        return max(0, rng.start - CONTEXT_BYTES), min(total, rng.end + CONTEXT_BYTES)

    window = fs.read_window(root, path, resolver, select, expected=expected, hash_max_bytes=hash_max_bytes)
    rng = chosen[0]
    text, end, total = decode_range(path, window, rng)
    truncated = end < total
    return {
        "path": path.normalized,
        "content": text,
        "offset": rng.start,
        "bytes": end - rng.start,
        "total_bytes": total,
        "truncated": truncated,
        "truncated_by": ("read_max_bytes" if rng.cut_by_max else "limit") if truncated else None,
        "next_offset": end if truncated else None,
        "sha256": window.sha256,
    }
