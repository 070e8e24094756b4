"""Checkpoints of a workspace: what each call changed, reviewed and rewound after the session.

Promise: a session's checkpoints live in its state directory (``checkpoints/``), never in the workspace
or its ``.git``; the supervisor writes them around each call that can change the workspace and the
``peon changes``/``peon rewind`` commands, :meth:`peon.Session.changes` and :meth:`peon.Session.rewind`
read them, from any process, also after the supervisor died. :mod:`.summary` is the pure part (what a
change record says, the exclusion patterns), :mod:`.gitstore` the content-addressed store on git's
object database behind a git directory and index of Peon's own, :mod:`.records` the record log,
:mod:`.review` what a reader asks of a session's checkpoints. Imports only :mod:`peon.core`.
"""
