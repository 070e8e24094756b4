"""Running the user's tool-call hooks from the supervisor's call path, supervised.

Promises:

* a command hook runs as a process of its own, in a new session and process group, in the workspace,
  with a clean environment (``PATH``, ``HOME``, ``LANG``, ``CLAUDE_PROJECT_DIR`` / ``PEON_WORKSPACE``,
  ``PEON_SESSION_ID``, ``PEON_HOOK_EVENT``; nothing else of the supervisor's), only its three standard
  streams open (no descriptor of Peon's reaches it), its input on stdin; its stdout and stderr are each
  kept to :data:`MAX_OUTPUT_BYTES` (the rest is read and dropped, so it never blocks on a full pipe), and
  at its deadline (``timeout_seconds``) or when the call is cancelled its whole process group is killed
  and reaped;
* an HTTP hook is one ``POST`` of the same JSON to its configured URL, with the deadline on the whole
  exchange and the response body kept to :data:`MAX_OUTPUT_BYTES`; a 2xx answer is read as a program's
  stdout with exit code 0, anything else is a failure;
* before-hooks (:meth:`Hooks.before_call`) are all asked, one after another, until one denies; whatever
  goes wrong is a denial with its reason (:func:`peon.approval.hooks.failed`): the call is never run
  because a hook could not be asked;
* after-hooks (:meth:`Hooks.after_call`) give notes for the agent; a failure is written to the
  supervisor's stderr and never changes or delays the result past the hook's deadline.

What the answers mean is :mod:`peon.approval.hooks`; where they are applied is :mod:`peon.supervisor.calls`.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from peon.approval.hooks import (
    HookEvent, HookSpec, Outcome, after_note, before_outcome, failed, hook_input, narrow,
)
from peon.approval.policy import ApprovalRequest, Verdict
from peon.workers.reaper import REAPER

MAX_OUTPUT_BYTES = 64 * 1024
MAX_INPUT_BYTES = 1 << 20
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class Ran:
    """How a hook ended: the exit code (0 for a 2xx HTTP answer) and what it said; or why it did not."""

    exit_code: int = 0
    stdout: bytes = b""
    stderr: bytes = b""
    problem: str = ""


def _read_bounded(stream: IO[bytes]) -> bytes:
    """All of ``stream`` to its end, keeping the first :data:`MAX_OUTPUT_BYTES` (in a thread of its own)."""
    kept = bytearray()
    while chunk := stream.read(65536):
        if len(kept) < MAX_OUTPUT_BYTES:
            kept += chunk[:MAX_OUTPUT_BYTES - len(kept)]
    return bytes(kept)


def _write_input(stream: IO[bytes], payload: bytes) -> None:
    try:
        stream.write(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass  # a hook need not read its input
    finally:
        try:
            stream.close()
        except OSError:
            pass


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def run_command(argv: Sequence[str], payload: bytes, *, env: dict[str, str], cwd: str,
                      timeout: float) -> Ran:
    """Run ``argv`` with ``payload`` on stdin under the promises above. Its exit status comes from the
    supervisor's one reaper (:data:`peon.workers.reaper.REAPER`), watched before control returns to the loop."""
    try:
        process = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env=env, cwd=cwd, start_new_session=True, close_fds=True)
    except (OSError, ValueError) as exc:
        return Ran(problem=f"it could not be started: {exc}")
    status = REAPER.watch(process.pid)
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    stdin, stdout, stderr = process.stdin, process.stdout, process.stderr

    async def exchange() -> tuple[bytes, bytes, int]:
        reading = asyncio.gather(asyncio.to_thread(_read_bounded, stdout), asyncio.to_thread(_read_bounded, stderr))
        await asyncio.to_thread(_write_input, stdin, payload)
        ended = await asyncio.shield(status)
        _kill_group(process.pid)  # what it left running in its group would hold its output open
        out, err = await reading
        return out, err, ended

    try:
        out, err, wait_status = await asyncio.wait_for(exchange(), timeout)
    except TimeoutError:
        return Ran(problem=f"it did not answer within timeout_seconds = {timeout:g}")
    finally:
        _kill_group(process.pid)  # on time or not, nothing it started outlives its answer
        await asyncio.shield(status)
        process.returncode = 0  # reaped by the reaper; Popen must not wait for it again
        for stream in (stdin, stdout, stderr):
            try:
                stream.close()
            except OSError:
                pass
    return Ran(os.waitstatus_to_exitcode(wait_status), out, err)


