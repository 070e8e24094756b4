"""``agent_claude``: delegate a task to Claude Code (``claude -p -- <prompt>``). Risk: delegate.

Promise: what every adapter guarantees (:mod:`peon.tools.shared.agent`). ``--`` in the default arguments keeps
a prompt that begins with ``-`` from being parsed as an option. Claude Code 2.x dispatches a subcommand
(``update``, ``mcp``, ``doctor``...) only when it is the first argument, so after ``-p`` a one-word
prompt such as ``update`` or ``continue`` is a prompt, and is passed like any other. Claude Code attaches
the files a prompt mentions with ``@`` (``@path``, ``@"a path"``, anywhere in the prompt, even outside
the workspace): the prompt is passed as written and the approval request lists those files.
"""

from __future__ import annotations

from peon.tools.shared.agent import AgentTool, at_mentions, describe_agent


class ClaudeAgentTool(AgentTool):
    name = "agent_claude"
    agent = "claude"
    description = describe_agent("Claude Code", "claude -p -- <prompt>")

    def file_mentions(self, prompt: str) -> list[str]:
        return at_mentions(prompt)
