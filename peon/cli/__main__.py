"""``python -m peon.cli``: the ``peon`` command."""

from peon.cli.main import main

main()
