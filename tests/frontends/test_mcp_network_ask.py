"""``sandbox.network_ask`` through ``peon mcp`` and ``peon serve``: a connection to a host ``sandbox.network``
does not name is put to the MCP client whose command connects (an ``elicitation/create`` in the middle of
its ``tools/call``, official MCP Python SDK), and the answer decides; a client that cannot be asked gets a
refusal. The server listens on the host's loopback: all traffic stays on this machine."""

from __future__ import annotations

import shlex
import sys

import pytest
from mcp.client import Client
from mcp_types import ElicitResult

from helpers.loopback import text_server
from helpers.mcp import client, run, write_config
from helpers.serve import ServeProcess
from peon.workers.sandbox import landlock as ll
from peon.workers.sandbox import namespaces

ABI = ll.abi_version().abi
NAMESPACES = namespaces.probe()
pytestmark = pytest.mark.skipif(ABI < ll.SCOPE_ABI or bool(NAMESPACES),
                                reason=f"needs the session's network namespace and Landlock ABI 6+ (this kernel: "
                                       f"{ABI}; namespaces: {NAMESPACES or 'available'})")

FETCH = (f"env -u NO_PROXY -u no_proxy {shlex.quote(sys.executable)} -c \"import sys, urllib.request, urllib.error\n"
         "try: print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())\n"
         "except urllib.error.HTTPError as e: print(e.code, e.read().decode())\"")


@pytest.fixture
def registry():
    server = text_server("the asked registry")
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def config(tmp_path) -> str:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    # localhost names the loopback addresses; the literal 127.0.0.1 is a host the list does not name
    return write_config(tmp_path, '[approval]\nprocess = "allow"\n'
                                  '[sandbox]\nnetwork = ["localhost"]\nnetwork_ask = true\n')


@pytest.mark.parametrize("decision", ["allow_session", "deny"])
def test_the_client_whose_command_connects_is_asked(workspace, env, tmp_path, registry, decision):
    seen = []

    async def answer(context, params):
        seen.append(params)
        return ElicitResult(action="accept", content={"decision": decision, "scope": "call"})

    async def scenario():
        async with client(workspace, {**env, "TMPDIR": str(tmp_path / "tmp")}, "--config", config(tmp_path),
                          mode="legacy", elicitation_callback=answer) as c:
            return await c.call_tool("bash", {"command": f"{FETCH} http://127.0.0.1:{registry}/"})

    result = run(scenario())
    assert not result.is_error, result
    assert len(seen) == 1 and f"127.0.0.1:{registry}" in seen[0].message, [s.message for s in seen]
    output = result.structured_content["output"]
    if decision == "allow_session":
        assert output.strip() == "the asked registry", output
    else:
        assert output.startswith("403 ") and "the asked registry" not in output, output


def test_a_client_that_cannot_be_asked_is_refused_with_the_reason(workspace, env, tmp_path, registry):
    async def scenario():
        async with client(workspace, {**env, "TMPDIR": str(tmp_path / "tmp")}, "--config", config(tmp_path),
                          mode="legacy") as c:
            return await c.call_tool("bash", {"command": f"{FETCH} http://127.0.0.1:{registry}/"})

    result = run(scenario())
    output = result.structured_content["output"]
    assert output.startswith("403 ") and "the asked registry" not in output, output


def test_peon_serve_asks_the_client_whose_command_connects(workspace, env, tmp_path, registry):
    seen = []

    async def answer(context, params):
        seen.append(params)
        return ElicitResult(action="accept", content={"decision": "allow_once"})

    server = ServeProcess(workspace, {**env, "TMPDIR": str(tmp_path / "tmp")}, tmp_path, "--config", config(tmp_path))
    try:
        async def scenario():
            async with Client(server.url, mode="legacy", elicitation_callback=answer) as c:
                return await c.call_tool("bash", {"command": f"{FETCH} http://127.0.0.1:{registry}/"})

        result = run(scenario())
    finally:
        server.stop()
    assert not result.is_error, result
    assert len(seen) == 1 and f"127.0.0.1:{registry}" in seen[0].message
    assert result.structured_content["output"].strip() == "the asked registry"
    [attempt] = result.structured_content["sandbox"]["connections"]
    assert (attempt["port"], attempt["decision"]) == (registry, "asked-allowed") and attempt["bytes_received"] > 0

