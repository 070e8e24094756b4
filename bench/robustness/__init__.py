"""Robustness runs: sessions under faults, checked against invariants rather than timed. Not run by
``bench/targets.py``; each is run on its own (``python bench/robustness/chaos.py``)."""
