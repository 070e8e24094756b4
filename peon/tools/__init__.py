"""Peon's built-in tools, one module each, schema beside executor."""

from .bash import BashTool

BUILTIN_TOOLS = [BashTool]
