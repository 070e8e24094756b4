"""The ``peon`` command."""
