"""The fake coding agents (tests/fixtures/fake_agent.py) under the names the adapters start: single scripts,
pi laid out as its npm package, and a temporary PATH holding them all with their log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FAKE_AGENT = Path(__file__).parent.parent / "fixtures" / "fake_agent.py"
PI_PACKAGE = "@mariozechner/pi-coding-agent"


def fake_script(target: Path, shebang: str | None = None) -> Path:
    """The fake agent at ``target``, started by ``shebang`` (by default this interpreter, by path)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    body = FAKE_AGENT.read_text().split("\n", 1)[1]
    target.write_text(f"{shebang or '#!' + sys.executable}\n{body}")
    target.chmod(0o755)
    return target


def install_pi_package(prefix: Path, version: str | None, name: str = PI_PACKAGE) -> Path:
    """pi as npm lays it out: <prefix>/lib/node_modules/<package>/{package.json,dist/cli.js}, and
    <prefix>/bin/pi a link to dist/cli.js. Returns the package directory."""
    package = prefix / "lib" / "node_modules" / name
    fake_script(package / "dist" / "cli.js")
    manifest = {"name": name, "bin": {"pi": "dist/cli.js"}, "type": "module"}
    if version is not None:
        manifest["version"] = version
    (package / "package.json").write_text(json.dumps(manifest))
    (prefix / "bin").mkdir(parents=True, exist_ok=True)
    (prefix / "bin" / "pi").symlink_to(os.path.relpath(package / "dist" / "cli.js", prefix / "bin"))
    return package


def install_fake_agents(directory: Path, names=("claude", "codex", "pi"), pi_version: str | None = "0.84.3") -> Path:
    """The fake agent under each name in ``directory``, started by this interpreter; pi as its npm
    package of ``pi_version`` (``None``: a bare script with no package.json)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        if name == "pi" and pi_version is not None:
            install_pi_package(directory.parent / f"{directory.name}-pi-prefix", pi_version)
            (directory / "pi").symlink_to(directory.parent / f"{directory.name}-pi-prefix" / "bin" / "pi")
        else:
            fake_script(directory / name)
    return directory


class Agents:
    """A temporary PATH with the fake agents, their log, and an isolated user configuration."""

    def __init__(self, tmp_path: Path):
        self.bin = install_fake_agents(tmp_path / "bin")
        self.log = tmp_path / "agents.jsonl"
        self.config_home = tmp_path / "xdg"
        self.env = {"PATH": f"{self.bin}{os.pathsep}/usr/bin{os.pathsep}/bin", "FAKE_AGENT_LOG": str(self.log),
                    "XDG_CONFIG_HOME": str(self.config_home)}

    def records(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def run_directly(self, name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bin / name), *args], cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=30, env={**os.environ, **self.env, "FAKE_AGENT_LOG": ""})
