"""``read``: return a byte range of a workspace file as text. Risk: read_only, or filesystem for
secret-like paths.

Promise: the path is resolved beneath the workspace (symlinks that leave are refused); anything that is
not a regular file is refused before a byte is read; only the selected range is read (``pread``), so a
slice of a huge file costs what the slice costs. The selected range is returned exactly, as UTF-8, or
the call fails with ``not_utf8`` naming the offset of the offending byte.

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
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from peon.userdir import user_peon_dir
from peon.errors import ConfigError, ErrorCode, ToolError
from peon.paths import SecretMatch, SecretPattern, WorkspacePath, classify_secret, parse_file_path, parse_secret_patterns
from peon.statefile import RefusedFile, read_regular_file
from peon.tool import RiskAssessment, SessionView, Tool, ToolContext, ToolRisk
from peon.truncation import utf8_prefix_end
from workers import fs

MAX_BYTE_VALUE = 2**63 - 1  # off_t
CONTEXT_BYTES = 3  # bytes read on each side of the range to explain a cut character
SECRET_PATTERNS_FILE = "secret_paths.txt"
MAX_SECRET_PATTERNS_BYTES = 1 << 20

# -- the secret-like path list: the shipped file, then the user's ---------------------------------------


@cache
def shipped_secret_patterns() -> tuple[SecretPattern, ...]:
    text = resources.files("peon._config").joinpath(SECRET_PATTERNS_FILE).read_text(encoding="utf-8")
    return parse_secret_patterns(text, f"config/{SECRET_PATTERNS_FILE}")


def user_secret_patterns_file(env: Mapping[str, str]) -> Path | None:
    directory = user_peon_dir(env)
    return directory / SECRET_PATTERNS_FILE if directory else None


_user_cache: dict[str, tuple[tuple[int, int, int], tuple[SecretPattern, ...]]] = {}


def secret_patterns(env: Mapping[str, str]) -> tuple[SecretPattern, ...]:
    """The shipped patterns followed by the user's (re-read when that file changes)."""
    path = user_secret_patterns_file(env)
    if path is None:
        return shipped_secret_patterns()
    try:
        st = path.stat()
    except FileNotFoundError:
        return shipped_secret_patterns()
    except OSError as exc:
        raise ConfigError(f"secret path list {path} cannot be read: {exc.strerror}", {"file": str(path)}) from None
    key = (st.st_mtime_ns, st.st_size, st.st_ino)
    cached = _user_cache.get(str(path))
    if cached is None or cached[0] != key:
        try:  # never opened unless a regular file: a FIFO here must not block the supervisor
            text = read_regular_file(path, max_bytes=MAX_SECRET_PATTERNS_BYTES, follow_symlinks=True).decode("utf-8")
        except RefusedFile as exc:
            raise ConfigError(f"secret path list {exc}", {"file": str(path)}) from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"secret path list {path} is not UTF-8 (byte offset {exc.start})",
                              {"file": str(path)}) from None
        except OSError as exc:
            raise ConfigError(f"secret path list {path} cannot be read: {exc.strerror}", {"file": str(path)}) from None
        cached = (key, parse_secret_patterns(text, str(path)))
        _user_cache[str(path)] = cached
    return shipped_secret_patterns() + cached[1]


def secret_match(path: WorkspacePath, session: SessionView) -> SecretMatch | None:
    return classify_secret(path.parts, secret_patterns(session.env))


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
    },
    "required": ["path", "content", "offset", "bytes", "total_bytes", "truncated", "truncated_by", "next_offset"],
}


class ReadTool(Tool):
    name = "read"
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

    def assess_risk(self, args: Mapping[str, Any], session: SessionView) -> RiskAssessment:
        path = parse_file_path(args["path"])
        match = secret_match(path, session)
        if match is not None:
            return RiskAssessment(ToolRisk.FILESYSTEM, match.reason())
        return RiskAssessment(ToolRisk.READ_ONLY, "reads a file inside the workspace")

    def approval_summary(self, args: Mapping[str, Any]) -> str:
        where = f"from byte {int(args.get('offset', 0))}"
        if args.get("limit") is not None:
            where += f", at most {int(args['limit'])} bytes"
        return f"read {args.get('path')!r} ({where})"

    async def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        path = parse_file_path(args["path"])
        offset = int(args.get("offset", 0))
        limit = None if args.get("limit") is None else int(args["limit"])
        resolver = fs.choose_resolver(ctx.session.env.get(fs.RESOLVER_ENV))
        return read_file(ctx.workspace, path, offset, limit, ctx.limits.read_max_bytes, resolver,
                         ctx.session.root_fd)


def read_file(workspace: Path, path: WorkspacePath, offset: int, limit: int | None, max_bytes: int,
              resolver: fs.Resolver, root_fd: int = -1) -> dict[str, Any]:
    chosen: list[Range] = []

    def select(total: int) -> tuple[int, int]:
        rng = select_range(path, total, offset, limit, max_bytes)
        chosen.append(rng)
        return max(0, rng.start - CONTEXT_BYTES), min(total, rng.end + CONTEXT_BYTES)

    root = os.dup(root_fd) if root_fd >= 0 else fs.open_root(workspace)  # the pinned root, when there is one
    try:
        window = fs.read_window(root, path, resolver, select)
    finally:
        os.close(root)
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
    }
