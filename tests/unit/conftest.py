"""The pure tier: no test here may start a process.

Every way Python starts one (``os.fork``/``posix_spawn``/``exec*``, ``subprocess``, ``multiprocessing``) raises
for the duration of each test here, so a test that needs a process fails instead of silently belonging to
another tier. ``pytest tests/unit`` runs this tier alone, in seconds.
"""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess

import pytest


class ProcessStarted(AssertionError):
    """A unit test tried to start a process."""


def _refuse(*args: object, **kwargs: object) -> None:
    raise ProcessStarted("a test in tests/unit started a process; it belongs to another tier")


@pytest.fixture(autouse=True)
def no_processes(monkeypatch):
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system",
                 "execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse)
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", _refuse)
    yield
