"""Ready-made approvers for :class:`peon.Session` (``Session(..., approver=...)``).

An approver is a callable ``approver(request: dict) -> answer`` run in its own thread for each call the
policy asks about. ``request`` is the supervisor's ``approval_request`` (``tool``, ``risk``,
``risk_reason``, ``summary``, ``details``, ``canonical_input``, ``sandboxed``, ``scopes``,
``timeout_seconds``); the answer is
``"allow_once"``, ``"deny"`` or a dict ``{"decision": "allow_once" | "allow_session" | "deny",
"scope": "call" | "prefix" | "tool" | "risk", "reason": str}``. Scope ``prefix`` is offered when the
request says ``"prefix_scope": true`` (a call with a command); its answer carries ``"prefix": "npm test"``
(every command line whose simple commands all start with those words) and ``"save": true`` to keep it
as an allow rule in the user's configuration.

Promises:

* :class:`Unattended` never blocks and never asks anyone: it allows once exactly the risks and tools
  it was told to, and denies everything else with a reason;
* :class:`TerminalApprover` shows the whole request on a terminal with control and bidirectional
  characters made visible (a command cannot repaint or reorder the prompt), and returns exactly the
  answer typed; end of input, no terminal, or repeated nonsense is a denial;
* the request reads top down: the action in one line, the command as typed (words Peon cannot resolve
  are shown as written, never as ``?``), what it touches, the sandbox in one line
  (:func:`peon.core.sandbox_words.call_sandbox_line`, never the plan's raw JSON), the other details, and
  the exact input.
"""

from __future__ import annotations

import json
import os
import select
import threading
import time
import unicodedata
from typing import Any, TextIO
from collections.abc import Callable, Iterable, Mapping

from peon.core.answers import NETWORK_QUESTION, suggested_prefix
from peon.core.sandbox_words import call_sandbox_line
from peon.core.tool import RISK_NAMES
from peon.core.text import shorten_counted

RISKS = RISK_NAMES


class Unattended:
    """The approver for unattended runs: allow once what is listed, deny the rest.

    ``Unattended()`` denies every call the policy asks about; ``Unattended(allow={"process"})`` also
    allows process-risk calls; ``tools={"bash"}`` allows every call of the named tools.
    """

    def __init__(self, allow: Iterable[str] = (), *, tools: Iterable[str] = ()):
        self.allow = frozenset(allow)
        unknown = sorted(self.allow - set(RISKS))
        if unknown:
            raise ValueError(f"unknown risk {unknown[0]!r}; risks are {', '.join(RISKS)}")
        self.tools = frozenset(tools)

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("risk") in self.allow:
            return {"decision": "allow_once", "reason": f"unattended run allows {request.get('risk')} risk"}
        if request.get("tool") in self.tools:
            return {"decision": "allow_once", "reason": f"unattended run allows the tool {request.get('tool')}"}
        allowed = ", ".join(sorted(self.allow)) or "no risk"
        return {"decision": "deny",
                "reason": f"unattended run: nobody can be asked, and it allows {allowed} "
                          f"(this call has {request.get('risk')} risk)"}


# -- the terminal prompt ---------------------------------------------------------------------------

MAX_SHOWN_CHARS = 4000
MAX_SEGMENTS_SHOWN = 50
MAX_ATTEMPTS = 5
ALIASES = {"y": "o", "n": "d"}  # "yes" allows once, "no" denies
SHOWN_APART = ("sandbox", "segments")  # details with a line of their own, not dumped as JSON
TOUCHED = (("path", ""), ("paths", ""), ("destination", "to "), ("create_directories", "makes "))


