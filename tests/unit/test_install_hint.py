"""peon.client.install_hint: the command a missing extra's message names installs this Peon's own source."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_an_install_hint_names_this_peons_own_source():
    from peon.client.install_hint import DISTRIBUTION, extra_command

    command = extra_command("serve")
    assert command.startswith(f"{sys.executable} -m pip install")
    assert command.endswith("[serve]'")
    assert DISTRIBUTION in command or str(ROOT) in command

