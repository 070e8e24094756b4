"""The CPU a session costs to open, serve one call and close, by what it runs on.

Opens ``--sessions`` embedded sessions one after another in a fresh workspace (each: open, one ``bash
true`` unless ``--no-call``, close) and prints, per session, the CPU time of this process and of its
children — the supervisor, the forkserver, the workers and what they ran, all reaped by the time a session
has closed (``getrusage(RUSAGE_CHILDREN)``) — and the wall time. With ``--sandbox off`` and with the
default, side by side when ``--both``. Load from the rest of the machine does not enter the CPU figures.

What this says about the test suite: most of its CPU is sessions opened and closed, so this figure times
the number of sessions a run opens is its floor.

Run: ``python bench/studies/session_start_cpu.py [--sessions 5] [--no-call] [--both]``
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from typing import Any

from peon import Session


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(sessions: int, config: dict[str, Any] | None, call: bool) -> tuple[float, float, float]:
    """(client CPU, children CPU, wall) per session, in seconds."""
    with tempfile.TemporaryDirectory() as workspace:
        mine, theirs, start = _self_cpu(), _children_cpu(), time.monotonic()
        for _ in range(sessions):
            with Session(workspace=workspace, config=config) as session:
                if call:
                    session.call("bash", {"command": "true"})
        return ((_self_cpu() - mine) / sessions, (_children_cpu() - theirs) / sessions,
                (time.monotonic() - start) / sessions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--no-call", action="store_true", help="open and close only")
    parser.add_argument("--both", action="store_true", help="also with the sandbox off")
    options = parser.parse_args()
    cases: list[tuple[str, dict[str, Any] | None]] = [("default", None)]
    if options.both:
        cases.append(("sandbox off", {"sandbox": {"mode": "off"}}))
    print("| session | client CPU | supervisor, forkserver, workers CPU | wall |")
    print("|---|---|---|---|")
    for label, config in cases:
        client, children, wall = measure(options.sessions, config, not options.no_call)
        print(f"| {label} | {client * 1e3:.0f} ms | {children * 1e3:.0f} ms | {wall * 1e3:.0f} ms |")


if __name__ == "__main__":
    main()
