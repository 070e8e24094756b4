"""The egress proxy steered and visible: ``network_deny`` wins over a wildcard allow, ``network_ask`` puts an
unnamed host to the approver and remembers a session answer, and every attempt is kept with its address,
decision, bytes each way and duration. Names resolve through a table, servers listen on loopback: all traffic
stays on this machine."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading

import pytest

from helpers.proxy import running_proxy
from helpers.loopback import ANSWER, CountingServer
from peon.approval.network_allowlist import parse_host
from peon.approval.network_policy import NetworkPolicy, attempt_record, question
from peon.client.config.layers import load_config
from peon.core.errors import ConfigError
from peon.supervisor import egress
from peon.supervisor.egress import ATTEMPTS_SHOWN, name_refusals


@pytest.mark.parametrize("host, port, remembered, action, says", [
    ("api.example.test", 443, {}, "allow", "is named by sandbox.network"),
    ("evil.example.test", 443, {}, "deny", "sandbox.network_deny"),  # deny wins over the wildcard
    ("evil.example.test", 443, {"evil.example.test:443": True}, "deny", "sandbox.network_deny"),
    ("ads.example.test", 80, {}, "deny", "sandbox.network_deny"),  # a deny wildcard
    ("ads.example.test", 443, {}, "allow", "is named by sandbox.network"),  # ... for its port only
    ("other.test", 443, {}, "ask", "sandbox.network_ask = true"),
    ("other.test", 443, {"other.test:443": True}, "allow", "approver allowed"),
    ("other.test", 443, {"other.test:443": False}, "deny", "approver denied"),
    ("other.test", 444, {"other.test:443": True}, "ask", "sandbox.network_ask"),  # remembered by host:port
])
def test_deny_wins_then_allow_then_remembered_then_ask(host, port, remembered, action, says):
    policy = NetworkPolicy.from_settings(["*.example.test"], ["evil.example.test", "*.ads.example.test:80",
                                                              "ads.example.test:80"], ask=True)
    verdict = policy.decide(parse_host(host), port, remembered)
    assert verdict.action == action and says in verdict.reason


def test_without_ask_an_unnamed_host_is_refused_and_deny_names_addresses():
    policy = NetworkPolicy.from_settings(["*.example.test"], ["203.0.113.7:443"])
    assert policy.decide(parse_host("other.test"), 443).action == "deny"
    assert policy.address_denied(ipaddress.ip_address("203.0.113.7"), 443)
    assert not policy.address_denied(ipaddress.ip_address("203.0.113.7"), 80)
    assert question("api.example.test:443") == "allow api.example.test:443 for this session?"
    record = attempt_record("a.test", 443, "127.0.0.1", "allowed", 10, 20, 0.12345)
    assert record == {"host": "a.test", "port": 443, "address": "127.0.0.1", "decision": "allowed",
                      "bytes_sent": 10, "bytes_received": 20, "duration_seconds": 0.123}


def test_deny_entries_are_read_with_the_allowlists_grammar(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('[sandbox]\nnetwork = ["*.example.test"]\nnetwork_deny = ["evil.example.test"]\n'
                      "network_ask = true\n")
    loaded = load_config(config, env={})
    assert loaded.config.sandbox.network_deny == ("evil.example.test",) and loaded.config.sandbox.network_ask
    config.write_text('[sandbox]\nnetwork_deny = ["evil_host"]\n')
    with pytest.raises(ConfigError, match=r"sandbox\.network_deny"):
        load_config(config, env={})


@pytest.mark.parametrize("project, refused", [
    ('network_deny = ["evil.example.test", "more.example.test"]', None),  # adds an entry: tighter
    ('network_deny = ["more.example.test"]', "not remove ['evil.example.test']"),
    ("network_ask = true", "only turn network_ask off"),
    ("network_ask = false", None),
])
def test_a_project_may_only_add_deny_entries_and_turn_asking_off(tmp_path, project, refused):
    user = tmp_path / "user.toml"
    user.write_text('[sandbox]\nnetwork = ["*.example.test"]\nnetwork_deny = ["evil.example.test"]\n')
    (tmp_path / "ws" / ".peon").mkdir(parents=True)
    (tmp_path / "ws" / ".peon" / "config.toml").write_text(f"[sandbox]\n{project}\n")
    if refused is None:
        load_config(workspace=tmp_path / "ws", env={"PEON_CONFIG": str(user)})
        return
    with pytest.raises(ConfigError) as caught:
        load_config(workspace=tmp_path / "ws", env={"PEON_CONFIG": str(user)})
    assert refused in str(caught.value)


class Table:
    """The proxy's resolver, by a table (every name here resolves to a loopback address)."""

    def __init__(self, table: dict[str, str]):
        self.table, self.asked = table, []

    async def __call__(self, name: str, port: int):
        self.asked.append(name)
        if name not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [ipaddress.ip_address(self.table[name])]


class Approver:
    """Answers the proxy's questions from a list, keeping each question."""

    def __init__(self, *answers: str):
        self.answers, self.questions = list(answers), []

    async def __call__(self, name: str, port: int, text: str):
        self.questions.append(text)
        await asyncio.sleep(0.05)  # a second connection meanwhile joins the same question
        return self.answers.pop(0), "operator said so"




