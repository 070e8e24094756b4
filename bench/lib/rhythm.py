"""How the benchmarks time cases side by side: "back to back" in alternating blocks, or "apart".

A case timed back to back runs ``block`` times in a row; the first run of each block follows the other
cases' work, not its own, and is not counted. The cases take turns block by block, so that load from
elsewhere on the machine falls on each of them alike.

Taking turns call by call instead would not be back to back for a call through a session: each would
follow a few milliseconds of other work, in which the session starts its next standby on an idle core,
so the cost that consecutive calls share — the next worker's fork, warm-up and the last one's exit,
competing with the call for the two cores — would fall outside every timed call.

Cases timed apart take turns call by call, each after a pause (an agent's rhythm): a call through a
session then finds its standby ready and the machine idle.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

BLOCK = 10


def back_to_back(cases: Mapping[str, Callable[[], object]], calls: int, block: int = BLOCK) -> dict[str, list[float]]:
    """``calls`` timings (seconds) of each case, each run right after a run of the same case."""
    if block < 2:
        raise ValueError(f"a block must hold at least 2 runs (the first is not counted), not {block}")
    samples: dict[str, list[float]] = {name: [] for name in cases}
    while any(len(times) < calls for times in samples.values()):
        for name, run in cases.items():
            run()  # follows the other cases' work: not counted
            for _ in range(min(block - 1, calls - len(samples[name]))):
                started = time.perf_counter()
                run()
                samples[name].append(time.perf_counter() - started)
    return samples


def apart(cases: Mapping[str, Callable[[], object]], calls: int, gap: float) -> dict[str, list[float]]:
    """``calls`` timings (seconds) of each case, each run ``gap`` seconds after the run before it."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(calls):
        for name, run in cases.items():
            time.sleep(gap)
            started = time.perf_counter()
            run()
            samples[name].append(time.perf_counter() - started)
    return samples
