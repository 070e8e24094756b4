"""``peon tools``: the session's tools, their risks and descriptions (``--json``: with their schemas)."""

from __future__ import annotations

import argparse
import json

from peon.cli.common import one_shot, open_session


def first_sentence(text: str) -> str:
    sentence = text.split(". ")[0].strip()
    return sentence if sentence.endswith(".") else sentence + "."


def cmd_tools(options: argparse.Namespace) -> int:
    with one_shot(open_session(options), options) as session:
        tools = session.tools()
    if options.json:
        print(json.dumps(tools, indent=2, ensure_ascii=False))
        return 0
    width = max([len(t["name"]) for t in tools] + [4])
    print(f"{'NAME':<{width}}  {'RISK':<10}  DESCRIPTION")
    for tool in tools:
        print(f"{tool['name']:<{width}}  {tool['risk']:<10}  {first_sentence(tool['description'])}")
    return 0
