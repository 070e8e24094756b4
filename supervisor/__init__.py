"""Peon's supervisor: one process per session that owns the session's workers.

Promise: the supervisor holds the session (workspace, resolved configuration, tool registry, approval
state), executes calls one at a time in the order they arrive, hands each to a dedicated worker, and
survives the death of any worker. It is a child subreaper: whatever a dying worker orphans is
reparented to it and killed. When it exits, no worker and no process a call started is left alive.
"""
