"""``peon skills``: the skills a session discovers, and why others were skipped."""

from __future__ import annotations

import argparse
import json

from peon.cli.common import one_shot, open_session


def cmd_skills(options: argparse.Namespace) -> int:
    with one_shot(open_session(options), options) as session:
        skills = session.info.get("skills") or {"available": [], "skipped": []}
    if options.json:
        print(json.dumps(skills, indent=2))
        return 0
    if not skills["available"]:
        print("No skills discovered.")
    for skill in skills["available"]:
        print(f"{skill['name']}  {skill['path']}\n    {skill['description']}")
    if skills["skipped"]:
        print("\nSkipped:")
        for entry in skills["skipped"]:
            print(f"  {entry['path']}: {entry['reason']}")
    return 0
