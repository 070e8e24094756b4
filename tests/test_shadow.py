"""Another distribution's ``supervisor`` package (PyPI has one) shadowing Peon's: importing peon says
so, and the advice it gives works — checked by following it, with real pip, in a throwaway virtual
environment, from wheels the test writes itself (nothing is built or downloaded: PIP_NO_INDEX)."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPORT_PEON = "import peon; print('peon imported')"


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))}
    env.update({"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"},
               **kwargs.pop("env", {}))
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, **kwargs)


def build_wheel(directory: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A pure-Python wheel of ``files`` (archive path → content), as pip installs and uninstalls them;
    written directly, so the test needs no build backend and no download."""
    info = f"{name}-{version}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: peon-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


def peon_wheel(directory: Path) -> Path:
    files = {}
    for package in ("peon", "supervisor", "workers"):
        for path in sorted((ROOT / package).rglob("*.py")):
            files[path.relative_to(ROOT).as_posix()] = path.read_bytes()
    for path in sorted((ROOT / "config").iterdir()):
        if path.suffix in (".toml", ".txt", ".py"):
            files[f"peon/_config/{path.name}"] = path.read_bytes()
    return build_wheel(directory, "peon", "0.1.0", files)


def other_supervisor_wheel(directory: Path) -> Path:
    """A stand-in for PyPI's supervisor: a distribution named 'supervisor' with a 'supervisor' package."""
    return build_wheel(directory, "supervisor", "4.2.5", {
        "supervisor/__init__.py": b"# the supervisor process control system\n",
        "supervisor/supervisord.py": b"def main():\n    pass\n",
    })


def test_a_package_earlier_on_the_path_is_named_with_advice(tmp_path):
    shadow = tmp_path / "shadow"
    (shadow / "supervisor").mkdir(parents=True)
    (shadow / "supervisor" / "__init__.py").write_text("# not Peon's\n")
    proc = run([sys.executable, "-c", IMPORT_PEON], env={"PYTHONPATH": f"{shadow}{os.pathsep}{ROOT}"}, cwd=tmp_path)
    assert proc.returncode == 1 and "peon imported" not in proc.stdout
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("ImportError: the module 'supervisor' found at")
    assert str(shadow / "supervisor") in message and f"is not Peon's ({ROOT / 'supervisor'})" in message
    assert "shadows it, earlier on sys.path" in message and "Take it off the path" in message
    proc = run([sys.executable, "-c", IMPORT_PEON], env={"PYTHONPATH": str(ROOT)}, cwd=tmp_path)  # following it works
    assert proc.returncode == 0 and proc.stdout == "peon imported\n"


def pip_for(python: str, command: str) -> list[str]:
    """``command`` ("<python> -m pip ...") run by this interpreter's pip against ``python``'s
    environment (``pip --python``), so the throwaway environment needs no pip of its own."""
    prefix = f"{python} -m pip "
    assert command.startswith(prefix), command
    return [sys.executable, "-m", "pip", "--python", python, *shlex.split(command[len(prefix):])]


def test_both_in_one_environment_the_advice_is_followed_and_works(tmp_path):
    venv = tmp_path / "venv"
    created = run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert created.returncode == 0, created.stderr
    python = str(venv / "bin" / "python")
    peon = peon_wheel(tmp_path)
    for wheel in (peon, other_supervisor_wheel(tmp_path)):  # Peon first, then the other: it overwrites
        installed = run(pip_for(python, f"{python} -m pip install --no-deps {wheel}"), cwd=tmp_path)
        assert installed.returncode == 0, installed.stdout + installed.stderr

    broken = run([python, "-c", IMPORT_PEON], cwd=tmp_path)
    assert broken.returncode == 1
    message = broken.stderr.strip().splitlines()[-1]
    assert "another distribution (supervisor) installed a package of the same name into the same directory" in message
    advice = re.search(r"in this order: (.*) && (.*) — or install Peon", message)
    assert advice, message
    uninstall, reinstall = advice.group(1), advice.group(2)
    assert uninstall == f"{python} -m pip uninstall supervisor"
    assert reinstall == f"{python} -m pip install --force-reinstall --no-deps {peon}"

    # Only uninstalling the other leaves Peon broken (they shared supervisor/__init__.py)...
    assert run([*pip_for(python, uninstall), "-y"], cwd=tmp_path).returncode == 0
    half = run([python, "-c", IMPORT_PEON], cwd=tmp_path)
    assert half.returncode == 1 and "is incomplete" in half.stderr and reinstall in half.stderr
    # ...and the reinstall the advice names next repairs it.
    repaired = run(pip_for(python, reinstall), cwd=tmp_path)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    fixed = run([python, "-c", IMPORT_PEON], cwd=tmp_path)
    assert fixed.returncode == 0 and fixed.stdout == "peon imported\n", fixed.stderr
