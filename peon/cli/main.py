"""The ``peon`` command line: ``mcp``, ``serve``, ``call``, ``tools``, ``skills``, ``doctor``, ``setup``,
``sessions``, ``changes``, ``rewind``, ``rules`` and ``--version``.

Promises:

* bad usage (unknown flags, input that is not JSON, a missing workspace, an invalid configuration)
  ends with one clear sentence on stderr and exit status 2, never a traceback;
* an operating-system error that stops a command (no such interpreter, ...) is one sentence on stderr
  and exit status 1; Ctrl-C is exit status 130, a reader of stdout that went away exit status 1;
* every session a command opens is closed, with everything it started, before the command exits.

This module owns the parser and the dispatch to each command's module (:mod:`peon.cli.call`,
:mod:`peon.cli.doctor`, :mod:`peon.cli.mcp`, :mod:`peon.cli.rules`, :mod:`peon.cli.serve`, :mod:`peon.cli.setup`,
:mod:`peon.cli.skills`, :mod:`peon.cli.tools`, :mod:`peon.cli.changes`, :mod:`peon.cli.rewind`), which
promise what each command does.
"""

from __future__ import annotations

import argparse
import os
import sys

from peon.cli import call, changes, doctor, mcp, rewind, rules, serve, sessions, setup, skills, tools
from peon.cli.common import USAGE_ERROR, UsageError, add_session_arguments, describe_os_error


def build_parser() -> argparse.ArgumentParser:
    from peon import __version__

    parser = argparse.ArgumentParser(prog="peon", description="A tool runtime for AI coding agents.")
    parser.add_argument("--version", action="version", version=f"peon {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    mcp_parser = commands.add_parser("mcp", help="serve the tools over MCP on stdin/stdout")
    add_session_arguments(mcp_parser, allow=True)
    mcp_parser.set_defaults(run=mcp.cmd_mcp)

    from peon.serve.options import add_arguments as add_serve_arguments  # argparse only, no HTTP stack

    serve_parser = commands.add_parser("serve", help="serve the tools over MCP Streamable HTTP "
                                       "(the serve extra: pip install 'peon-runtime[serve]')")
    add_session_arguments(serve_parser, allow=True)
    add_serve_arguments(serve_parser)
    serve_parser.set_defaults(run=serve.cmd_serve)

    call_parser = commands.add_parser("call", help="run one tool call and print its result (JSON when piped)")
    call_parser.add_argument("tool", help="the tool name (see `peon tools`)")
    call_parser.add_argument("input", help="the tool input as a JSON object, or - to read it from stdin")
    call_parser.add_argument("--json", action="store_true", help="print the result as JSON, also on a terminal")
    add_session_arguments(call_parser, allow=True, one_shot=True)
    call_parser.set_defaults(run=call.cmd_call)

    tools_parser = commands.add_parser("tools", help="list the tools, their risks and descriptions")
    tools_parser.add_argument("--json", action="store_true", help="print every tool with its schemas as JSON")
    add_session_arguments(tools_parser, one_shot=True)
    tools_parser.set_defaults(run=tools.cmd_tools)

    skills_parser = commands.add_parser("skills", help="list discovered skills and why others were skipped")
    skills_parser.add_argument("--json", action="store_true", help="print the session's skill report as JSON")
    add_session_arguments(skills_parser, one_shot=True)
    skills_parser.set_defaults(run=skills.cmd_skills)

    doctor_parser = commands.add_parser("doctor", help="show the facts about this machine that matter to Peon")
    doctor_parser.add_argument("--json", action="store_true", help="print the facts as JSON")
    doctor_parser.add_argument("--clean", action="store_true",
                               help="first remove the empty cgroups of Peon sessions whose supervisor is gone")
    add_session_arguments(doctor_parser, one_shot=True)
    doctor_parser.set_defaults(run=doctor.cmd_doctor)

    setup_parser = commands.add_parser("setup", help="register Peon with an agent client (Claude Code, Codex, "
                                       "Cursor, VS Code) and turn off the client's own file and shell tools")
    setup.add_arguments(setup_parser)
    setup_parser.set_defaults(run=setup.cmd_setup)
    sessions_parser = commands.add_parser("sessions", help="list the sessions' state; `prune` removes ended ones'")
    sessions.add_arguments(sessions_parser)
    sessions_parser.set_defaults(run=sessions.cmd_sessions)
    changes_parser = commands.add_parser("changes", help="what a session's calls changed in the workspace, from "
                                         "their checkpoints (a call's diff with CALL_ID)")
    changes.add_arguments(changes_parser)
    changes_parser.set_defaults(run=changes.cmd_changes)
    rewind_parser = commands.add_parser("rewind", help="put the workspace back as it was just before a call")
    rewind.add_arguments(rewind_parser)
    rewind_parser.set_defaults(run=rewind.cmd_rewind)
    rules_parser = commands.add_parser("rules", help="check the approval rules' examples, or explain the decision "
                                       "for a command line")
    rules.add_arguments(rules_parser)
    rules_parser.set_defaults(run=rules.cmd_rules)
    return parser


def main(argv: list[str] | None = None) -> None:
    options = build_parser().parse_args(argv)
    from peon.core.errors import ConfigError, ErrorCode, PeonError

    try:
        code = options.run(options)
    except UsageError as exc:
        print(f"peon: {exc}", file=sys.stderr)
        code = USAGE_ERROR
    except ConfigError as exc:
        print(f"peon: {exc.message}", file=sys.stderr)
        code = USAGE_ERROR
    except PeonError as exc:
        print(f"peon: {exc.message}", file=sys.stderr)
        code = USAGE_ERROR if exc.code == ErrorCode.NOT_FOUND else 1
    except KeyboardInterrupt:
        print("peon: interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:
        # The reader of stdout went away: say nothing more there (not even at exit, when Python flushes).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    except OSError as exc:
        print(f"peon: {describe_os_error(exc)}", file=sys.stderr)
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