def visible(text: str) -> str:
    """``text`` with control, format (bidi, zero-width) and line-separator characters escaped."""
    out = []
    for ch in text:
        if ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs"):
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def bounded(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    text = visible(text)
    return shorten_counted(text, limit, " …", "more characters not shown")


def request_facts(request: Mapping[str, Any]) -> list[str]:
    """What every approver shows of ``request`` (the terminal and an MCP client's form alike), one line
    each: tool, risk and why, the action, whether it runs sandboxed, every detail (a command's segments
    one by one) and the exact input — made visible and bounded."""
    tool, risk = str(request.get("tool")), str(request.get("risk"))
    lines = [
        f"  tool:    {visible(tool)}",
        f"  risk:    {visible(risk)} ({bounded(str(request.get('risk_reason', '')), 500)})",
        f"  action:  {bounded(str(request.get('summary', '')))}",
    ]
    given = request.get("details")
    details: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    command = typed_command(request.get("canonical_input"))
    if command is not None:
        lines.append(f"  command: {bounded(command, 1000)}")
    touched = touches(details)
    if touched:
        lines.append(f"  touches: {bounded(touched, 1000)}")
    sandbox = details.get("sandbox")
    if request.get("sandboxed"):
        said = f": {call_sandbox_line(sandbox)}" if isinstance(sandbox, Mapping) and sandbox.get("active") else ""
        lines.append(f"  sandbox: the call runs inside the OS sandbox{bounded(said, 1000)}")
    elif isinstance(sandbox, Mapping):
        lines.append(f"  sandbox: {bounded(call_sandbox_line(sandbox), 1000)}")
    rest = {key: value for key, value in details.items() if key not in SHOWN_APART and value is not None}
    segments = details.get("segments")
    if rest or isinstance(segments, list):
        lines.append("  details:")
        if isinstance(segments, list):
            lines.extend(render_segments(segments))
        for key, value in rest.items():
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            lines.append(f"    {visible(str(key))}: {bounded(shown, 1000)}")
    lines.append(f"  input:   {bounded(str(request.get('canonical_input', '')))}")
    return lines


def typed_command(canonical_input: Any) -> str | None:
    """The command line of a call whose input has one (``bash``'s ``command``), exactly as typed."""
    if not isinstance(canonical_input, str) or '"command"' not in canonical_input:
        return None
    try:
        given = json.loads(canonical_input)
    except ValueError:
        return None
    command = given.get("command") if isinstance(given, dict) else None
    return command if isinstance(command, str) else None


def touches(details: Mapping[str, Any]) -> str:
    """The paths a call names in its details — the file, the directories it makes, the destination, and
    for a command its working directory and where its redirections write — in one line."""
    parts: list[str] = []
    for key, prefix in TOUCHED:
        value = details.get(key)
        if isinstance(value, str) and value:
            parts.append(prefix + value)
        elif isinstance(value, list) and value:
            parts.append(prefix + ", ".join(str(v) for v in value))
    if isinstance(details.get("cwd"), str):
        parts.append(f"runs in {details['cwd']}")
    targets = [str(target).lstrip(">&|") for segment in details.get("segments") or () if isinstance(segment, dict)
               for target in segment.get("redirects") or () if str(target).startswith((">", "&>"))]
    writes = [target for target in targets if target and not target.rstrip("-").isdigit() and target != "-"]
    if writes:
        parts.append("writes " + ", ".join(writes))
    return "; ".join(parts)


def render_request(request: dict[str, Any], offer_session: bool = True) -> tuple[str, dict[str, dict[str, Any]]]:
    """The text shown for ``request`` and the answers offered (key → answer). Without ``offer_session``
    only "allow once" and "deny" are offered (for a front end whose session ends with this call)."""
    tool, risk = str(request.get("tool")), str(request.get("risk"))
    lines = ["", "Peon asks for approval", *request_facts(request)]
    scopes = (request.get("scopes") or ["call"]) if offer_session else []
    answers: dict[str, dict[str, Any]] = {"o": {"decision": "allow_once"}}
    lines.append("  [o] allow once")
    if tool == NETWORK_QUESTION:  # a connection, not a tool call: its answers cover that host and port only
        details = request.get("details")
        details = details if isinstance(details, dict) else {}
        if offer_session:
            answers["s"] = {"decision": "allow_session", "scope": "call"}
            lines.append(f"  [s] allow connections to {visible(str(details.get('host')))}:"
                         f"{visible(str(details.get('port')))} for the rest of the session")
        answers["d"] = {"decision": "deny"}
        lines.append("  [d] deny (default)")
        return "\n".join(lines) + "\n", answers
    if "call" in scopes:
        answers["s"] = {"decision": "allow_session", "scope": "call"}
        lines.append("  [s] allow this exact call for the rest of the session")
    prefix = suggested_prefix(request) if offer_session else None
    if prefix is not None:
        answers["p"] = {"decision": "allow_session", "scope": "prefix", "prefix": prefix}
        lines.append(f"  [p] allow commands starting with `{visible(prefix)}` for the rest of the session")
        answers["a"] = {"decision": "allow_session", "scope": "prefix", "prefix": prefix, "save": True}
        lines.append(f"  [a] always allow commands starting with `{visible(prefix)}` (saved to your configuration)")
    if "tool" in scopes:
        answers["t"] = {"decision": "allow_session", "scope": "tool"}
        lines.append(f"  [t] allow every {visible(tool)} call with {visible(risk)} risk for the rest of the session")
    if "risk" in scopes:
        answers["r"] = {"decision": "allow_session", "scope": "risk"}
        lines.append(f"  [r] allow every call with {visible(risk)} risk for the rest of the session")
    answers["d"] = {"decision": "deny"}
    lines.append("  [d] deny (default)")
    if not offer_session:
        lines.append("  (no answer for the rest of the session: this session ends with this call)")
    return "\n".join(lines) + "\n", answers


def render_segments(segments: list[Any]) -> list[str]:
    """One line per simple command a shell command runs (``details["segments"]`` of ``bash``), with the
    wrappers, assignments and redirections Peon removed before matching, and why it cannot be allowed
    by rules."""
    lines = [f"    runs {len(segments)} command{'s' if len(segments) != 1 else ''}:"]
    for number, segment in enumerate(segments[:MAX_SEGMENTS_SHOWN], 1):
        if not isinstance(segment, dict):
            continue
        words = " ".join(str(w) for w in segment.get("words") or [])
        extra = []
        for key, label in (("wrappers", "via"), ("assignments", "sets"), ("redirects", "redirects")):
            if segment.get(key):
                extra.append(f"{label} {' '.join(str(v) for v in segment[key])}")
        if segment.get("origin"):
            extra.append(f"from {segment['origin']}")
        suffix = f"   [{'; '.join(extra)}]" if extra else ""
        lines.append(f"      {number}. {bounded(words, 300)}{bounded(suffix, 300)}")
        for note in segment.get("notes") or ():
            lines.append(f"         ! {bounded(str(note), 300)}")
    if len(segments) > MAX_SEGMENTS_SHOWN:
        lines.append(f"      ... {len(segments) - MAX_SEGMENTS_SHOWN} more")
    return lines


class TerminalApprover:
    """Ask the person at the terminal. Reads and writes ``/dev/tty`` unless streams are given.

    On the terminal, the prompt gives up when the request's ``timeout_seconds`` (the supervisor's
    ``limits.approval_timeout_seconds``) has passed — the supervisor has denied the call by then — so
    an unanswered prompt never holds the terminal from the next request. ``offer_session=False`` offers
    only "allow once" and "deny", for a session that ends with its one call (``peon call``), where an
    answer "for the rest of the session" would have no effect.
    """

    def __init__(self, input: TextIO | None = None, output: TextIO | None = None, *, offer_session: bool = True):
        self.input = input
        self.output = output
        self.offer_session = offer_session
        self._lock = threading.Lock()  # one prompt at a time, also across sessions sharing this approver

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            given = self.input
            if given is not None and self.output is not None:
                return self._ask(request, lambda deadline: given.readline(), self.output)
            try:
                fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
            except OSError as exc:
                return {"decision": "deny", "reason": f"no terminal to ask on ({exc.strerror})"}
            try:
                with open(fd, "w", encoding="utf-8", errors="replace", closefd=False) as tty_out:
                    read_line = (lambda deadline: given.readline()) if given is not None else _line_reader(fd)
                    return self._ask(request, read_line, self.output or tty_out)
            finally:
                os.close(fd)

    def _ask(self, request: dict[str, Any], read_line: Callable[[float | None], str | None],
             output: TextIO) -> dict[str, Any]:
        text, answers = render_request(request, self.offer_session)
        output.write(text)
        keys = "/".join(k if k != "d" else "D" for k in answers)
        timeout = request.get("timeout_seconds")
        seconds = float(timeout) if isinstance(timeout, (int, float)) else None
        deadline = time.monotonic() + seconds if seconds is not None else None
        for _ in range(MAX_ATTEMPTS):
            output.write(f"Answer [{keys}]: ")
            output.flush()
            line = read_line(deadline)
            if line is None:
                output.write(f"\n(no answer within {seconds or 0:g} s: denied)\n")
                output.flush()
                return {"decision": "deny", "reason": "no answer at the terminal in time"}
            if not line:
                output.write("\n(end of input: denied)\n")
                output.flush()
                return {"decision": "deny", "reason": "end of input at the terminal"}
            choice = line.strip().lower()[:1] or "d"
            choice = ALIASES.get(choice, choice)
            if choice in answers:
                answer = dict(answers[choice])
                output.write(f"-> {answer['decision']}" + (f" ({answer['scope']})" if "scope" in answer else "") + "\n")
                output.flush()
                answer["reason"] = f"{'denied' if answer['decision'] == 'deny' else 'allowed'} at the terminal"
                return answer
            output.write(f"Please answer one of {', '.join(answers)}.\n")
        return {"decision": "deny", "reason": "no valid answer at the terminal"}


def _line_reader(fd: int) -> Callable[[float | None], str | None]:
    """read_line(deadline): one line typed at the terminal, "" at end of input, None past the deadline.
    A terminal in canonical mode hands over one line per read."""

    def read_line(deadline: float | None) -> str | None:
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                return os.read(fd, 4096).decode("utf-8", "replace")

    return read_line