def _post(url: str, payload: bytes, timeout: float) -> Ran:
    parts = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname or "", parts.port, timeout=timeout)
    try:
        path = parts.path or "/"
        connection.request("POST", path + (f"?{parts.query}" if parts.query else ""), body=payload,
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        body = response.read(MAX_OUTPUT_BYTES + 1)[:MAX_OUTPUT_BYTES]
        if not 200 <= response.status < 300:
            return Ran(problem=f"it answered HTTP {response.status} {response.reason}")
        return Ran(0, body)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return Ran(problem=f"it could not be reached at {url}: {exc}")
    finally:
        connection.close()


async def call_url(url: str, payload: bytes, *, timeout: float) -> Ran:
    """POST ``payload`` to ``url`` under the promises above."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(_post, url, payload, timeout), timeout)
    except TimeoutError:
        return Ran(problem=f"it did not answer within timeout_seconds = {timeout:g}")


@dataclass
class Hooks:
    """The session's hooks and what they run with."""

    specs: tuple[HookSpec, ...]
    session_id: str
    workspace: str

    def wanted(self, event: HookEvent, tool: str) -> list[HookSpec]:
        return [h for h in self.specs if h.event == event and h.matches(tool)]

    def _env(self, event: HookEvent) -> dict[str, str]:
        env = {"PATH": CLEAN_PATH, "LANG": "C.UTF-8", "CLAUDE_PROJECT_DIR": self.workspace,
               "PEON_WORKSPACE": self.workspace, "PEON_SESSION_ID": self.session_id, "PEON_HOOK_EVENT": event}
        home = os.environ.get("HOME")
        if home:
            env["HOME"] = home
        return env

    async def _run(self, hook: HookSpec, sent: dict[str, Any]) -> Ran:
        payload = json.dumps(sent, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass")
        if len(payload) > MAX_INPUT_BYTES:
            sent = {**sent, "tool_input": {"truncated": True}, "peon": {**sent["peon"], "details": {}}}
            payload = json.dumps(sent, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass")
        if hook.url:
            return await call_url(hook.url, payload, timeout=hook.timeout_seconds)
        return await run_command(hook.command, payload, env=self._env(hook.event), cwd=self.workspace,
                                 timeout=hook.timeout_seconds)

    async def before_call(self, request: ApprovalRequest, verdict: Verdict) -> tuple[Verdict, Outcome | None]:
        """The verdict after the before-hooks ``request`` wakes (narrowed only); the outcome that narrowed it."""
        outcomes: list[Outcome] = []
        for hook in self.wanted("before_call", request.tool):
            sent = hook_input("before_call", request, session_id=self.session_id, workspace=self.workspace,
                              verdict=verdict)
            try:
                ran = await self._run(hook, sent)
            except Exception as exc:  # a bug here denies the call, it does not fail the session
                ran = Ran(problem=f"it could not be run: {exc}")
            outcome = failed(hook, ran.problem) if ran.problem else before_outcome(hook, ran.exit_code, ran.stdout,
                                                                                   ran.stderr)
            outcomes.append(outcome)
            if outcome.kind == "deny":
                break
        return narrow(verdict, outcomes)

    async def after_call(self, request: ApprovalRequest, reply: dict[str, Any]) -> list[str]:
        """The notes the after-hooks ``request`` wakes give the agent about ``reply``; failures are logged."""
        notes: list[str] = []
        for hook in self.wanted("after_call", request.tool):
            sent = hook_input("after_call", request, session_id=self.session_id, workspace=self.workspace,
                              reply=reply)
            try:
                ran = await self._run(hook, sent)
            except Exception as exc:
                ran = Ran(problem=f"it could not be run: {exc}")
            note, problem = ("", ran.problem) if ran.problem else after_note(ran.exit_code, ran.stdout, ran.stderr)
            if problem:
                print(f"peon-supervisor: the hook {hook.describe()} failed after call {request.call_id}: {problem}",
                      file=sys.stderr)
            if note:
                notes.append(f"{hook.describe()}: {note}")
        return notes
