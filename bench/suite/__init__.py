"""The benchmarks ``bench/targets.py`` runs, each a script of its own recording its figures through
``bench.lib.figures``; each also runs alone (``python bench/suite/NAME.py --help``)."""
