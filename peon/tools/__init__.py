"""Peon's built-in tools, one module each, schema beside executor."""

from peon.core.tool import Tool

from peon.tools.agent_claude import ClaudeAgentTool
from peon.tools.agent_codex import CodexAgentTool
from peon.tools.agent_pi import PiAgentTool
from peon.tools.apply_patch import ApplyPatchTool
from peon.tools.bash import BashTool
from peon.tools.changes import ChangesTool
from peon.tools.edit import EditTool
from peon.tools.glob import GlobTool
from peon.tools.grep import GrepTool
from peon.tools.job_list import JobListTool
from peon.tools.job_output import JobOutputTool
from peon.tools.job_stop import JobStopTool
from peon.tools.job_write import JobWriteTool
from peon.tools.read import ReadTool
from peon.tools.read_skill import ReadSkillTool
from peon.tools.rewind import RewindTool
from peon.tools.write import WriteTool

BUILTIN_TOOLS: list[type[Tool]] = [BashTool, ReadTool, WriteTool, ReadSkillTool, ClaudeAgentTool, CodexAgentTool,
                                   PiAgentTool, JobOutputTool, JobStopTool, JobListTool, EditTool, ApplyPatchTool,
                                   GrepTool, GlobTool, JobWriteTool, ChangesTool, RewindTool]
