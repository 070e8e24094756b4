"""``agent_pi``: delegate a task to the pi coding agent (``pi -p -- <prompt>``). Risk: delegate.

Promise: on top of what every adapter guarantees (:mod:`peon.tools.agent`), a prompt that begins with
``@`` is refused. pi reads every argument that begins with ``@`` as a file to attach to the message,
even after ``--`` — so ``@~/.ssh/id_ed25519`` would send that file to the model provider without
passing Peon's ``read`` checks. The refusal names the rule, and what the approver approved is exactly
what runs (the prompt is never rewritten). ``--`` in the default arguments keeps a prompt that
begins with ``-`` from being parsed as an option.
"""

from __future__ import annotations

from typing import Sequence

from .agent import AgentTool, describe_agent


class PiAgentTool(AgentTool):
    name = "agent_pi"
    agent = "pi"
    description = describe_agent("pi", "pi -p -- <prompt>", " The prompt must not begin with '@'.")

    def refuse_prompt(self, prompt: str, fixed_args: Sequence[str]) -> str | None:
        if prompt.startswith("@"):
            return ("pi reads an argument that begins with '@' as a file to attach, even after '--', which would "
                    "bypass Peon's read checks; start the prompt with other text (e.g. 'Read <file> and ...')")
        return super().refuse_prompt(prompt, fixed_args)
