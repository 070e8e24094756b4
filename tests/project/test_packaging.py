"""Peon as a distribution: installed under its own name (``peon-runtime``; ``peon`` on the public index is another
project), claiming no top-level import name but ``peon`` — so it shares an environment with PyPI's ``supervisor``.

Checked on a real wheel built from this tree by the build backend, installed with real pip into a throwaway
virtual environment (nothing is downloaded: ``--no-deps``, ``--no-index``, no build isolation)."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))}
    env.update({"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"})
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env, **kwargs)


def fake_wheel(directory: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A pure-Python wheel of ``files``, written directly (no build backend, no download)."""
    info = f"{name}-{version}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: peon-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
              f"{len(data)}" for path, data in files.items()]
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return wheel


@pytest.fixture(scope="module")
def peon_wheel(tmp_path_factory) -> Path:
    pytest.importorskip("setuptools", reason="the build backend (setuptools, part of the test extra) is not installed")
    out = tmp_path_factory.mktemp("wheel")
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
                cwd=out)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = out.glob("peon_runtime-*.whl")
    return wheel


def test_the_wheel_is_named_peon_runtime_and_installs_only_peon(peon_wheel):
    with zipfile.ZipFile(peon_wheel) as archive:
        names = archive.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        assert "\nName: peon-runtime\n" in archive.read(metadata).decode()
        entry_points = archive.read(metadata.replace("METADATA", "entry_points.txt")).decode()
    assert "peon = peon.cli.main:main" in entry_points  # the command keeps its name
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"peon"}
    for module in ("peon/supervisor/service.py", "peon/supervisor/__main__.py", "peon/workers/worker.py",
                   "peon/workers/forkserver.py", "peon/_config/defaults.toml"):
        assert module in names, module
    # Every module of the tree is in the wheel: a package left out of pyproject's list fails here.
    installed_as = {"peon": "peon", "supervisor": "peon/supervisor", "workers": "peon/workers",
                    "config": "peon/_config"}
    links = {ROOT / "peon" / "supervisor", ROOT / "peon" / "workers"}  # the other two folders, seen again
    tree = {f"{installed_as[folder]}/{path.relative_to(ROOT / folder)}"
            for folder in installed_as for path in (ROOT / folder).rglob("*.py")
            if not links & set(path.parents)}
    assert sorted(tree - set(names)) == []


def test_peon_and_pypis_supervisor_share_an_environment(peon_wheel, tmp_path):
    venv = tmp_path / "venv"
    created = run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert created.returncode == 0, created.stderr
    python = str(venv / "bin" / "python")

    def install(wheel: Path) -> None:
        done = run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", str(wheel)], cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr

    def probe(code: str) -> subprocess.CompletedProcess:
        return run([python, "-c", code], cwd=tmp_path)

    install(peon_wheel)
    alone = probe("import supervisor")
    assert alone.returncode == 1 and "No module named 'supervisor'" in alone.stderr
    assert probe("import workers").returncode == 1

    install(fake_wheel(tmp_path, "supervisor", "4.2.5", {
        "supervisor/__init__.py": b"WHO = 'supervisord'\n",
        "supervisor/supervisord.py": b"def main():\n    pass\n",
    }))
    both = probe("import importlib.util, peon, supervisor\n"
                 "print(supervisor.WHO)\n"
                 "print(importlib.util.find_spec('peon.supervisor.service').origin)\n"
                 "print(importlib.util.find_spec('peon.workers.worker').origin)\n")
    assert both.returncode == 0, both.stderr
    who, service, worker = both.stdout.split()
    assert who == "supervisord"
    assert service.startswith(str(venv)) and service.endswith("peon/supervisor/service.py")
    assert worker.startswith(str(venv)) and worker.endswith("peon/workers/worker.py")
