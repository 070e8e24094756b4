"""``agent_codex``: delegate a task to the Codex CLI (``codex exec -- <prompt>``). Risk: delegate.

Promise: what every adapter guarantees (:mod:`peon.tools.shared.agent`). ``--`` in the default arguments
makes ``codex exec`` take the prompt as its positional ``PROMPT`` even when it begins with ``-`` or is
the name of an ``exec`` subcommand (``resume``, ``review``): its parser stops looking for options and
subcommands after ``--``. A prompt of exactly ``-`` asks codex to read the prompt from stdin, which is
``/dev/null``, so codex reports an empty prompt and exits. ``codex exec`` attaches no files named with
``@``: the prompt is plain text. ``codex`` is a ``#!/usr/bin/env node`` script: the approval request
shows the ``node`` that runs it.
"""

from __future__ import annotations

from peon.tools.shared.agent import AgentTool, describe_agent


class CodexAgentTool(AgentTool):
    name = "agent_codex"
    agent = "codex"
    description = describe_agent("Codex", "codex exec -- <prompt>")
