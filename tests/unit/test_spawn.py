"""peon.client.spawn: where the supervisor imports Peon from (pure: nothing is started)."""

from __future__ import annotations

from pathlib import Path

import peon
from peon.client.spawn import import_root


def test_the_supervisor_imports_this_very_peon():
    assert Path(import_root(), "peon", "__init__.py").resolve() == Path(peon.__file__).resolve()
