"""Deny rules against a corpus of spellings (tests/helpers/rule_spellings.py), end to end: a real session
with ``process = "allow"`` and one deny rule, real bash, and the effect observed — a directory removed
in the workspace, a request reaching an HTTP server on 127.0.0.1, a branch arriving in a local bare
remote. No spelling outside the documented interpreter class may run."""

from __future__ import annotations

import http.server
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers import rule_spellings

APPROVAL = {"read_only": "allow", "filesystem": "allow", "process": "allow", "delegate": "ask"}


@pytest.fixture
def deny_session(open_session, tmp_path):
    def factory(prefix: str):
        rules = [{"tool": "bash", "command_prefix": prefix, "decision": "deny"}]
        return open_session({"approval": {**APPROVAL, "rules": rules}},
                            env={"XDG_CONFIG_HOME": str(tmp_path / "no-user-config")})

    return factory


def run_corpus(session, spellings: list[str], prepare: Callable[[], None], happened: Callable[[], bool]
               ) -> tuple[list[str], list[str]]:
    """Each spelling once: (spellings whose effect happened, spellings the policy allowed)."""
    ran, allowed = [], []
    for command in spellings:
        prepare()
        result = session.call("bash", {"command": command, "timeout_seconds": 20})
        if result.ok or result.error.code != "denied":
            allowed.append(command)
        if happened():
            ran.append(command)
    return ran, allowed


def report(name: str, spellings: list[str], ran: list[str], interpreters_ran: int, interpreters: int) -> None:
    print(f"\n{name}: {len(ran)} of {len(spellings)} spellings ran; interpreter class: "
          f"{interpreters_ran} of {interpreters} ran")


def test_rm_rf_denied_in_every_spelling(deny_session, workspace):
    session = deny_session("rm -rf")
    victim = workspace / "victim"

    def prepare() -> None:
        (victim / "sub").mkdir(parents=True, exist_ok=True)
        (victim / "sub" / "file").write_text("x")

    ran, allowed = run_corpus(session, rule_spellings.RM, prepare, lambda: not victim.exists())
    interpreters = rule_spellings.INTERPRETERS["rm -rf"]
    interpreters_ran, _ = run_corpus(session, interpreters, prepare, lambda: not victim.exists())
    report("rm -rf", rule_spellings.RM, ran, len(interpreters_ran), len(interpreters))
    assert ran == [] and allowed == [], (ran, allowed)
    assert session.call("bash", {"command": "rm victim/sub/file"}).ok  # other rm commands still run


class Counter(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[tuple[str, type[Counter]]]:
    handler = type("Hits", (Counter,), {"hits": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hit", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_denied_in_every_spelling(deny_session, http_server):
    url, handler = http_server
    session = deny_session("curl")
    before = [0]

    def prepare() -> None:
        before[0] = handler.hits

    def happened() -> bool:
        return handler.hits > before[0]

    spellings = [s.replace("{url}", url) for s in rule_spellings.CURL]
    ran, allowed = run_corpus(session, spellings, prepare, happened)
    interpreters = [s.replace("{url}", url) for s in rule_spellings.INTERPRETERS["curl"]]
    interpreters_ran, _ = run_corpus(session, interpreters, prepare, happened)
    report("curl", spellings, ran, len(interpreters_ran), len(interpreters))
    assert ran == [] and allowed == [], (ran, allowed)
    assert handler.hits == len(interpreters_ran)


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_git_push_denied_in_every_spelling(deny_session, workspace, tmp_path):
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    git("init", "-q", "-b", "main", cwd=workspace)
    for key, value in (("user.name", "t"), ("user.email", "t@example.invalid"), ("alias.up", "push")):
        git("config", key, value, cwd=workspace)
    git("commit", "-q", "--allow-empty", "-m", "x", cwd=workspace)
    git("remote", "add", "origin", str(remote), cwd=workspace)
    session = deny_session("git push")

    def prepare() -> None:
        subprocess.run(["git", "update-ref", "-d", "refs/heads/main"], cwd=remote, capture_output=True)

    def happened() -> bool:
        return subprocess.run(["git", "rev-parse", "-q", "--verify", "refs/heads/main"], cwd=remote,
                              capture_output=True).returncode == 0

    spellings = [s.replace("../remote.git", str(remote)) for s in rule_spellings.GIT_PUSH]
    ran, allowed = run_corpus(session, spellings, prepare, happened)
    interpreters = rule_spellings.INTERPRETERS["git push"]
    interpreters_ran, _ = run_corpus(session, interpreters, prepare, happened)
    report("git push", spellings, ran, len(interpreters_ran), len(interpreters))
    assert ran == [] and allowed == [], (ran, allowed)
    assert session.call("bash", {"command": "git log -1 --format=%s"}).ok  # other git commands still run
