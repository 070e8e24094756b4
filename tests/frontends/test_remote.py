"""``peon.RemoteSession`` and ``peon.AsyncRemoteSession`` against real ``peon serve`` processes: the same
calls give the same results as a local ``peon.Session``, approvals reach the caller's approver, cancelling
stops the remote processes, a lost answer is retried without running the call twice, and a dead or
unreachable server is a ``connection_lost`` result or a ``SessionError``, never a hang."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

import peon
from peon.core.errors import ErrorCode, SessionError
from helpers import pids_in
from helpers.serve import TOKEN, ServeProcess, SharedServer, alive, serve_env, wait_until

PROTOCOLS = ["2025-11-25", "2026-07-28"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    shared = SharedServer(tmp_path_factory, "remote", "--allow", "process", "--allow", "filesystem",
                          extra_env={"PEON_SERVE_TOKEN": TOKEN})
    yield shared
    shared.close()


@pytest.fixture(scope="module")
def ask_server(tmp_path_factory):
    config = tmp_path_factory.mktemp("remote-ask") / "peon.toml"
    config.write_text('[approval]\nprocess = "ask"\n')
    shared = SharedServer(tmp_path_factory, "remote-ask", "--config", str(config))
    yield shared
    shared.close()


def exercise(session, tag: str) -> list:
    """What an embedding application does; the same code for a local and a remote session."""
    outcomes = []
    for name, args in [
        ("bash", {"command": f"echo {tag}; exit 3"}),
        ("write", {"path": f"{tag}.txt", "content": "one\n", "mode": "create"}),
        ("read", {"path": f"{tag}.txt"}),
        ("write", {"path": f"{tag}.txt", "content": "two\n", "mode": "create"}),
        ("read", {"path": "../outside"}),
        ("bash", {}),
        ("bash", ["not", "an", "object"]),
        ("nope", {}),
        ("bash", {"command": "sleep 5", "timeout_seconds": 0.2}),
    ]:
        result = session.call(name, args)
        # Timings differ by run, and job ids count the session's calls.
        value = {k: v for k, v in (result.value or {}).items()
                 if k not in ("duration_ms", "waited_for_worker_ms", "sha256", "mtime_ns", "job_id")}
        if isinstance(value.get("sandbox"), dict):  # the writable paths name each session's own workspace and cache
            value["sandbox"] = {k: v for k, v in value["sandbox"].items() if k != "writable"}
        outcomes.append((result.tool, result.ok, result.error.code if result.error else None, value))
    return outcomes


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_one_line_switches_local_to_remote(server, protocol, tmp_path, leftovers):
    local_ws = tmp_path / "local"
    local_ws.mkdir()
    config = {"approval": {"process": "allow", "filesystem": "allow"}}
    with peon.Session(local_ws, config, env=leftovers.env(), state_dir=tmp_path / "state") as session:
        local, local_tools = exercise(session, f"t-{protocol}"), session.tools()
    with peon.RemoteSession(server.url, token=TOKEN, protocol=protocol) as session:
        remote, remote_tools = exercise(session, f"t-{protocol}"), session.tools()
        assert session.info["protocol_version"] == protocol
    assert remote == local
    assert [(t["name"], t["risk"]) for t in remote_tools] == [(t["name"], t["risk"]) for t in local_tools]
    assert [t["input_schema"] for t in remote_tools] == [t["input_schema"] for t in local_tools]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_approval_reaches_the_approver(ask_server, protocol):
    seen = []
    marker = f"approved-{protocol}"
    allowed = f"echo first >> {marker}"

    def approver(request):
        seen.append(request)
        return {"decision": "allow_session", "scope": "call"} if allowed in request["canonical_input"] else "deny"

    # Grants belong to the server's one session, so this test grants only its own exact call.
    with peon.RemoteSession(ask_server.url, approver=approver, protocol=protocol) as session:
        first = session.call("bash", {"command": allowed})
        again = session.call("bash", {"command": allowed})
        other = session.call("bash", {"command": f"echo other >> {marker}"})
    assert first.ok and again.ok, (first, again)
    assert other.error.code == "denied"
    assert len(seen) == 2, "the granted call is not asked again; another one is"
    request = seen[0]
    assert request["tool"] == "bash" and request["risk"] == "process" and request["scopes"] == ["call", "tool", "risk"]
    assert request["details"]["argv"][:2] == ["/bin/bash", "-lc"] and marker in request["summary"]
    assert (ask_server.workspace / marker).read_text() == "first\nfirst\n"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_approvers_reason_reaches_the_server(ask_server, protocol):
    def approver(request):
        return {"decision": "deny", "reason": "no writes on release day"}

    with peon.RemoteSession(ask_server.url, approver=approver, protocol=protocol) as session:
        denied = session.call("bash", {"command": "echo nope"})
    assert denied.error.code == "denied" and "no writes on release day" in denied.error.message, denied


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_denials_and_no_approver(ask_server, protocol):
    with peon.RemoteSession(ask_server.url, approver=lambda request: "deny", protocol=protocol) as session:
        denied = session.call("bash", {"command": "touch denied"})
    with peon.RemoteSession(ask_server.url, protocol=protocol) as session:
        unasked = session.call("bash", {"command": "touch unasked"})
    assert denied.error.code == "denied" and unasked.error.code == "denied"
    assert "elicitation" in unasked.error.message
    assert not (ask_server.workspace / "denied").exists() and not (ask_server.workspace / "unasked").exists()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_cancel_stops_the_remote_processes(server, protocol):
    pid_file = server.workspace / f"cancel-{protocol}"
    with peon.RemoteSession(server.url, token=TOKEN, protocol=protocol) as session:
        progress = []
        handle = session.submit("bash", {"command": f"sleep 300 & echo $! >> {pid_file}; echo $$ >> {pid_file}; wait"},
                                on_progress=progress.append)
        assert wait_until(lambda: len(pids_in(pid_file)) == 2, 20)
        assert wait_until(lambda: progress, 10), "progress updates reach the caller"
        handle.cancel()
        result = handle.result(10)
        assert result.error.code == "cancelled" and handle.done()
        pids = pids_in(pid_file)
        assert wait_until(lambda: not any(alive(p) for p in pids), 10), [p for p in pids if alive(p)]
        assert session.call("bash", {"command": "echo after"}).value["output"] == "after\n"
    assert progress[0]["elapsed_ms"] > 0 and "running for" in progress[0]["message"]


def test_async_flavour(server):
    pid_file = server.workspace / "async-cancel"

    async def scenario():
        async with peon.AsyncRemoteSession(server.url, token=TOKEN) as session:
            assert {t["name"] for t in session.tools()} >= {"bash", "read", "write"}
            ok = await session.call("bash", {"command": "echo async"})
            task = asyncio.ensure_future(session.call("bash", {"command": f"echo $$ > {pid_file}; sleep 300"}))
            while not pids_in(pid_file):
                await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return ok

    ok = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert ok.value["output"] == "async\n"
    assert wait_until(lambda: not alive(pids_in(pid_file)[0]), 10)


def test_refusals_at_open(server):
    with pytest.raises(SessionError) as refused:
        peon.RemoteSession(server.url, token="wrong-token-0123456789")
    assert refused.value.code == ErrorCode.UNAUTHORIZED
    with pytest.raises(SessionError) as unreachable:
        peon.RemoteSession("http://127.0.0.1:9/mcp", connect_timeout=2)
    assert unreachable.value.code == ErrorCode.CONNECTION_LOST
    with peon.RemoteSession(server.url, token=TOKEN, token_header="X-Peon-Token", protocol="2026-07-28") as session:
        assert session.call("bash", {"command": "echo via header"}).value["output"] == "via header\n"
    with pytest.raises(ValueError, match="protocol"):
        peon.RemoteSession(server.url, protocol="2024-01-01")


class CuttingProxy:
    """A TCP proxy on 127.0.0.1 that, when armed, hangs up on the client just before the chunk holding
    ``marker`` — while still reading the server's side to its end — so an answer is lost in transit."""

    def __init__(self, upstream_port: int, marker: bytes):
        self.upstream_port = upstream_port
        self.marker = marker
        self.armed = False
        self.cuts = 0
        self.connections: set[asyncio.Task] = set()
        self.writers: set[asyncio.StreamWriter] = set()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _handle(self, client_reader, client_writer) -> None:
        self.connections.add(asyncio.current_task())
        self.writers.add(client_writer)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self.writers.add(up_writer)

        async def upward():
            with contextlib.suppress(OSError):
                while data := await client_reader.read(65536):
                    up_writer.write(data)
                    await up_writer.drain()

        async def downward():
            cut = False
            with contextlib.suppress(OSError):
                while data := await up_reader.read(65536):
                    if not cut and self.armed and self.marker in data:
                        self.armed, cut = False, True
                        self.cuts += 1
                        client_writer.transport.abort()
                    if not cut:
                        client_writer.write(data)
                        await client_writer.drain()

        try:
            await asyncio.gather(upward(), downward())
        finally:
            for writer in (up_writer, client_writer):
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

    async def _shutdown(self) -> None:
        """Stop accepting, hang up every connection and let its task end, then stop the loop: nothing
        is left pending or unclosed."""
        self.server.close()
        for writer in self.writers:
            writer.transport.abort()
        await asyncio.gather(*self.connections, return_exceptions=True)
        await self.server.wait_closed()
        self.loop.stop()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(lambda: self.loop.create_task(self._shutdown()))
        self.thread.join(10)
        self.loop.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_lost_answer_is_retried_without_running_twice(server, protocol):
    counter = server.workspace / f"ran-{protocol}"
    proxy = CuttingProxy(server.port, b"LOST-IN-TRANSIT")
    try:
        with peon.RemoteSession(f"http://127.0.0.1:{proxy.port}/mcp", token=TOKEN, protocol=protocol) as session:
            proxy.armed = True
            result = session.call("bash", {"command": f"echo ran >> {counter.name}; echo LOST-IN-TRANSIT"})
    finally:
        proxy.close()
    assert proxy.cuts == 1, "the first answer was cut"
    assert result.ok and result.value["output"] == "LOST-IN-TRANSIT\n"
    assert counter.read_text() == "ran\n", "the retry got the stored result instead of running again"


