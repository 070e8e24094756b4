"""The limits watchdog: it samples until its time, then waits to be cancelled."""

from __future__ import annotations

import asyncio
import math

from peon.workers import limits


class _CountingProbe:
    def __init__(self, verdict: str | None):
        self.verdict = verdict
        self.checks = 0

    def check(self) -> str | None:
        self.checks += 1
        return self.verdict

    def kernel_verdict(self) -> str | None:
        return None


def test_watchdog_samples_until_its_time_then_waits_to_be_cancelled():
    async def scenario() -> tuple[str, int, bool]:
        sampling = _CountingProbe("memory")
        verdict = await asyncio.wait_for(limits.watch(sampling, until=math.inf), 10)  # hang guard
        quiet = _CountingProbe("memory")
        task = asyncio.create_task(limits.watch(quiet, until=0.0))
        await asyncio.sleep(3 * limits.SAMPLE_INTERVAL_SECONDS)
        pending = not task.done()
        task.cancel()
        return verdict, quiet.checks, pending

    verdict, checks, pending = asyncio.run(scenario())
    assert verdict == "memory"
    assert checks == 0 and pending  # past ``until`` nothing is sampled and nothing is reported

