"""The supervisor's side of approval: the I/O around the pure decision of :mod:`peon.approval`.

Promise: the supervisor alone decides whether a call runs, and nothing a worker does can change that
decision. Each module owns one part of it: :mod:`.facts` gathers the few file-system facts an allow rule
needs, :mod:`.gate` settles the policy's verdict (a grant, or the approver asked and waited for, failing
closed), :mod:`.grants` keeps what the approver allowed for the session, and :mod:`.audit` writes the
decision before the call runs and its outcome after. A worker never imports any of them.
"""
