"""``peon call``: one tool call, its result printed for a person or as JSON.

Promises:

* ``peon call`` exits 0 when the call succeeded and 1 when it failed; it prints the result as JSON when
  stdout is not a terminal or with ``--json``, and for a person on a terminal the output followed by
  one status line (exit status, duration, truncation) — :func:`render_result`, pure; it names no job,
  since a one-shot call's jobs and their retained output end with its session;
* when a person is at the terminal (stdin or stderr is one, and there is a controlling terminal) the
  approval prompt is asked on ``/dev/tty``, also when stdout is piped (``peon call ... | jq``); it
  offers only "allow once" and "deny", since the session ends with the call;
* Ctrl-C while the session starts stops ``peon call`` cleanly (exit 130, no traceback, nothing left
  running) once the session is up; a second Ctrl-C does not wait; Ctrl-C while the call runs cancels
  it and still reports it;
* input that is not JSON is a :class:`~peon.cli.common.UsageError`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import types
from typing import Any
from collections.abc import Callable, Mapping

from peon.cli.common import UsageError, one_shot, open_session


def has_controlling_terminal() -> bool:
    try:
        os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC))
    except OSError:
        return False
    return True


def terminal_approver() -> Callable[[dict[str, Any]], Any] | None:
    """The interactive approver when a person is at the terminal — stdin or stderr is one, whatever
    stdout is (it may be piped to jq) — and there is a controlling terminal to ask on; otherwise none
    (the policy decides, and "ask" means deny)."""
    if not (sys.stdin.isatty() or sys.stderr.isatty()) or not has_controlling_terminal():
        return None
    from peon.approvers import TerminalApprover

    return TerminalApprover(offer_session=False)  # `peon call` ends its session with its one call


PROGRESS_LINE_CHARS = 60  # of the newest output line, after the elapsed time and the output size


class ProgressLine:
    """A live status line on a terminal's stderr while a call runs (updates come from a Peon thread)."""

    def __init__(self, tool: str, enabled: bool):
        self.tool = tool
        self.enabled = enabled
        self.shown = False
        self._lock = threading.Lock()

    def update(self, update: Mapping[str, Any]) -> None:
        elapsed = float(update.get("elapsed_ms", 0)) / 1000
        output = update.get("output_bytes")
        text = f"{self.tool}: running for {elapsed:.1f} s"
        if isinstance(output, int):
            text += f", {human_bytes(output)} of output"
        lines = update.get("lines")
        if isinstance(lines, list) and lines and isinstance(lines[-1], str):
            newest = "".join(ch for ch in lines[-1] if ch.isprintable())[:PROGRESS_LINE_CHARS]
            if newest.strip():
                text += f" · {newest}"
        with self._lock:
            if self.enabled:
                sys.stderr.write(f"\r\x1b[K{text}")
                sys.stderr.flush()
                self.shown = True

    def clear(self) -> None:
        """Erase the line; later updates are not shown."""
        with self._lock:
            self.enabled = False
            if self.shown:
                sys.stderr.write("\r\x1b[K")
                sys.stderr.flush()
                self.shown = False


def human_bytes(count: int) -> str:
    if count < 1024:
        return f"{count} bytes"
    if count < 1 << 20:
        return f"{count / 1024:.1f} KiB"
    return f"{count / (1 << 20):.1f} MiB"


def parse_arguments(text: str) -> Any:
    if text == "-":
        text = sys.stdin.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"the tool input is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}): "
                         f"{text[:80]!r}") from None


class DeferredInterrupt:
    """Hold a first Ctrl-C while a session starts, so the start completes and the session is closed
    cleanly instead of abandoning a supervisor half-way (which would then write to a closed channel)."""

    def __init__(self) -> None:
        self.interrupted = False
        self._previous: Any = None

    def __enter__(self) -> DeferredInterrupt:
        self._previous = signal.signal(signal.SIGINT, self._on_interrupt)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def _on_interrupt(self, signum: int, frame: types.FrameType | None) -> None:
        if self.interrupted:
            raise KeyboardInterrupt  # the second Ctrl-C does not wait
        self.interrupted = True
        sys.stderr.write("peon: interrupted; stopping as soon as the session has started (Ctrl-C again to "
                         "stop now)\n")
        sys.stderr.flush()


