"""bench/robustness/chaos.py's invariants over recorded events (pure): each kind of violation is found, and a
clean record passes."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture
def chaos(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(ROOT))
    from bench.robustness import chaos

    return chaos


def _call(call_id: str, t: float, *, ok=True, code=None, took=0.1, bound=10.0, wrong=None, checked=True) -> dict:
    return {"op": "call", "kind": "bash", "call_id": call_id, "t": t, "took": took, "bound": bound, "ok": ok,
            "code": code, "wrong": wrong, "checked": checked}


def test_a_clean_record_has_no_violation(chaos):
    inst = chaos.Instance(0, "cgroup", "tag", Path("/s"), [_call("a", 1.0), _call("b", 20.0)])
    fault = chaos.Fault(0, "signal SIGKILL", 10.0, 10.0, "1 peon-worker")
    audit = {"/s": {"decided": {"a", "b"}, "broken": []}}
    assert chaos.violations([inst], [fault], audit, end=100.0, recovery=30.0) == []


def test_each_broken_invariant_is_found(chaos):
    events = [
        _call("late", 1.0, took=30.0, bound=10.0),  # past its bound (+ slack)
        _call("lost", 2.0, took=None, ok=False, code="unanswered"),  # never answered
        _call("wrong", 3.0, wrong="output 'x'"),  # ok but wrong
        _call("unaudited", 4.0),  # ran with no decision line
        _call("crashed", 5.0, ok=False, code="worker_crashed"),  # ran too: needs its decision line
        {"op": "no_recovery", "t": 6.0, "why": "session_closed: gone"},
    ]
    inst = chaos.Instance(1, "process-tree", "tag", Path("/s"), events, killed=True, leftovers=["42 'sleep 100'"])
    faults = [chaos.Fault(1, "full_disk", 10.0, 12.0, "/slot"), chaos.Fault(1, "client_death", 95.0, 95.0, "x")]
    audit = {"/s": {"decided": {"late", "lost", "wrong"}, "broken": ['{"event":"decis']}}
    found = chaos.violations([inst], faults, audit, end=100.0, recovery=30.0)
    text = "\n".join(found)
    assert "late" in text and "not answered by its bound" in text
    assert "lost: not answered by its bound" in text
    assert "ok but wrong: output 'x'" in text
    assert "unaudited: ran (ok) with no decision line" in text and "crashed: ran (worker_crashed)" in text
    assert "audit line not whole JSON" in text
    assert "could not be reopened" in text
    assert "left alive after its client died: 42 'sleep 100'" in text
    assert "no ok call within 30 s after full_disk" in text
    assert "client_death" not in text  # too close to the end to judge
    assert len(found) == 9


def test_a_job_of_a_closed_session_with_no_job_ended_line_is_found(chaos):
    closed = [_call("a", 1.0), {"op": "closed", "t": 2.0}]
    audit = {"/s": {"decided": {"a"}, "broken": [], "unended": {"j1", "j2"}, "lost": 1}}
    found = chaos.violations([chaos.Instance(0, "cgroup", "tag", Path("/s"), closed)], [], audit, 100.0, 30.0)
    assert found == ["slot 0 (cgroup): job j1 started with no job_ended line in the audit log",
                     "slot 0 (cgroup): job j2 started with no job_ended line in the audit log"]
    # Counted by a lost line, or its session's supervisor died (its lines died with it): not a violation.
    audit["/s"]["lost"] = 2
    assert chaos.violations([chaos.Instance(0, "cgroup", "tag", Path("/s"), closed)], [], audit, 100.0, 30.0) == []
    audit["/s"]["lost"] = 0
    died = [_call("a", 1.0, ok=False, code="supervisor_died"), {"op": "closed", "t": 2.0}]
    assert chaos.violations([chaos.Instance(0, "cgroup", "tag", Path("/s"), died)], [], audit, 100.0, 30.0) == []


def test_an_edge_attack_that_failed_and_left_something_is_found(chaos):
    """A sandboxed session's attack on the sandbox's edges is judged whatever its answer: one that failed
    and still left something behind is a violation, named as such, with the session's sandbox."""
    events = [_call("a", 1.0, ok=False, code="worker_crashed", wrong="agent-control files left: ['.envrc']")]
    inst = chaos.Instance(2, "cgroup", "tag", Path("/s"), events, sandbox="auto")
    found = chaos.violations([inst], [], {"/s": {"decided": {"a"}, "broken": []}}, 100.0, 30.0)
    assert found == ["slot 2 (cgroup, sandboxed) bash a: failed, and wrong after it: "
                     "agent-control files left: ['.envrc']"]


def test_the_proxy_check_finds_a_connection_or_an_answer_that_let_one_through(chaos):
    from types import SimpleNamespace

    from bench.robustness import chaos_edges

    quiet = SimpleNamespace(server=SimpleNamespace(accepted=0))
    reached = SimpleNamespace(server=SimpleNamespace(accepted=1))
    refused = {"exit_code": 0, "output": "HTTP/1.1 400 Bad Request\nHTTP/1.1 403 Forbidden\n"}
    assert chaos_edges.check_proxy(quiet, refused) is None
    assert "accepted 1 connection" in chaos_edges.check_proxy(reached, refused)
    assert "otherwise than 400/403" in chaos_edges.check_proxy(quiet, {"exit_code": 0, "output": "HTTP/1.1 200 OK\n"})
    assert chaos_edges.check_proxy(quiet, {}) is None  # the attack failed (a fault): only the server is judged
