"""``peon serve`` as a real process on 127.0.0.1 for the tests, and a raw HTTP client for the wire tests.

:class:`ServeProcess` starts ``peon serve --port 0 --port-file F``, waits for ``/readyz`` and stops the
server with ``SIGTERM`` (then ``SIGKILL`` if it hangs). :func:`post` and :class:`SseReader` speak plain
HTTP/1.1 through ``http.client`` so a test controls every header and can close a stream mid-call.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from helpers import Leftovers, wait_for
from helpers.agents import install_fake_agents

START_SECONDS = 60.0
MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
TOKEN = "test-token-0123456789abcdef"


class ServeProcess:
    def __init__(self, workspace: Path, env: dict[str, str], tmp_path: Path, *args: str, wait: bool = True,
                 prefix: tuple[str, ...] = ()):
        self.workspace = workspace
        name = uuid.uuid4().hex[:8]
        self.port_file = tmp_path / f"serve-{name}.port"
        self.log_path = tmp_path / f"serve-{name}.log"
        self.args = list(args)
        command = [*prefix, sys.executable, "-m", "peon.cli", "serve", "--workspace", str(workspace), "--port", "0",
                   "--port-file", str(self.port_file), *args]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - the server's stdout for its whole life
        self.proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, cwd=str(workspace))
        self.port = 0
        if wait:
            self.wait_started()

    def wait_started(self) -> ServeProcess:
        """Wait until it listens and ``/readyz`` says ready (start several, then wait for each)."""
        deadline = time.monotonic() + START_SECONDS
        while not self.port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"peon serve did not start: {self.log()}")
            time.sleep(0.02)
        self.port = int(self.port_file.read_text())
        self.wait_ready(deadline)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", path, headers=headers or {})
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()

    def wait_ready(self, deadline: float | None = None) -> None:
        deadline = deadline or time.monotonic() + START_SECONDS
        while True:
            try:
                if self.get("/readyz")[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"peon serve did not become ready: {self.log()}")
            time.sleep(0.05)

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def post(port: int, body: Any, headers: dict[str, str] | None = None, *, raw: bytes | None = None,
         path: str = "/mcp") -> tuple[int, dict[str, str], bytes]:
    """One POST, the whole response read (SSE included)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        data = raw if raw is not None else json.dumps(body).encode()
        base = {"content-type": "application/json", "accept": ACCEPT}
        conn.request("POST", path, body=data, headers={**base, **(headers or {})})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def sse_messages(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in body.decode().splitlines() if line.startswith("data:")]


def modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    headers = {"mcp-protocol-version": MODERN, "mcp-method": method}
    if name is not None:
        headers["mcp-name"] = name
    return headers


def modern_request(request_id: Any, method: str, params: dict[str, Any] | None = None,
                   capabilities: dict[str, Any] | None = None, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    envelope = {"io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": capabilities or {}, **(meta or {})}
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**(params or {}), "_meta": envelope}}


def modern_post(port: int, request_id: Any, method: str, params: dict[str, Any] | None = None, *,
                headers: dict[str, str] | None = None, **options: Any) -> tuple[int, dict[str, str], bytes]:
    name = (params or {}).get("name") if method == "tools/call" else None
    return post(port, modern_request(request_id, method, params, **options),
                {**modern_headers(method, name), **(headers or {})})


def initialize(port: int, headers: dict[str, str] | None = None, capabilities: dict | None = None) -> str:
    """A 2025-11-25 session; its Mcp-Session-Id."""
    status, response_headers, body = post(port, {
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": HANDSHAKE, "capabilities": capabilities or {},
                   "clientInfo": {"name": "raw", "version": "0"}}}, headers)
    assert status == 200, body
    session_id = response_headers["mcp-session-id"]
    status, _, _ = post(port, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                        {"mcp-session-id": session_id, **(headers or {})})
    assert status == 202
    return session_id


class SseReader:
    """A POST whose answer is read message by message — an SSE stream event by event (keep-alive comments
    counted), or a plain JSON answer as one message; :meth:`close` hangs up mid-call. The request is sent
    at once; the response is awaited on first use (the server may hold it until it has something)."""

    def __init__(self, port: int, body: Any, headers: dict[str, str] | None = None):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        base = {"content-type": "application/json", "accept": ACCEPT}
        self.conn.request("POST", "/mcp", body=json.dumps(body).encode(), headers={**base, **(headers or {})})
        self._response: http.client.HTTPResponse | None = None
        self._json_read = False
        self.comments = 0

    @property
    def response(self) -> http.client.HTTPResponse:
        if self._response is None:
            self._response = self.conn.getresponse()
        return self._response

    @property
    def status(self) -> int:
        return self.response.status

    @property
    def headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.response.getheaders()}

    def next_message(self) -> dict[str, Any] | None:
        """The next JSON-RPC message, or ``None`` at the end."""
        if self.headers.get("content-type", "").startswith("application/json"):
            if self._json_read:
                return None
            self._json_read = True
            return json.loads(self.response.read())
        while True:
            line = self.response.readline()
            if not line:
                return None
            text = line.decode().rstrip("\r\n")
            if text.startswith(":"):
                self.comments += 1
            elif text.startswith("data:"):
                return json.loads(text[5:])

    def close(self) -> None:
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(2)
        self.conn.close()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in "ZX"
    except OSError:
        return False


def serve_env(leftovers, tmp_path: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = leftovers.env({"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
                         "XDG_STATE_HOME": str(home / ".local" / "state")})
    env.pop("PEON_SERVE_TOKEN", None)
    env.update(extra or {})
    return env


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.02) -> Any:
    return wait_for(predicate, timeout, interval)


class SharedServer:
    """A module-wide server with its own process tag; nothing tagged may outlive the module."""

    def __init__(self, tmp_path_factory, name: str, *args: str, extra_env: dict | None = None, prepare=None):
        root = tmp_path_factory.mktemp(name)
        self.leftovers = Leftovers(root / "home")
        (root / "home").mkdir()
        self.workspace = root / "ws"
        self.workspace.mkdir()
        if prepare is not None:
            prepare(self.workspace)
        self.bin = install_fake_agents(root / "bin")
        env = serve_env(self.leftovers, root, {"PATH": f"{self.bin}{os.pathsep}/usr/bin{os.pathsep}/bin",
                                               "FAKE_AGENT_LOG": str(root / "agents.jsonl"), **(extra_env or {})})
        self.server = ServeProcess(self.workspace, env, root, *args)
        self.port = self.server.port
        self.url = self.server.url

    def close(self) -> None:
        code = self.server.stop()
        survivors = self.leftovers.kill_all()
        assert code == 0, self.server.log()
        assert not survivors, f"processes outlived the server: {survivors}"


def add_skill(workspace: Path) -> None:
    skills = workspace / ".peon" / "skills" / "release-checks"
    skills.mkdir(parents=True)
    (skills / "SKILL.md").write_text("---\nname: release-checks\ndescription: What to check before a release.\n---\n"
                                     "1. Run the tests.\n")