def cmd_call(options: argparse.Namespace) -> int:
    arguments = parse_arguments(options.input)
    as_json = options.json or not sys.stdout.isatty()
    progress = ProgressLine(options.tool, sys.stderr.isatty())
    with DeferredInterrupt() as starting:
        session = open_session(options, approver=terminal_approver())
    with one_shot(session, options):
        if starting.interrupted:
            return 130
        handle = session.submit(options.tool, arguments, on_progress=progress.update)
        interrupted = False
        try:
            result = handle.result()
        except KeyboardInterrupt:  # Ctrl-C cancels the call (TERM → 2 s → KILL) and still reports it
            interrupted = True
            progress.clear()
            sys.stderr.write("peon: cancelling the call\n")
            handle.cancel()
            result = handle.result()
        progress.clear()
    if result.ok and isinstance(result.value, dict) and result.value.get("background") \
            and result.value.get("state") == "running":
        # A one-shot call's session ends with this command, and its jobs with it (docs/jobs.md).
        sys.stderr.write(f"peon: job {result.value.get('job_id')} was stopped with this command's session; "
                         "background jobs live as long as a `peon mcp`, `peon serve` or embedded session\n")
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        out, err = render_result(result.to_dict())
        sys.stdout.write(out)
        sys.stdout.flush()
        sys.stderr.write(err)
    if interrupted:
        return 130
    return 0 if result.ok else 1


def render_result(result: Mapping[str, Any]) -> tuple[str, str]:
    """(stdout, stderr) text of a call's result for a person: a process's output, a file's content or
    the value as JSON, then one status line; a failure is one line on stderr."""
    tool = result.get("tool", "")
    if not result.get("ok"):
        error = result.get("error") or {}
        return "", f"{tool} failed [{error.get('code')}]: {error.get('message')}\n"
    value = result.get("value")
    if not isinstance(value, Mapping):
        return json.dumps(value, indent=2, ensure_ascii=False) + "\n", ""
    if isinstance(value.get("output"), str) and "exit_code" in value:
        body, status = value["output"], process_status(value)
    elif isinstance(value.get("content"), str):
        body = value["content"]
        status = [human_bytes(int(value[k])) + " in total" for k in ("total_bytes",) if isinstance(value.get(k), int)]
        if value.get("truncated"):
            status.append("truncated")
    else:
        return json.dumps(value, indent=2, ensure_ascii=False) + "\n", ""
    if body and not body.endswith("\n"):
        body += "\n"
    return body + f"── {tool}: " + " · ".join(status) + "\n", ""


def process_status(value: Mapping[str, Any]) -> list[str]:
    status = []
    if value.get("timed_out"):
        status.append(f"timed out after {value.get('timeout_seconds', 0):g} s")
    elif value.get("cancelled"):
        status.append("cancelled")
    if value.get("limit_exceeded"):
        status.append(f"{value['limit_exceeded']} limit exceeded")
    if value.get("signal"):
        status.append(f"killed by {value['signal']}")
    elif value.get("exit_code") is not None:
        status.append(f"exit {value['exit_code']}")
    if isinstance(value.get("duration_ms"), int):
        status.append(f"{value['duration_ms'] / 1000:.1f} s")
    total = value.get("output_bytes")
    if value.get("truncated") and isinstance(total, int):
        kept = value.get("output_kept_bytes")
        kept_text = human_bytes(kept) if isinstance(kept, int) else "part"
        status.append(f"output truncated: {kept_text} of {human_bytes(total)} shown, the middle left out")
    elif isinstance(total, int):
        status.append(f"{human_bytes(total)} of output")
    if value.get("output_invalid_utf8"):
        status.append("some output was not UTF-8")
    return status
