"""Peon's benchmarks: never installed, run from a checkout (``python bench/targets.py``).

A package only so that its scripts import what they share by one name, ``bench.lib.*``: each script
puts the checkout that holds it first on its path, in its first statement after the standard
library's imports, and so finds this package and the checkout's own ``peon`` wherever it is run from.

* ``targets.py`` — every speed and resource target measured in one run, in one table;
* ``suite/`` — the benchmarks ``targets.py`` runs;
* ``lib/`` — what the benchmarks share;
* ``robustness/`` — runs that attack sessions and check invariants, not speed;
* ``studies/`` — one-off measurements behind figures the docs quote;
* ``install_peers``, ``js/``, ``peers/`` — the pinned peer MCP servers the benchmarks compare Peon with.
"""
