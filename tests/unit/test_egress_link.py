"""The egress proxy's questions and attempts reach the supervisor's loop: a connection question is settled by
a gate that waits in the session gate's line with grants of its own, and every ended attempt becomes a
``network`` line of the audit log."""

from __future__ import annotations

import asyncio
import json

from peon.approval.policy import ApprovalPolicy, ApprovalRequest
from peon.core.risk import ToolRisk
from peon.supervisor import egress_link
from peon.supervisor.approval.audit import AuditLog, network_entry
from peon.supervisor.approval.gate import ApprovalGate
from peon.supervisor.approval.grants import GrantStore

PER_RISK = {"read_only": "allow", "filesystem": "ask", "process": "ask", "delegate": "ask"}


def _gate(tmp_path, answers, sent, answered):
    """A session gate whose approver answers from ``answers``, handing each answer to the gates in ``answered``."""
    async def send(message):
        sent.append(message)
        decision = {"request_id": message["request_id"], **answers.pop(0)}
        for gate in answered:
            asyncio.get_running_loop().call_soon(gate.answer, decision)

    return ApprovalGate(ApprovalPolicy(PER_RISK), GrantStore(tmp_path), send, approver_connected=True,
                        timeout_seconds=5)


def test_a_question_is_put_to_the_approver_and_a_session_answer_is_the_networks_own(tmp_path):
    sent: list[dict] = []
    answered: list[ApprovalGate] = []
    gate = _gate(tmp_path, [{"decision": "allow_session", "scope": "risk"}, {"decision": "deny"}], sent, answered)
    network = egress_link.network_gate(gate, tmp_path)
    answered.extend([gate, network])  # as the session hands an answer to both (unknown ids are ignored)
    assert network.line is gate.line  # one question at a time with the tool calls'

    async def scenario():
        first = await egress_link.settle(network, "api.other.test", 443, "allow api.other.test:443 for this session?")
        again = await egress_link.settle(network, "b.other.test", 443, "allow b.other.test:443 for this session?")
        return first, again

    first, again = asyncio.run(scenario())
    assert first[0] == "allow_session" and again[0] == "allow_session"  # a "risk" grant covers the next host...
    assert len(sent) == 1 and sent[0]["tool"] == "network" and sent[0]["summary"].startswith("allow api.other.test")
    assert json.loads(sent[0]["canonical_input"]) == {"host": "api.other.test", "port": 443}
    bash = ApprovalRequest("c1", "bash", ToolRisk.PROCESS, "", "ls", {}, json.dumps({"command": "ls"}))
    assert gate.grants.find(bash) is None  # ... but never a tool call: the grants are the network gate's
    assert (tmp_path / "network-grants").is_dir()


def test_without_an_approver_a_question_is_denied(tmp_path):
    gate = ApprovalGate(ApprovalPolicy(PER_RISK), GrantStore(tmp_path), None, approver_connected=False,
                        timeout_seconds=5)
    answer, why = asyncio.run(egress_link.settle(egress_link.network_gate(gate, tmp_path), "x.test", 80, "q"))
    assert answer == "deny" and "no approver" in why


def test_attempts_become_network_lines_of_the_audit(tmp_path):
    entry = network_entry(session_id="s1", attempt={"host": "a.test", "port": 443, "address": "127.0.0.1",
                                                     "decision": "allowed", "bytes_sent": 3, "bytes_received": 4,
                                                     "duration_seconds": 0.5}, now=0.0)
    assert entry["event"] == "network" and entry["session_id"] == "s1" and entry["bytes_received"] == 4

    class FakeProxy:
        class policy:
            ask = False
        asker = None
        on_attempt = None

    log = AuditLog(tmp_path, 1 << 20, 1)

    async def scenario():
        proxy = FakeProxy()
        gate = ApprovalGate(ApprovalPolicy(PER_RISK), GrantStore(tmp_path), None, approver_connected=False,
                            timeout_seconds=5)
        egress_link.link(proxy, gate, log, "s1", tmp_path, asyncio.get_running_loop())  # type: ignore[arg-type]
        assert proxy.asker is None  # network_ask is off: nothing is asked
        proxy.on_attempt({"host": "a.test", "port": 80, "address": None, "decision": "denied", "bytes_sent": 0,
                          "bytes_received": 0, "duration_seconds": 0.0})
        await asyncio.sleep(0.05)

    asyncio.run(scenario())
    log.close()
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(line["event"], line["host"], line["decision"]) for line in lines] == [("network", "a.test", "denied")]
