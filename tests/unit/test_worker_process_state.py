"""A worker's process attributes, recorded at its start, compared before each offer to serve again
(peon.workers.process_state): any change a call made — umask, a signal handler, a limit, the nice value —
is named, and undoing it leaves nothing to name. In this process, without starting one."""

from __future__ import annotations

import os
import resource
import signal

from peon.workers import process_state


def _lower_nofile() -> tuple[int, int]:
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (old[0] - 1, old[1]))
    return old


def test_every_change_is_named_and_undoing_it_leaves_none():
    process_state.record()
    assert process_state.changes() == []
    changes = {
        "umask": (lambda: os.umask(0o077), lambda old: os.umask(old)),
        "handlers": (lambda: signal.signal(signal.SIGUSR2, lambda *_: None),
                     lambda old: signal.signal(signal.SIGUSR2, old)),
        "RLIMIT_NOFILE": (_lower_nofile, lambda old: resource.setrlimit(resource.RLIMIT_NOFILE, old)),
    }
    for name, (change, undo) in changes.items():
        old = change()
        try:
            named = process_state.changes()
            assert any(line.startswith(f"{name}:") for line in named), (name, named)
        finally:
            undo(old)
        assert process_state.changes() == [], name


def test_nothing_recorded_is_a_difference(monkeypatch):
    monkeypatch.setattr(process_state, "_start", None)
    assert process_state.changes() == ["nothing was recorded at the worker's start"]
    process_state.record_once()
    assert process_state.changes() == []