def test_a_restarted_server_is_reconnected(env, workspace, tmp_path):
    """Under 2025-11-25 the new server does not know the old MCP session: the client opens another.
    (2026-07-28 has no session to lose.)"""
    protocol = "2025-11-25"
    first = ServeProcess(workspace, env, tmp_path, "--allow", "process")
    port = first.port
    with peon.RemoteSession(first.url, protocol=protocol) as session:
        assert session.call("bash", {"command": "echo one"}).value["output"] == "one\n"
        assert first.stop() == 0
        second = ServeProcess(workspace, env, tmp_path, "--allow", "process", "--port", str(port))
        try:
            again = session.call("bash", {"command": "echo two"})
            assert again.ok and again.value["output"] == "two\n", again
        finally:
            second.stop()


def test_a_client_connecting_the_moment_the_port_file_appears_is_served(env, workspace, tmp_path):
    serve = ServeProcess(workspace, env, tmp_path, "--allow", "process", wait=False)
    try:
        assert wait_until(serve.port_file.exists, 60), serve.log()
        serve.port = int(serve.port_file.read_text())
        with peon.RemoteSession(serve.url, ready_timeout=0) as session:  # no waiting: it must be ready already
            result = session.call("bash", {"command": "echo at once"})
            assert result.ok and result.value["output"] == "at once\n", result
            said = session.info["instructions"]  # the session's real sandbox, never the old fixed sentence
            assert "bash commands run in the OS sandbox" in said or "bash commands are not sandboxed (" in said, said
    finally:
        serve.stop()


def test_a_dead_server_is_connection_lost_not_a_hang(env, workspace, tmp_path):
    serve = ServeProcess(workspace, env, tmp_path, "--allow", "process")
    pid_file = workspace / "pid"
    with peon.RemoteSession(serve.url, retries=1, connect_timeout=2) as session:
        handle = session.submit("bash", {"command": f"echo $$ > {pid_file}; sleep 300"})
        assert wait_until(lambda: pids_in(pid_file), 20)
        serve.proc.kill()
        started = time.monotonic()
        result = handle.result(30)
        assert time.monotonic() - started < 20
        assert result.error.code == "connection_lost" and "attempt" in result.error.message
    serve.stop()
    assert wait_until(lambda: not alive(pids_in(pid_file)[0]), 10), "the session went down with its server"


@pytest.fixture
def env(leftovers, tmp_path) -> dict:
    return serve_env(leftovers, tmp_path)
