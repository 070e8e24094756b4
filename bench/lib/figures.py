"""The figures a benchmark hands to ``bench/targets.py``.

A benchmark prints its figures for a reader and, beside each one that has a target, calls
:func:`record`. When the environment names a file in :data:`ENV` (``targets.py`` does), the figure
is appended to it as one JSON object per line; otherwise nothing is written. A figure measured
against a baseline carries that baseline, taken in the same run, so the ratio is computed from the
two numbers the benchmark printed, not from figures of another run.
"""

from __future__ import annotations

import json
import os

ENV = "PEON_BENCH_FIGURES"


def record(key: str, value: float, unit: str, *, baseline: float | None = None, against: str | None = None,
           **details: float | int | str) -> None:
    """Record figure ``key`` (``value`` in ``unit``); ``baseline`` is what ``against`` measured in this run."""
    path = os.environ.get(ENV)
    if not path:
        return
    entry = {"key": key, "value": value, "unit": unit, "baseline": baseline, "against": against, **details}
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(entry) + "\n")
