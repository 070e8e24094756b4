"""A session's redaction, as every process of it sees the same: the supervisor and each worker.

Promise: :func:`redactor_for` returns the redactor of the session a :class:`~peon.core.tool.SessionView`
describes — the secrets of the environment its commands run with (the session's, with
``[environment]`` on top), of the workspace's environment files as they are now, the well-known
formats, ``[redaction] allow`` — keyed by the session's id, so a worker and the supervisor put the same
marker for the same value; None when ``[redaction] enabled`` is false. :func:`prepare` builds in
advance what every later redaction of a session needs, for a process that forks others (the
forkserver): its workers then inherit it instead of each building it on its first call.
"""

from __future__ import annotations

from collections.abc import Mapping

from peon.core.environment import build_environment
from peon.core.redaction.redactor import Redactor
from peon.core.redaction.scan import default_scanner
from peon.core.redaction.sources import session_redactor
from peon.core.tool import SessionView

_COMMAND_ENVIRONMENTS: dict[int, tuple[SessionView, Mapping[str, str]]] = {}


def _command_environment(session: SessionView) -> Mapping[str, str]:
    held = _COMMAND_ENVIRONMENTS.get(id(session))
    if held is not None and held[0] is session:
        return held[1]
    if len(_COMMAND_ENVIRONMENTS) >= 8:
        _COMMAND_ENVIRONMENTS.clear()
    settings = {name: value for name, value in session.config.environment.items() if isinstance(value, str)}
    env = build_environment(session.env, settings) if settings else session.env
    _COMMAND_ENVIRONMENTS[id(session)] = (session, env)
    return env


def redactor_for(session: SessionView) -> Redactor | None:
    config = session.config.redaction
    if not config.enabled:
        return None
    return session_redactor(_command_environment(session), session.workspace, session.session_id or "peon",
                            config.allow)


def prepare(session: SessionView | None) -> None:
    """Compile the formats' scanner (with this thread's scratch space) and build ``session``'s redactor."""
    default_scanner().matches(b"prepare")
    if session is not None:
        redactor_for(session)
