"""``peon mcp`` as a subprocess: the official MCP Python SDK client started against it (``mode="legacy"``: the
``initialize`` handshake; ``mode="auto"``: the stateless 2026-07-28 revision), a raw JSON-lines server whose
every stdout line must be JSON-RPC, the private environment both run in, and the stable error codes their
results carry."""

from __future__ import annotations

import asyncio
import json
import queue
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from helpers import wait_for

MODES = ["legacy", "auto"]
TEST_TIMEOUT = 60

# The official TypeScript SDK's clients (tests/js, installed by .ci/run) and the node that runs them.
JS = Path(__file__).resolve().parent.parent / "js"
NODE = shutil.which("node")
NEEDS_TS_SDK = [
    pytest.mark.skipif(NODE is None, reason="node is not installed; the TypeScript MCP client needs Node.js 18+"),
    pytest.mark.skipif(not (JS / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json").exists(),
                       reason="the pinned TypeScript MCP clients are not installed: run .ci/run "
                              "(or npm ci --prefix tests/js)"),
]


def run(coro):
    async def bounded():
        return await asyncio.wait_for(coro, TEST_TIMEOUT)

    return asyncio.run(bounded())


def server_command(workspace: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "peon.cli", "mcp", "--workspace", str(workspace), *args]


def isolated_env(leftovers, home: Path) -> dict:
    """The test's tagged environment with a private home: no user configuration or login profile of the
    machine leaks in, and session state stays in the test's directory."""
    home.mkdir(exist_ok=True)
    return leftovers.env({"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
                          "XDG_STATE_HOME": str(home / ".local" / "state")})


def client(workspace: Path, env: dict, *args: str, mode: str = "legacy", **options) -> Client:
    command = server_command(workspace, *args)
    params = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=str(workspace))
    return Client(params, mode=mode, **options)


def write_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "peon.toml"
    path.write_text(text)
    return str(path)


def error_code(result) -> str:
    """The stable code of an SDK error result: first in the text the model reads, and as an object for
    programs under ``_meta``; never in ``structuredContent`` (which must match the tool's outputSchema)."""
    assert result.is_error and result.structured_content is None, result
    error = result.meta["peon/error"]
    assert result.content[0].text.startswith(f"{error['code']}: {error['message']}"), result
    return error["code"]


def raw_error_code(result: dict) -> str:
    """The same for a raw ``tools/call`` result."""
    assert result["isError"] is True and "structuredContent" not in result, result
    error = result["_meta"]["peon/error"]
    assert result["content"][0]["text"].startswith(f"{error['code']}: "), result
    return error["code"]


class RawServer:
    """``peon mcp`` with its stdin and stdout in our hands; every stdout line must be JSON-RPC."""

    def __init__(self, workspace: Path, env: dict, tmp_path: Path, *args: str, command: list[str] | None = None):
        self.stderr_path = tmp_path / "server-stderr.txt"
        self.stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - the server writes to it until close()
        self.proc = subprocess.Popen(command or server_command(workspace, *args), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, env=env, cwd=workspace)
        self.messages: queue.Queue = queue.Queue()
        self.garbage: list[bytes] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            try:
                message = json.loads(raw)
                assert isinstance(message, dict) and message.get("jsonrpc") == "2.0"
            except (ValueError, AssertionError):
                self.garbage.append(raw)
                continue
            self.messages.put(message)
        self.messages.put(None)

    def send(self, message) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def request(self, id, method, params=None) -> None:
        self.send({"jsonrpc": "2.0", "id": id, "method": method, **({"params": params} if params is not None else {})})

    def recv(self, timeout: float = 30) -> dict:
        message = self.messages.get(timeout=timeout)
        assert message is not None, "the server closed stdout"
        return message

    def initialize(self) -> dict:
        self.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                       "clientInfo": {"name": "raw", "version": "1"}})
        reply = self.recv()
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return reply

    def supervisor_pid(self) -> int:
        found = wait_for(lambda: re.search(rb"supervisor pid (\d+)", self.stderr_path.read_bytes()), 30)
        assert found, self.stderr_path.read_text()
        return int(found.group(1))

    def close(self) -> int:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.reader.join(5)
            self.proc.stdout.close()
            self.stderr.close()
            assert not self.garbage, f"non-protocol bytes on stdout: {self.garbage!r}"
