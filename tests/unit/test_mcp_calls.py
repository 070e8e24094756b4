"""peon.mcp.calls: the call book both MCP transports keep their calls in (pure: no session, no process)."""

from __future__ import annotations

from peon.mcp.calls import Call, CallBook, Peer
from peon.mcp.revisions import ServerIdentity


class Handle:
    def __init__(self, call_id: str):
        self.call_id = call_id
        self.cancels = 0

    def cancel(self) -> None:
        self.cancels += 1


def _call(request_id: int = 1) -> Call:
    return Call(request_id=request_id, name="bash", arguments={"command": "sleep 30"}, version="2025-11-25",
                peer=Peer())


def test_a_call_cancelled_while_it_was_submitted_is_cancelled_in_the_session():
    book: CallBook[Call] = CallBook(ServerIdentity(), command="peon serve")
    call = _call()
    book.open(call)
    call.cancelled = True  # its stream closed while the session was taking it
    handle = Handle("c1")
    book.submitted(call, handle)
    assert handle.cancels == 1


def test_a_call_submitted_and_not_cancelled_runs_on():
    book: CallBook[Call] = CallBook(ServerIdentity(), command="peon mcp")
    call = _call()
    book.open(call)
    handle = Handle("c2")
    book.submitted(call, handle)
    assert handle.cancels == 0
    assert book.running["c2"] is call
