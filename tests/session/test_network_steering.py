"""A session's egress proxy steered and visible: a ``network_deny`` entry wins over a broader allow entry,
``network_ask`` puts an unnamed host to the session's approver once and remembers the answer, and each
connection attempt is listed in the call's ``sandbox.network`` and written to the audit with its bytes. The
servers listen on the host's loopback: all traffic stays on this machine."""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from helpers import jsonl_entries
from helpers.loopback import text_server
from peon.workers.sandbox import landlock as ll
from peon.workers.sandbox import namespaces

ABI = ll.abi_version().abi
NAMESPACES = namespaces.probe()
NEEDS_NAMESPACE = pytest.mark.skipif(ABI < ll.SCOPE_ABI or bool(NAMESPACES),
                                     reason=f"needs the session's network namespace and Landlock ABI 6+ (this kernel: "
                                            f"{ABI}; namespaces: {NAMESPACES or 'available'})")

FETCH = (f"{shlex.quote(sys.executable)} -c \"import sys, urllib.request, urllib.error\n"
         "try: print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())\n"
         "except urllib.error.HTTPError as e: print(e.code, e.read().decode())\"")




@NEEDS_NAMESPACE
def test_deny_wins_ask_asks_once_and_every_attempt_is_listed_and_audited(open_session, tmp_path):
    denied, asked = text_server("the denied registry"), text_server("the asked registry")
    questions: list[dict] = []

    def approver(request):
        questions.append(request)
        return {"decision": "allow_session", "scope": "call", "reason": "the build needs it"}

    try:
        a, b = denied.server_address[1], asked.server_address[1]
        (tmp_path / "tmp").mkdir()
        session = open_session({"sandbox": {"network": ["localhost"], "network_deny": [f"localhost:{a}"],
                                            "network_ask": True}},
                               env={"TMPDIR": str(tmp_path / "tmp")}, approver=approver)
        get = f"env -u NO_PROXY -u no_proxy {FETCH}"
        r = session.call("bash", {"command": f"{get} http://localhost:{a}/; {get} http://127.0.0.1:{b}/; "
                                             f"{get} http://127.0.0.1:{b}/; {get} http://localhost:{b}/"})
        assert r.ok, r.error
        lines = [line for line in r.value["output"].splitlines() if line]  # the 403 body ends with its own newline
        assert lines[0].startswith("403 ") and "sandbox.network_deny" in lines[0], lines
        assert lines[1:] == ["the asked registry"] * 3, lines
        assert [q["summary"] for q in questions] == [f"allow 127.0.0.1:{b} for this session?"]  # asked once
        assert questions[0]["tool"] == "network"
        network = r.value["sandbox"]["connections"]
        assert [(n["host"], n["port"], n["decision"]) for n in network] == [
            ("localhost", a, "denied"), ("127.0.0.1", b, "asked-allowed"), ("127.0.0.1", b, "allowed"),
            ("localhost", b, "allowed")]
        for attempt in network[1:]:
            assert attempt["address"] == "127.0.0.1" and attempt["bytes_sent"] > 0
            assert attempt["bytes_received"] > len("the asked registry")
        assert network[0]["bytes_sent"] == network[0]["bytes_received"] == 0 and network[0]["address"] is None
        state_dir = session.state_dir
    finally:
        denied.shutdown()
        asked.shutdown()
    session.close()
    audited = [e for e in jsonl_entries(f"{state_dir}/audit.jsonl") if e["event"] == "network"]
    assert [(e["host"], e["decision"]) for e in audited] == [(n["host"], n["decision"]) for n in network]
    assert [e["bytes_received"] for e in audited] == [n["bytes_received"] for n in network]
    assert "the build needs it" in audited[1]["reason"] and json.dumps(audited)


PROBE_DIRECT = (f"{shlex.quote(sys.executable)} -c \"import socket, sys\n"
                "try: socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5); print('direct reached')\n"
                "except OSError as e: print('direct refused', e.errno)\"")


@pytest.mark.skipif(ABI < ll.NET_ABI, reason=f"Landlock TCP rules need ABI {ll.NET_ABI} (this kernel: {ABI})")
def test_without_the_namespace_landlock_confines_tcp_to_the_proxy(open_session, tmp_path):
    """No network namespace (as without root): the proxy listens on the host's loopback and Landlock lets a
    command connect to its port only; a direct connection elsewhere is refused by the kernel."""
    allowed, other = text_server("the allowed registry"), text_server("the other registry")
    try:
        a, b = allowed.server_address[1], other.server_address[1]
        (tmp_path / "tmp").mkdir()
        session = open_session({"sandbox": {"network": [f"localhost:{a}"]}},
                               env={"TMPDIR": str(tmp_path / "tmp"), "PEON_SANDBOX_SIMULATE": "no-namespaces"})
        status = session.info["sandbox"]
        egress = status["egress"]
        assert egress["netns"] == "" and egress["confined_by"].startswith("Landlock TCP rules")
        proxy_port = status["plan"]["proxy_port"]
        assert egress["proxy"] == f"http://127.0.0.1:{proxy_port}"
        get = f"env -u NO_PROXY -u no_proxy {FETCH}"
        r = session.call("bash", {"command": f"{get} http://localhost:{a}/; {get} http://localhost:{b}/; "
                                             f"{PROBE_DIRECT} {b}"})
        assert r.ok, r.error
        lines = [line for line in r.value["output"].splitlines() if line]
        assert lines[0] == "the allowed registry", lines
        assert lines[1].startswith("403 ") and f"localhost:{b} is not in sandbox.network" in lines[1], lines
        assert lines[2].startswith("direct refused"), lines  # Landlock: only the proxy's port
        assert [(n["host"], n["decision"]) for n in r.value["sandbox"]["connections"]] == [
            ("localhost", "allowed"), ("localhost", "denied")]
        assert any("names ports, not hosts" in gap for gap in status["not_enforced"])
    finally:
        allowed.shutdown()
        other.shutdown()
