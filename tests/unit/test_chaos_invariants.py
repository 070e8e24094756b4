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
