"""Peon's built-in tools, one module each, schema beside executor."""

from peon.tool import Tool

from .agent_claude import ClaudeAgentTool
from .agent_codex import CodexAgentTool
from .agent_pi import PiAgentTool
from .apply_patch import ApplyPatchTool
from .bash import BashTool
from .edit import EditTool
from .glob import GlobTool
from .grep import GrepTool
from .job_list import JobListTool
from .job_output import JobOutputTool
from .job_stop import JobStopTool
from .read import ReadTool
from .read_skill import ReadSkillTool
from .write import WriteTool

BUILTIN_TOOLS: list[type[Tool]] = [BashTool, ReadTool, WriteTool, ReadSkillTool, ClaudeAgentTool, CodexAgentTool,
                                   PiAgentTool, JobOutputTool, JobStopTool, JobListTool, EditTool, ApplyPatchTool,
                                   GrepTool, GlobTool]
