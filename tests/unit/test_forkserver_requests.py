"""The forkserver's decision on one message (sans I/O): a request is served only when whole and from the
supervisor."""

from __future__ import annotations

import array
import socket

from peon.workers import forkserver as wf


def test_a_request_is_served_only_when_whole_and_from_the_supervisor():
    """The forkserver's decision on one message (sans I/O)."""
    creds = wf.CREDENTIALS.pack(100, 1000, 1000)
    rights = array.array("i", [3, 4, 5, 6]).tobytes()
    anc = [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, creds), (socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)]
    served = wf.parse_request(wf.REQUEST, anc, 0, 100, 1000)
    assert served.refused is None and served.fds == [3, 4, 5, 6]
    cases = {
        "not from the supervisor 101": wf.parse_request(wf.REQUEST, anc, 0, 101, 1000),
        "(uid 1000)": wf.parse_request(wf.REQUEST, anc, 0, 100, 0),
        "truncated": wf.parse_request(wf.REQUEST, anc, socket.MSG_CTRUNC, 100, 1000),
        "no credentials": wf.parse_request(wf.REQUEST, anc[1:], 0, 100, 1000),
        "not a fork request": wf.parse_request(b"fork please", anc, 0, 100, 1000),
        "carried 2 descriptors": wf.parse_request(
            wf.REQUEST, [anc[0], (socket.SOL_SOCKET, socket.SCM_RIGHTS, rights[:8])], 0, 100, 1000),
    }
    for why, request in cases.items():
        assert request.refused is not None and why in request.refused, (why, request.refused)
        assert request.fds, "every descriptor is handed back, to be closed"

