"""The user's tool-call hooks through real sessions: a PreToolUse script written for Claude Code denies with
its reason in the result and the audit, a hook past its timeout denies, an HTTP hook on loopback is asked and
allows, and an after-call hook's note reaches the agent."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from helpers import jsonl_entries

CLAUDE_GUARD = """\
import json, sys
data = json.load(sys.stdin)
if data["hook_event_name"] == "PreToolUse" and "rm -rf" in data["tool_input"].get("command", ""):
    print("Blocked: rm -rf is not allowed in this project", file=sys.stderr)
    sys.exit(2)
sys.exit(0)
"""


def user_config(tmp_path, text: str) -> dict:
    home = tmp_path / "home"
    (home / "peon").mkdir(parents=True, exist_ok=True)
    (home / "peon" / "config.toml").write_text(text)
    return {"XDG_CONFIG_HOME": str(home)}


def hook(event: str, argv: list[str] | None = None, url: str = "", matcher: str = "Bash",
         timeout: float = 10) -> str:
    target = f"url = {json.dumps(url)}" if url else f"command = {json.dumps(argv)}"
    return (f'[[hooks]]\nevent = "{event}"\nmatcher = {json.dumps(matcher)}\n{target}\n'
            f"timeout_seconds = {timeout}\n")


def test_a_claude_code_pretooluse_script_denies_with_its_reason(open_session, tmp_path, workspace):
    script = tmp_path / "guard.py"
    script.write_text(CLAUDE_GUARD)
    (workspace / "keep").mkdir()
    state = tmp_path / "state"
    session = open_session(env=user_config(tmp_path, hook("before_call", [sys.executable, str(script)])),
                           state_dir=state)
    assert session.call("bash", {"command": "echo fine"}).value["output"] == "fine\n"
    r = session.call("bash", {"command": "rm -rf keep"})
    assert r.error.code == "denied" and r.error.details["by"] == "hook"
    assert "Blocked: rm -rf is not allowed in this project" in r.error.message
    assert (workspace / "keep").is_dir()
    (line,) = [e for e in jsonl_entries(state / "audit.jsonl") if e.get("call_id") == r.call_id]
    assert line["decision"]["by"] == "hook" and "Blocked: rm -rf" in line["decision"]["rule"]


def test_a_hook_that_sleeps_past_its_timeout_denies(open_session, tmp_path):
    started = time.monotonic()
    session = open_session(env=user_config(tmp_path, hook("before_call", ["/bin/sleep", "30"], timeout=0.5)))
    r = session.call("bash", {"command": "echo never"})
    assert r.error.code == "denied" and r.error.details["by"] == "hook"
    assert "did not answer within timeout_seconds = 0.5" in r.error.message
    assert time.monotonic() - started < 20


def test_a_hook_that_fails_denies_and_one_for_other_tools_is_not_asked(open_session, tmp_path, workspace):
    (workspace / "f").write_text("x")
    session = open_session(env=user_config(tmp_path, hook("before_call", ["/bin/false"])))
    r = session.call("bash", {"command": "echo never"})
    assert r.error.code == "denied" and "exited with status 1" in r.error.message
    assert session.call("read", {"path": "f"}).ok  # the matcher names Bash only


class _Answers(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        answer = json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                                    "permissionDecision": "allow"}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def loopback_hook():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    _Answers.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def test_an_http_hook_on_loopback_is_asked_and_allows(open_session, tmp_path, loopback_hook):
    session = open_session(env=user_config(tmp_path, hook("before_call", url=loopback_hook)))
    r = session.call("bash", {"command": "echo allowed"})
    assert r.ok and r.value["output"] == "allowed\n"
    (sent,) = _Answers.received
    assert sent["hook_event_name"] == "PreToolUse" and sent["tool_input"] == {"command": "echo allowed"}
    assert sent["peon"]["risk"] == "process" and sent["peon"]["shell"][0]["words"] == ["echo", "allowed"]


def test_an_after_hook_note_reaches_the_agent(open_session, tmp_path):
    script = tmp_path / "note.py"
    script.write_text("import json, sys\nd = json.load(sys.stdin)\n"
                      "print(json.dumps({'hookSpecificOutput': {'hookEventName': 'PostToolUse', "
                      "'additionalContext': 'saw ' + d['tool_response']['output'].strip()}}))\n")
    config = hook("after_call", [sys.executable, str(script)]) + hook("after_call", ["/bin/false"])
    session = open_session(env=user_config(tmp_path, config))
    r = session.call("bash", {"command": "echo out"})
    assert r.ok and r.value["output"] == "out\n"  # the failing after-hook never loses the result
    assert len(r.notes) == 1 and r.notes[0].endswith("saw out")


def test_calls_with_hooks_are_still_put_to_the_approver_in_arrival_order(open_session, tmp_path):
    script = tmp_path / "slow_first.py"  # the first call's hook answers last
    script.write_text("import json, sys, time\nd = json.load(sys.stdin)\n"
                      "time.sleep(1.0 if 'first' in d['tool_input']['command'] else 0)\n")
    asked: list[str] = []
    config = hook("before_call", [sys.executable, str(script)])
    session = open_session({"approval": {"process": "ask"}, "limits": {"max_parallel_calls": 4}},
                           env=user_config(tmp_path, config),
                           approver=lambda request: asked.append(request["canonical_input"]) or "allow_once")
    pending = [session.submit("bash", {"command": f"echo {word}"}) for word in ("first", "second", "third")]
    results = [p.result(timeout=60) for p in pending]
    assert all(r.ok for r in results)
    assert [json.loads(a)["command"] for a in asked] == ["echo first", "echo second", "echo third"]


def test_a_hook_answers_when_it_exits_whatever_it_left_running(open_session, tmp_path):
    started = time.monotonic()
    config = hook("before_call", ["/bin/sh", "-c", "sleep 30 & exit 2"], timeout=20)
    session = open_session(env=user_config(tmp_path, config))
    r = session.call("bash", {"command": "echo never"})
    assert r.error.code == "denied" and r.error.details["by"] == "hook"
    assert "did not answer" not in r.error.message
    assert time.monotonic() - started < 15


def test_an_http_hook_that_cannot_be_reached_denies(open_session, tmp_path):
    import socket
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    session = open_session(env=user_config(tmp_path, hook("before_call", url=f"http://127.0.0.1:{port}/")))
    r = session.call("bash", {"command": "echo never"})
    assert r.error.code == "denied" and "could not be reached" in r.error.message
