"""``peon rules``: test the approval rules before they are trusted.

Promises:

* ``peon rules check`` loads the layered configuration (defaults, the user's file, the workspace's
  ``.peon/config.toml``, ``--config``) exactly as a session does, runs every rule's ``examples`` and
  ``not_examples`` (:mod:`peon.approval.rule_examples`) and exits 0 only when every example decides as
  written; otherwise it exits 1 naming the rule, its file and the example (a configuration that does not
  load is such a failure: loading checks the examples first);
* ``peon rules explain '<command>'`` prints the decision the policy makes for a ``bash`` call of that
  line (or ``--tool``), the rule or per-risk setting that made it, and the shell analysis; it opens no
  session and runs nothing. File-system facts (where a redirection lands, which file a program path is,
  a repository's git configuration) are the supervisor's to gather at call time and are not consulted
  here, so an allow rule that depends on one is shown as not allowing, and says why.

This module owns the two commands' output; the decisions are :mod:`peon.approval.policy`'s.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from peon.cli.common import UsageError

CHECK_FAILED = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="rules_action", metavar="ACTION", required=True)
    check = actions.add_parser("check", help="load the configuration and run every rule's examples")
    explain = actions.add_parser("explain", help="print the decision for a command line, the rule that made it "
                                 "and the shell analysis")
    explain.add_argument("line", metavar="COMMAND", help="the command line, as a bash call would carry it")
    explain.add_argument("--tool", default="bash", help="the tool the call is of (default: bash)")
    explain.add_argument("--risk", default="process", help="the call's risk (default: process)")
    explain.add_argument("--sandboxed", action="store_true",
                         help="decide as for a call that runs in the OS sandbox (approval.process_sandboxed)")
    for sub in (check, explain):
        sub.add_argument("--workspace", "-w", default=".", metavar="DIR",
                         help="the workspace whose .peon/config.toml is a layer (default: .)")
        sub.add_argument("--config", metavar="PATH", help="a TOML configuration file applied over the others")
        sub.add_argument("--json", action="store_true", help="print the result as JSON")


def cmd_rules(options: argparse.Namespace) -> int:
    return cmd_check(options) if options.rules_action == "check" else cmd_explain(options)


def _load(options: argparse.Namespace) -> Any:
    from peon.client.config import load_config

    workspace = Path(options.workspace).expanduser()
    if not workspace.is_dir():
        raise UsageError(f"workspace {workspace} is not an existing directory")
    overrides = str(Path(options.config).expanduser()) if options.config else None
    return load_config(overrides, workspace=workspace)


def rule_examples(loaded: Any) -> list[dict[str, Any]]:
    """Every rule with examples, where it is, and each example's outcome (``problem`` None: as written)."""
    from peon.approval.rule_examples import example_problem

    report = []
    for index, rule in enumerate(loaded.config.approval.rules):
        if not rule.examples and not rule.not_examples:
            continue
        where = loaded.rule_sources[index] if index < len(loaded.rule_sources) else f"approval.rules[{index}]"
        results = [{"example": example, "expected": expected,
                    "problem": example_problem(rule.decision, rule.command_prefix, rule.path_prefix, example,
                                               expected)}
                   for expected, items in ((True, rule.examples), (False, rule.not_examples)) for example in items]
        report.append({"rule": where, "decision": rule.decision, "command_prefix": rule.command_prefix,
                       "path_prefix": rule.path_prefix, "examples": results})
    return report


def cmd_check(options: argparse.Namespace) -> int:
    from peon.core.errors import ConfigError

    try:
        loaded = _load(options)
    except ConfigError as exc:  # loading ran the examples: the first that failed is named here
        if options.json:
            print(json.dumps({"ok": False, "error": exc.message}, indent=2))
        else:
            print(f"peon rules check: FAILED: {exc.message}")
        return CHECK_FAILED
    report = rule_examples(loaded)
    failures = [(rule, result) for rule in report for result in rule["examples"] if result["problem"]]
    if options.json:
        print(json.dumps({"ok": not failures, "rules": report}, indent=2, ensure_ascii=False))
        return CHECK_FAILED if failures else 0
    total = sum(len(rule["examples"]) for rule in report)
    rules = len(loaded.config.approval.rules)
    for rule, result in failures:
        print(f"peon rules check: FAILED: {rule['rule']}: {result['problem']}")
    if failures:
        return CHECK_FAILED
    print(f"ok: {rules} rule(s) loaded from {len(loaded.layers)} layer(s); {total} example(s) of {len(report)} "
          "rule(s) decide as written")
    return 0


def explanation(loaded: Any, line: str, tool: str = "bash", risk: str = "process",
                sandboxed: bool = False) -> dict[str, Any]:
    """The policy's verdict on a call of ``tool`` with ``command = line``, and the shell analysis."""
    from peon.approval.policy import ApprovalPolicy, ApprovalRequest, analysis_of
    from peon.core.risk import ToolRisk

    try:
        risk_value = ToolRisk(risk)
    except ValueError:
        raise UsageError(f"--risk must be one of {', '.join(r.value for r in ToolRisk)}, got {risk!r}") from None
    policy = ApprovalPolicy.from_loaded(loaded)
    request = ApprovalRequest("explain", tool, risk_value, "", line, {}, json.dumps({"command": line}), sandboxed)
    analysis = analysis_of(line)
    verdict = policy.evaluate(request, analysis=analysis)
    return {"command": line, "tool": tool, "risk": risk_value.value, "sandboxed": sandboxed,
            "decision": verdict.action, "rule": verdict.rule, "analysis": analysis.to_dict()}


def cmd_explain(options: argparse.Namespace) -> int:
    result = explanation(_load(options), options.line, options.tool, options.risk, options.sandboxed)
    if options.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    print(f"decision: {result['decision']}")
    print(f"decided by: {result['rule']}")
    analysis = result["analysis"]
    print("shell analysis:")
    for segment in analysis["segments"]:
        extra = "".join(f"; {key}: {', '.join(segment[key])}" for key in ("wrappers", "redirects", "notes")
                        if segment.get(key))
        origin = f" (from {segment['origin']})" if segment.get("origin") else ""
        print(f"  {' '.join(segment['words'])}{origin}{extra}")
    for key, label in (("unanalyzable", "cannot be seen"), ("dynamic", "computed at run time")):
        for reason in analysis.get(key, ()):
            print(f"  {label}: {reason}")
    print("(file-system facts are not consulted here; a session gathers them when the call is made)")
    return 0
