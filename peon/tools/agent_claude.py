"""``agent_claude``: delegate a task to Claude Code (``claude -p -- <prompt>``). Risk: delegate.

Promise: on top of what every adapter guarantees (:mod:`peon.tools.agent`), a prompt that is a single
word is refused. Claude Code's command line dispatches a subcommand (``update``, ``install``, ``mcp``,
``doctor``, ``help``...) when its first operand is exactly that subcommand's name — even after ``--``,
which only ends the options — so a one-word prompt could update or reconfigure the agent instead of
asking it anything. ``--`` in the default arguments keeps a prompt that begins with ``-`` from being
parsed as an option.
"""

from __future__ import annotations

import re
from typing import Sequence

from .agent import AgentTool, describe_agent

SUBCOMMAND_SHAPED = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,63}")  # one word that could name a subcommand


class ClaudeAgentTool(AgentTool):
    name = "agent_claude"
    agent = "claude"
    description = describe_agent("Claude Code", "claude -p -- <prompt>",
                                 " The prompt must be more than one word.")

    def refuse_prompt(self, prompt: str, fixed_args: Sequence[str]) -> str | None:
        if SUBCOMMAND_SHAPED.fullmatch(prompt):
            return ("claude runs one of its subcommands (such as 'update', 'install' or 'mcp') when the whole "
                    "prompt is that subcommand's name, even after '--'; describe the task in more than one word")
        return super().refuse_prompt(prompt, fixed_args)
