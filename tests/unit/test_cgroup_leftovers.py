"""Leftover cgroups, the decision alone: a ``peon-*`` cgroup's owner is read from its name, and only an empty
cgroup of a gone supervisor is removed (a session abandoned for good is ended)."""

from __future__ import annotations

import pytest

from peon.workers.cgroup import judge_leftover, owner_pid


# -- the decision (pure) and its evidence -----------------------------------------------------------

def test_the_owner_is_read_from_peon_names_only():
    assert owner_pid("peon-4c1e9a0b2f3d4e5f-4242") == 4242
    assert owner_pid("peon-my-own-session-id-17") == 17  # a session id may hold dashes
    assert owner_pid("peon-probe-99-123456789") == 99  # a probe that died half-way
    assert owner_pid("peon-") is None and owner_pid("peon-abc") is None and owner_pid("other-session-12") is None


@pytest.mark.parametrize(("owner", "populated", "verdict"), [
    ("gone", False, "remove"),
    ("reused", False, "remove"),
    ("alive", False, "keep: its supervisor may be alive"),
    ("gone", True, "end: its supervisor is gone"),
    ("reused", True, "end: its supervisor is gone"),
    ("alive", True, "keep: it holds processes"),
])
def test_only_an_empty_cgroup_of_a_gone_supervisor_is_removed(owner, populated, verdict):
    """Removed when empty; when it still holds processes, no supervisor answers for them any more: ended."""
    assert judge_leftover("peon-4c1e9a0b2f3d4e5f-4242", owner, populated) == verdict
    assert judge_leftover("user-service", owner, populated) == "not Peon's"


@pytest.mark.parametrize("owner", ["gone", "reused"])
def test_processes_of_another_pid_namespace_are_kept(owner):
    """The pid in the name is one of the pid namespace the supervisor ran in: when no member is in this
    one, its being gone here proves nothing."""
    assert judge_leftover("peon-4c1e9a0b2f3d4e5f-4242", owner, True, visible=False) == (
        "keep: its processes are in another pid namespace")
    assert judge_leftover("peon-4c1e9a0b2f3d4e5f-4242", owner, False, visible=False) == "remove"


@pytest.mark.parametrize("populated", [False, True])
def test_a_session_abandoned_for_good_is_ended(populated):
    assert judge_leftover("peon-4c1e9a0b2f3d4e5f-4242", "abandoned", populated) == (
        "end: its supervisor is stopped and its client is gone")
    assert judge_leftover("peon-probe-4242-99", "abandoned", False) == "remove"  # a probe's is only removed

