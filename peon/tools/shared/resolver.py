"""The path resolver a session's file tools use.

Promise: every file tool — in the supervisor while a call is prepared and in the worker while it runs —
takes its resolver from :func:`session_resolver`: the one the session's environment chose
(``PEON_FS_RESOLVER``: ``auto``, ``openat2`` or ``walk``, :func:`peon.workers.fs.choose_resolver`), and an
unusable choice is the same error everywhere.
"""

from __future__ import annotations

from peon.core.tool import SessionView
from peon.workers import fs


def session_resolver(session: SessionView) -> fs.Resolver:
    """The resolver ``session`` chose (``auto`` when its environment names none)."""
    return fs.choose_resolver(session.env.get(fs.RESOLVER_ENV))
