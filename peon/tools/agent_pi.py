"""``agent_pi``: delegate a task to the pi coding agent (``pi -p -- <prompt>``). Risk: delegate.

Promises, on top of what every adapter guarantees (:mod:`peon.tools.shared.agent`):

* pi accepts ``--`` as the end of its options only from release :data:`DOUBLE_DASH_SINCE` (0.84.3);
  older releases — what npm installs on Node.js before 22.19 — fail on every prompt with ``Error:
  Unknown option: --``. So the adapter finds out which release the resolved pi is, without running
  it: from the ``package.json`` of pi's npm package (or the one shipped beside its standalone binary)
  next to the executable's real path, at most :data:`PACKAGE_SEARCH_LEVELS` directories up, read with
  the same bounded, non-blocking rules as every file Peon reads, once per file identity. Where ``--``
  is not known to work (an older release, or a release Peon cannot determine), a trailing ``--`` is left
  out of the configured arguments and a prompt that begins with ``-`` is refused with
  ``invalid_input`` naming the release; everything else runs the same on every release;
* the approval request says which release was found and where (``pi_version``, ``pi_package``) and
  whether ``--`` is used (``pi_double_dash``);
* pi reads an argument that begins with ``@`` as a file to attach (even after ``--``): a prompt that
  begins with ``@`` is passed as written, and the approval request lists the file it names.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any
from collections.abc import Mapping, Sequence

from peon.core.statefile import RefusedFile, read_regular_file

from peon.tools.shared.agent import AgentTool, describe_agent
from peon.tools.shared.launch import Program

DOUBLE_DASH_SINCE = (0, 84, 3)
PI_PACKAGES = frozenset({"@mariozechner/pi-coding-agent", "@earendil-works/pi-coding-agent"})
PACKAGE_SEARCH_LEVELS = 3
MAX_PACKAGE_JSON_BYTES = 1 << 20
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?")
_releases: dict[tuple[str, int, int, int], PiRelease] = {}


# -- pure ----------------------------------------------------------------------------------------------


def supports_double_dash(version: str | None) -> bool:
    """Whether pi ``version`` (a semantic version) ends its options at ``--``; a pre-release of 0.84.3
    does not count."""
    match = _VERSION.fullmatch(version or "")
    if match is None:
        return False
    release = tuple(int(part) for part in match.group(1, 2, 3))
    return release > DOUBLE_DASH_SINCE or (release == DOUBLE_DASH_SINCE and match.group(4) is None)


def package_names_program(data: Any, directory: str, target: str) -> bool:
    """Whether the parsed ``package.json`` in ``directory`` is pi's and its ``bin`` is ``target``."""
    if not isinstance(data, dict) or data.get("name") not in PI_PACKAGES:
        return False
    bins = data.get("bin")
    if isinstance(bins, str):
        bins = {"pi": bins}
    if not isinstance(bins, dict):
        return False
    if any(isinstance(p, str) and os.path.normpath(os.path.join(directory, p)) == target for p in bins.values()):
        return True  # the npm package: bin "pi" is dist/cli.js
    return os.path.dirname(target) == directory and os.path.basename(target) in bins  # the standalone binary


# -- finding the release -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PiRelease:
    version: str | None
    package: str | None  # the package.json it was read from
    why_unknown: str = ""


def find_release(program: Program) -> PiRelease:
    """The pi release ``program`` runs, from its package's ``package.json`` (no program is run)."""
    target = program.scripts[-1] if program.scripts else program.binary
    key = (target.path, target.device, target.inode, target.mtime_ns)
    if key not in _releases:
        if len(_releases) > 16:
            _releases.clear()
        _releases[key] = _read_release(target.path)
    return _releases[key]


def _read_release(target: str) -> PiRelease:
    directory = os.path.dirname(target)
    for _ in range(PACKAGE_SEARCH_LEVELS):
        candidate = os.path.join(directory, "package.json")
        try:
            raw = read_regular_file(candidate, max_bytes=MAX_PACKAGE_JSON_BYTES, follow_symlinks=False)
        except (OSError, RefusedFile):
            directory = os.path.dirname(directory)
            continue
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            return PiRelease(None, candidate, f"{candidate} is not valid JSON")
        if not package_names_program(data, directory, target):
            return PiRelease(None, candidate,
                             f"{candidate}, the nearest package.json, is not pi's package for {target}")
        version = data.get("version")
        if not isinstance(version, str):
            return PiRelease(None, candidate, f"{candidate} has no version")
        return PiRelease(version, candidate)
    return PiRelease(None, None, f"no package.json of pi within {PACKAGE_SEARCH_LEVELS} directories of {target}")


# -- the tool ----------------------------------------------------------------------------------------------


class PiAgentTool(AgentTool):
    name = "agent_pi"
    agent = "pi"
    description = describe_agent("pi", "pi -p -- <prompt>", " With a pi release before 0.84.3 it runs "
                                 "`pi -p <prompt>` and refuses prompts that begin with '-'.")

    def command_args(self, configured: Sequence[str], program: Program) -> tuple[tuple[str, ...], dict[str, Any]]:
        release = find_release(program)
        double_dash = supports_double_dash(release.version)
        args = tuple(configured)
        if not double_dash and args[-1:] == ("--",):
            args = args[:-1]  # an older pi rejects it: "Error: Unknown option: --"
        facts: dict[str, Any] = {"pi_version": release.version, "pi_package": release.package,
                                 "pi_double_dash": "--" in args}
        if release.version is None:
            facts["pi_version_unknown"] = release.why_unknown
        return args, facts

    def refuse_prompt(self, prompt: str, fixed_args: Sequence[str], facts: Mapping[str, Any]) -> str | None:
        if prompt.startswith("-") and "--" not in fixed_args:
            since = ".".join(map(str, DOUBLE_DASH_SINCE))
            if facts.get("pi_version"):
                which = f"this pi ({facts['pi_version']}, per {facts['pi_package']}) does not accept '--'"
            else:
                which = f"Peon cannot tell whether this pi accepts '--' ({facts.get('pi_version_unknown')})"
            return (f"the prompt begins with '-' and {which}, which pi accepts from {since} on, so pi would "
                    "parse the prompt as an option; start the prompt with other text or update pi")
        return super().refuse_prompt(prompt, fixed_args, facts)

    def file_mentions(self, prompt: str) -> list[str]:
        return [prompt[1:]] if prompt.startswith("@") else []
