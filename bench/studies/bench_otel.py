"""The CPU cost of OpenTelemetry in ``peon serve``: the same calls against servers without and with an
OTLP endpoint, in the same run.

Two ``peon serve`` processes on loopback (each its own workspace) with the ``otel`` extra installed: one
without ``OTEL_EXPORTER_OTLP_ENDPOINT`` (nothing of OpenTelemetry is loaded), one exporting spans and
metrics to an OTLP/HTTP receiver in this process (it accepts and drops them). Rounds alternate between
the two; each round sends ``--calls`` stateless 2026-07-28 ``tools/call`` requests (``bash true`` or a
``read``) one after another over plain HTTP and takes the CPU time (user + system, from ``/proc``) per
call of the server process (where OpenTelemetry runs) and of its whole tree (the server, its session's
supervisor, forkserver and the reaped workers and commands). Printed: the medians per variant and their
ratio (target: the whole tree's, endpoint <= 1.05 x no endpoint).

Run: ``python bench/studies/bench_otel.py [--calls 200] [--rounds 5] [--tool bash]``
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench.lib and its peon, from anywhere

import psutil

MODERN = "2026-07-28"


class Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def start_server(root: Path, name: str, extra_env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    workspace = root / name
    workspace.mkdir()
    (workspace / "data.txt").write_text("x" * 1024)
    port_file = root / f"{name}.port"
    env = {**os.environ, "HOME": str(root / "home"), **extra_env}
    env.pop("PEON_SERVE_TOKEN", None)
    if not extra_env:
        env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
    proc = subprocess.Popen([sys.executable, "-m", "peon.cli", "serve", "--workspace", str(workspace), "--port", "0",
                             "--port-file", str(port_file), "--allow", "process"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"peon serve ({name}) did not start")
        time.sleep(0.05)
    port = int(port_file.read_text())
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"peon serve ({name}) did not get ready")
        time.sleep(0.1)
    return proc, port


def call(conn: http.client.HTTPConnection, request_id: int, tool: str) -> None:
    arguments = {"command": "true"} if tool == "bash" else {"path": "data.txt"}
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments,
                       "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                                 "io.modelcontextprotocol/clientCapabilities": {}}}}
    conn.request("POST", "/mcp", body=json.dumps(body), headers={
        "content-type": "application/json", "accept": "application/json, text/event-stream",
        "mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": tool})
    response = conn.getresponse()
    data = response.read()
    if response.status != 200 or b'"isError":false' not in data:
        raise AssertionError(f"a call failed: {data[:200]!r}")


def tree_cpu(process: psutil.Process) -> tuple[float, float]:
    """(the server process's own CPU seconds, its whole tree's: living descendants and reaped children)."""
    def total(times: psutil._common.pcputimes) -> float:
        return times.user + times.system + times.children_user + times.children_system

    own = process.cpu_times()
    tree = total(own)
    for child in process.children(recursive=True):
        try:
            tree += total(child.cpu_times())
        except psutil.Error:
            continue
    return own.user + own.system, tree


def round_cpu_ms(proc: subprocess.Popen[bytes], port: int, calls: int, tool: str) -> tuple[float, float]:
    process = psutil.Process(proc.pid)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    call(conn, 0, tool)  # warm the connection
    before = tree_cpu(process)
    for index in range(calls):
        call(conn, index + 1, tool)
    time.sleep(0.3)  # the last workers are reaped
    after = tree_cpu(process)
    conn.close()
    return (after[0] - before[0]) * 1000 / calls, (after[1] - before[1]) * 1000 / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tool", choices=("bash", "read"), default="bash")
    options = parser.parse_args()
    sink = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{sink.server_address[1]}"
    with tempfile.TemporaryDirectory(prefix="peon-bench-otel-") as tmp:
        root = Path(tmp)
        (root / "home").mkdir()
        servers = {"no endpoint": start_server(root, "plain", {}),
                   "endpoint": start_server(root, "otel", {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
                                                           "OTEL_SERVICE_NAME": "peon-bench"})}
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in servers}
        try:
            for _ in range(options.rounds):
                for name, (proc, port) in servers.items():
                    figures[name].append(round_cpu_ms(proc, port, options.calls, options.tool))
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(30)
            sink.shutdown()
    for index, what in enumerate(("server process", "whole tree")):
        medians = {name: statistics.median(v[index] for v in values) for name, values in figures.items()}
        for name, values in figures.items():
            print(f"{what:14} {name:12} CPU per {options.tool} call: median {medians[name]:.3f} ms "
                  f"(rounds: {', '.join(f'{v[index]:.3f}' for v in values)})")
        print(f"{what:14} endpoint / no endpoint: {medians['endpoint'] / medians['no endpoint']:.3f}x"
              + ("  (target <= 1.05x)" if index else ""))


if __name__ == "__main__":
    main()
