"""The ``peon`` command as a user runs it: a subprocess with a private home beside the workspace, and the
check that a failure is a clear message on stderr with its exit status, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PEON = [sys.executable, "-m", "peon.cli"]


def isolated_env(leftovers, workspace: Path, extra: dict | None = None) -> dict:
    """A private home beside the workspace: no user configuration or login profile of the machine leaks
    in, and session state stays in the test's directory."""
    home = workspace.parent / "home"
    home.mkdir(exist_ok=True)
    return leftovers.env({"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
                          "XDG_STATE_HOME": str(home / ".local" / "state"), **(extra or {})})


def peon(leftovers, workspace: Path, *args: str, env: dict | None = None, input: str | None = None):
    return subprocess.run([*PEON, *args], capture_output=True, text=True, timeout=90, cwd=workspace,
                          env=isolated_env(leftovers, workspace, env), input=input)


def assert_clean_failure(proc, code: int, *words: str):
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr
