"""README.md names every step from a fresh checkout to a passing suite, and CI runs the README's own command.

A new contributor follows README.md alone: Peon is installed into a virtual environment (a system Python
may refuse ``pip install`` outside one), every pinned JavaScript client the suite drives is installed by an
``npm ci`` README names (and ``.ci/run`` runs), the test command is the line ``.ci/run`` extracts, and the
fast tier is named.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
README = (ROOT / "README.md").read_text()
CI = (ROOT / ".ci" / "run").read_text()


def fenced_blocks(text: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M)


def ci_test_command() -> str | None:
    """The line ``.ci/run`` runs: the first ``python -m pip install`` line after ``Run the tests:``."""
    found = False
    for line in README.splitlines():
        found = found or line.startswith("Run the tests:")
        if found and line.startswith("python -m pip install"):
            return line
    return None


def test_ci_runs_the_readme_test_command():
    assert "awk '/^Run the tests:/{found=1} found && /^python -m pip install/{print; exit}' README.md" in CI
    command = ci_test_command()
    assert command is not None and command.startswith("python -m pip install -e '.[test]' && python -m pytest")


def test_peon_is_installed_into_a_virtual_environment_first():
    installs = [block for block in fenced_blocks(README) if re.search(r"pip install \.$", block, flags=re.M)]
    assert installs, "README.md has no block that installs Peon from the checkout"
    first = installs[0]
    assert first.index("python -m venv") < first.index(". .venv/bin/activate") < first.index("pip install .")


def test_every_pinned_javascript_client_is_installed_by_a_step_readme_names_and_ci_runs():
    locks = sorted(path.parent.relative_to(ROOT).as_posix() for path in (ROOT / "tests").rglob("package-lock.json")
                   if "node_modules" not in path.parts)
    assert locks, "no pinned JavaScript clients found"
    for directory in locks:
        assert re.search(rf"^npm ci --prefix {re.escape(directory)}\b", README, flags=re.M), directory
        assert f"local dir={directory}" in CI, directory


def test_readme_names_the_fast_tier():
    assert "`python -m pytest -q tests/unit`" in README
    assert (ROOT / "tests" / "unit" / "conftest.py").exists()
