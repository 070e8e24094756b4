"""Where the user's own Peon files live, from the session's environment (pure).

Promise: :func:`user_peon_dir` is ``$XDG_CONFIG_HOME/peon``, else ``$HOME/.config/peon``, else None —
relative values are ignored, as the XDG specification says. The user's config file, secret-path
patterns and skills live there.
"""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Mapping


def user_peon_dir(env: Mapping[str, str]) -> Path | None:
    xdg = env.get("XDG_CONFIG_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "peon"
    home = env.get("HOME")
    if home and os.path.isabs(home):
        return Path(home) / ".config" / "peon"
    return None
