"""peon.workers.orphans.judge (pure): which of Peon's processes are abandoned for good — stopped and cut
off from their session — and which are not."""

from __future__ import annotations

import pytest

from peon.workers.orphans import Seen, judge


def seen(title: str, parent_title: str = "", *, state: str = "T", ppid: int = 4242) -> Seen:
    return Seen(pid=99, state=state, title=title, parent_title=parent_title, ppid=ppid)


@pytest.mark.parametrize("process", [
    seen("peon-supervisor /w", ppid=1),  # its client died
    seen("peon-forkserver /w", "python client.py"),  # reparented past its dead supervisor
    seen("peon-forkserver /w", "", ppid=1),
    seen("peon-worker bash 0088e5cf04f2", "", ppid=1),  # its forkserver and supervisor died
    seen("peon-worker standby", "/usr/bin/python3 agent.py"),  # reparented to a subreaper that is no Peon's
])
def test_a_stopped_peon_process_cut_off_from_its_session_is_abandoned(process):
    assert judge(process)


@pytest.mark.parametrize("process", [
    seen("peon-supervisor /w", "python client.py"),  # stopped, but its client lives: it kills it if need be
    seen("peon-forkserver /w", "peon-supervisor /w"),  # its supervisor lives
    seen("peon-worker bash 1", "peon-forkserver /w"),
    seen("peon-worker bash 1", "peon-supervisor /w"),  # its forkserver died; the supervisor, a subreaper, lives
    seen("peon-worker bash 1", "", state="S", ppid=1),  # running: it ends itself
    seen("peon-supervisor /w", state="Z", ppid=1),
    seen("python peon-worker", "", ppid=1),  # not a title of Peon's
    seen("peon-workers", "", ppid=1),
])
def test_a_running_process_or_one_its_session_still_holds_is_not(process):
    assert not judge(process)
