"""The bounded call queue: a session holds at most limits.max_queued_calls unanswered calls and
limits.max_queued_bytes of their input; a call beyond gets `busy` at once — in Session.submit (nothing is
sent), in the supervisor (a raw client), and through `peon mcp`, whose memory stays flat under a flood."""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
from pathlib import Path

import psutil

from peon.client.config import load_config
from peon.core.framing import LineDecoder, encode

ALLOW = {"approval": {"read_only": "allow", "filesystem": "allow", "process": "allow", "delegate": "allow"}}


def test_submit_answers_busy_beyond_the_count_and_sends_nothing(open_session, workspace):
    session = open_session({"limits": {"max_queued_calls": 3}})
    running = session.submit("bash", {"command": "touch .started; sleep 30"})
    assert wait_until((workspace / ".started").exists)
    held = [session.submit("bash", {"command": f"touch held-{i}"}) for i in range(2)]
    refused = [session.submit("bash", {"command": f"touch refused-{i}"}) for i in range(5)]
    for handle in refused:
        assert handle.done(), "a busy call is answered at once"
        error = handle.result(0).error
        assert error.code == "busy" and "limits.max_queued_calls is 3" in error.message
        assert error.details == {"limit": "max_queued_calls", "value": 3}
    assert not any(h.done() for h in held)
    running.cancel()
    assert running.result(30).value["cancelled"]
    assert all(h.result(30).ok for h in held)
    assert sorted(os.listdir(workspace)) == [".started", "held-0", "held-1"]  # the refused were never sent
    assert session.call("bash", {"command": "true"}).ok  # room again


def test_submit_answers_busy_beyond_the_bytes(open_session):
    session = open_session({"limits": {"max_queued_bytes": 4096, "max_input_bytes": 8192}})
    running = session.submit("bash", {"command": "sleep 30"})
    fits = session.submit("bash", {"command": "true " + "x" * 3000})
    refused = session.submit("bash", {"command": "true " + "x" * 3000})
    error = refused.result(0).error
    assert error.code == "busy" and "limits.max_queued_bytes is 4096" in error.message
    running.cancel()
    assert fits.result(30).ok
    alone = session.call("bash", {"command": "true " + "x" * 6000})  # a lone call is held whatever its size
    assert alone.ok, alone.error


# -- the supervisor's own bound, for clients that are not peon.Session -----------------------------------


class RawSupervisorClient:
    """Speaks the supervisor's protocol over a socketpair, bypassing Session's admission check."""

    def __init__(self, workspace: Path, state_dir: Path, env: dict, config: dict):
        ours, theirs = socket.socketpair()
        root = str(Path(__file__).resolve().parent.parent.parent)
        self.proc = subprocess.Popen([sys.executable, "-P", "-m", "peon.supervisor", "--fd", str(theirs.fileno())],
                                     pass_fds=[theirs.fileno()], cwd=workspace, start_new_session=True,
                                     env={**env, "PYTHONPATH": root}, stdin=subprocess.DEVNULL)
        theirs.close()
        self.sock = ours
        self.decoder = LineDecoder()
        self.pending: list[dict] = []
        loaded = load_config(config, workspace=workspace, env=env)
        self.send({"op": "start", "workspace": str(workspace), "session_id": "raw", "state_dir": str(state_dir),
                   "config": loaded.to_wire(), "tools": [], "env": env, "approver": False})
        assert self.recv()["op"] == "ready"

    def send(self, message: dict) -> None:
        self.sock.sendall(encode(message))

    def recv(self, timeout: float = 30) -> dict:
        self.sock.settimeout(timeout)
        while not self.pending:
            data = self.sock.recv(1 << 16)
            assert data, "the supervisor closed the channel"
            self.pending.extend(json.loads(line) for line in self.decoder.feed(data))
        return self.pending.pop(0)

    def close(self) -> None:
        self.send({"op": "close"})
        self.proc.wait(30)
        self.sock.close()