def tunnel(port: int, host: str, up: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"CONNECT {host}:{up} HTTP/1.1\r\n\r\nGET / HTTP/1.0\r\n\r\n".encode())
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_deny_entry_wins_over_a_wildcard_and_every_attempt_is_logged():
    with CountingServer() as target:
        up = target.port
        resolver = Table({"api.example.test": "127.0.0.1", "evil.example.test": "127.0.0.1"})
        entries = ["*.example.test", f"127.0.0.1:{up}"]
        with running_proxy(entries, resolver, deny=("evil.example.test",)) as (proxy, port):
            reached = tunnel(port, "api.example.test", up)
            assert reached.endswith(b"loopback reached") and target.accepted == 1
            refused = tunnel(port, "evil.example.test", up)
            assert refused.startswith(b"HTTP/1.1 403 ") and b"sandbox.network_deny" in refused
            assert target.accepted == 1 and resolver.asked == ["api.example.test"]  # refused before resolving
            allowed, denied = proxy.attempts_since(0.0)
        request = len(b"GET / HTTP/1.0\r\n\r\n")
        assert allowed["host"] == "api.example.test" and allowed["port"] == up
        assert allowed["address"] == "127.0.0.1" and allowed["decision"] == "allowed"
        assert allowed["bytes_sent"] == request and allowed["bytes_received"] == len(ANSWER)
        assert allowed["duration_seconds"] >= 0
        assert denied["decision"] == "denied" and denied["address"] is None
        assert denied["bytes_sent"] == denied["bytes_received"] == 0 and "network_deny" in denied["reason"]


def test_a_deny_entry_naming_an_address_holds_for_every_name_that_leads_there():
    with CountingServer() as target:
        up = target.port
        with running_proxy(["*.example.test", f"127.0.0.1:{up}"], Table({"api.example.test": "127.0.0.1"}),
                     deny=(f"127.0.0.1:{up}",)) as (proxy, port):
            refused = tunnel(port, "api.example.test", up)
        assert refused.startswith(b"HTTP/1.1 403 ") and b"named by sandbox.network_deny" in refused
        assert target.accepted == 0 and proxy.attempts_since(0.0)[0]["decision"] == "refused-address"


def test_network_ask_asks_once_and_remembers_a_session_answer():
    with CountingServer() as target:
        up = target.port
        approver = Approver("allow_session")
        resolver = Table({"api.other.test": "127.0.0.1"})
        with running_proxy([f"127.0.0.1:{up}"], resolver, ask=True, asker=approver) as (proxy, port):
            with concurrent_tunnels(2) as run:
                first, second = run(port, "api.other.test", up)
            assert first.endswith(b"loopback reached") and second.endswith(b"loopback reached")
            assert approver.questions == [f"allow api.other.test:{up} for this session?"]  # asked once for both
            assert tunnel(port, "api.other.test", up).endswith(b"loopback reached")
            assert len(approver.questions) == 1 and proxy.remembered == {f"api.other.test:{up}": True}
            attempts = proxy.attempts_since(0.0)
        assert [a["decision"] for a in attempts] == ["asked-allowed", "asked-allowed", "allowed"]
        assert "operator said so" in attempts[0]["reason"] and target.accepted == 3
        assert all(a["bytes_received"] == len(ANSWER) for a in attempts)


@pytest.mark.parametrize("answers, decisions, asked", [
    (("deny",), ["asked-denied", "denied"], 1),  # a denial is remembered too: asked once
    (("allow_once", "allow_once"), ["asked-allowed", "asked-allowed"], 2),  # good for one connection
    (("nonsense",), ["asked-denied", "denied"], 1),  # anything else is a denial
])
def test_network_ask_answers(answers, decisions, asked):
    with CountingServer() as target:
        up = target.port
        approver = Approver(*answers)
        with running_proxy([f"127.0.0.1:{up}"], Table({"x.other.test": "127.0.0.1"}), ask=True,
                     asker=approver) as (proxy, port):
            for _ in decisions:
                tunnel(port, "x.other.test", up)
            assert [a["decision"] for a in proxy.attempts_since(0.0)] == decisions
        assert len(approver.questions) == asked
        assert target.accepted == sum(d == "asked-allowed" for d in decisions)


def test_network_ask_without_an_approver_or_with_a_failing_one_refuses():
    async def failing(name, port, text):
        raise OSError("the client is gone")

    with CountingServer() as target:
        up = target.port
        for asker in (None, failing):
            with running_proxy([f"127.0.0.1:{up}"], Table({"x.other.test": "127.0.0.1"}), ask=True,
                         asker=asker) as (proxy, port):
                refused = tunnel(port, "x.other.test", up)
                assert refused.startswith(b"HTTP/1.1 403 ")
                assert proxy.attempts_since(0.0)[0]["decision"] == "asked-denied"
        assert target.accepted == 0


@contextlib.contextmanager
def concurrent_tunnels(count: int):
    def run(port, host, up):
        results: list[bytes] = [b""] * count

        def one(index):
            results[index] = tunnel(port, host, up)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        return results

    yield run


def test_a_calls_result_lists_the_attempts_begun_while_it_ran(monkeypatch):
    with CountingServer() as target:
        up = target.port
        resolver = Table({"a.example.test": "127.0.0.1"})
        with running_proxy([f"127.0.0.1:{up}", "*.example.test"], resolver) as (proxy, port):
            monkeypatch.setattr(egress, "_running", proxy)
            for _ in range(ATTEMPTS_SHOWN + 2):
                tunnel(port, "nowhere.test", up)
            tunnel(port, "a.example.test", up)
            reply = name_refusals({"ok": True, "value": {"sandbox": {"active": True}}}, 0.0)
            assert egress.attempts_since(0.0)[-1]["decision"] == "allowed"
        box = reply["value"]["sandbox"]
        assert len(box["connections"]) == ATTEMPTS_SHOWN and box["connections_not_shown"] == 3
        assert box["refused"] == [f"nowhere.test:{up}"]
        untouched = {"ok": True, "value": {"text": "no sandbox"}}
        assert name_refusals(untouched, 0.0) is untouched
