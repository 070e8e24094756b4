"""One-off studies: measurements behind figures that ``docs/`` quotes or another benchmark builds on,
each run on its own (``python bench/studies/NAME.py``) and kept while a doc, a test or another
benchmark cites it. Not run by ``bench/targets.py``."""