def test_the_supervisor_answers_busy_to_a_client_that_ignores_the_bound(workspace, tmp_path, leftovers):
    env = leftovers.env({"XDG_CONFIG_HOME": str(tmp_path / "none")})
    client = RawSupervisorClient(workspace, tmp_path / "state", env,
                                 {**ALLOW, "limits": {"max_queued_calls": 2, "max_queued_bytes": 8192,
                                                           "max_parallel_calls": 1}})
    try:
        client.send({"op": "call", "id": "run", "tool": "bash", "args": {"command": "touch .started; sleep 30"}})
        client.send({"op": "call", "id": "held", "tool": "bash", "args": {"command": "touch held"}})
        for i in range(5):
            client.send({"op": "call", "id": f"over-{i}", "tool": "bash", "args": {"command": f"touch over-{i}"}})
        busy = [client.recv() for _ in range(5)]
        assert [m["id"] for m in busy] == [f"over-{i}" for i in range(5)]
        assert all(m["error"]["code"] == "busy" and "max_queued_calls" in m["error"]["message"] for m in busy)
        assert wait_until((workspace / ".started").exists)
        client.send({"op": "call", "id": "held", "tool": "bash", "args": {"command": "touch duplicate"}})
        duplicate = client.recv()
        assert duplicate["id"] == "held" and duplicate["error"]["code"] == "invalid_input"
        client.send({"op": "cancel", "id": "run"})
        results = {m["id"]: m for m in (client.recv(), client.recv())}
        assert results["held"]["ok"] and results["run"]["value"]["cancelled"]
        big = {"command": "true " + "x" * 9000}
        client.send({"op": "call", "id": "alone", "tool": "bash", "args": big})  # alone: held
        client.send({"op": "call", "id": "too-big", "tool": "bash", "args": big})  # over the bytes
        replies = {m["id"]: m for m in (client.recv(), client.recv())}
        assert replies["too-big"]["error"]["code"] == "busy"
        assert "max_queued_bytes" in replies["too-big"]["error"]["message"]
        assert replies["alone"]["ok"]
        assert sorted(os.listdir(workspace)) == [".started", "held"]
        audit = [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
        assert {e["call_id"] for e in audit if e["event"] == "result" and e["outcome"].get("error") == "busy"} == \
            {f"over-{i}" for i in range(5)} | {"too-big"}
    finally:
        client.close()


# -- through peon mcp: memory stays flat under a flood of large calls -----------------------------------


class RawMcp:
    def __init__(self, workspace: Path, env: dict, config: Path):
        self.proc = subprocess.Popen([sys.executable, "-m", "peon.cli", "mcp", "--workspace", str(workspace),
                                      "--config", str(config)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, cwd=workspace)
        self.messages: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self.messages.put(json.loads(raw))
        self.messages.put(None)

    def send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def recv(self, timeout: float = 60) -> dict:
        message = self.messages.get(timeout=timeout)
        assert message is not None, "the server closed stdout"
        return message

    def rss(self) -> int:
        """Resident memory of the MCP server and everything under it (supervisor, forkserver, workers)."""
        root = psutil.Process(self.proc.pid)
        total = 0
        for process in [root, *root.children(recursive=True)]:
            try:
                total += process.memory_info().rss
            except psutil.Error:
                continue
        return total

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def is_busy(message: dict) -> bool:
    result = message.get("result") or {}
    return bool(result.get("isError")) and "busy:" in json.dumps(result.get("content", ""))


def test_a_flood_of_large_calls_through_mcp_gets_busy_and_memory_stays_flat(workspace, tmp_path, leftovers):
    home = tmp_path / "home"
    home.mkdir()
    env = leftovers.env({"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
                         "XDG_STATE_HOME": str(home / "state")})
    config = tmp_path / "peon.toml"
    config.write_text('[approval]\nprocess = "allow"\nfilesystem = "allow"\n'
                      "[limits]\nmax_queued_calls = 8\nmax_queued_bytes = 4194304\nmax_parallel_calls = 1\n")
    server = RawMcp(workspace, env, config)
    try:
        server.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "flood", "version": "1"}}})
        assert "result" in server.recv()
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        marker = workspace / "started"
        server.send({"jsonrpc": "2.0", "id": "block", "method": "tools/call",
                     "params": {"name": "bash", "arguments": {"command": f"touch {marker}; sleep 60"}}})
        assert wait_until(marker.exists)
        before = server.rss()
        flood = 200
        payload = "x" * (1 << 20)  # 200 calls of 1 MiB: 200 MiB if anything held them all
        for i in range(flood):
            server.send({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {
                "name": "write", "arguments": {"path": f"f{i}.txt", "content": payload, "mode": "create"}}})
        replies = {}
        while len(replies) < flood - 3:  # at most 3 large calls fit beside the running one in 4 MiB
            message = server.recv()
            replies[message["id"]] = message
        peak = server.rss()
        busy = [i for i, m in replies.items() if is_busy(m)]
        assert len(busy) >= flood - 3, [m for m in replies.values() if not is_busy(m)][:2]
        server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "block"}})
        while len(replies) < flood:  # a cancelled request gets no response (MCP)
            message = server.recv()
            replies[message["id"]] = message
        written = sorted(os.listdir(workspace))
        assert len(written) == 1 + (flood - len(busy))  # the marker and the calls that were held
        grown = peak - before
        assert grown < 120 * (1 << 20), f"memory grew by {grown >> 20} MiB under a 200 MiB flood"
    finally:
        server.close()


def wait_until(predicate, timeout: float = 30.0) -> bool:
    deadline = threading.Event()
    timer = threading.Timer(timeout, deadline.set)
    timer.start()
    try:
        while not deadline.is_set():
            if predicate():
                return True
            deadline.wait(0.02)
        return predicate()
    finally:
        timer.cancel()
