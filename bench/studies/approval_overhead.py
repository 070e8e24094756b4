"""How much the approval path adds to a call, in the supervisor, without processes.

Prints per-operation times for the shell analysis (parse + normalise, uncached, for a typical and a long
command line, and CPU time for the longest and the most deeply nested lines it still accepts: the
analysis is bounded and linear, past its limits a line is opaque), the policy evaluation with command
rules (allow rules over every part), the facts an allow rule needs (a git repository's configuration, a
redirection target), a grant lookup in a store of 1000 grants, and the audit log's decision line with
and without ``fdatasync``, each against a baseline measured in the same run: encoding the approval
request as the JSON line the supervisor would send anyway.

    python bench/studies/approval_overhead.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench.lib and its peon, from anywhere

from peon.client.config import load_config
from peon.approval.policy import ApprovalPolicy, ApprovalRequest, Decision
from peon.approval.rules import GitFacts, ShellFacts
from peon.approval.shell import MAX_COMMAND_BYTES, analyze
from peon.core.tool import ToolRisk
from peon.supervisor.approval.audit import AuditLog, decision_entry
from peon.supervisor.approval.facts import gather
from peon.supervisor.approval.grants import GrantStore

TYPICAL = "cd src && make -j4 2>&1 | tail -20"
LONG = " && ".join(f"git diff --stat HEAD~{i} -- src/file{i}.py 2>&1 | tail -{i + 1}" for i in range(50))


def per_call(fn: Callable[[], object], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def uncached(command: str) -> Callable[[], object]:
    def run() -> object:
        return analyze(command)

    return run


def longest_accepted() -> str:
    """The longest line analyse() accepts: as many words as MAX_COMMAND_BYTES holds."""
    return "echo " + " ".join(["ab"] * ((MAX_COMMAND_BYTES - 5) // 3))


def deepest_accepted() -> str:
    """The most deeply nested command substitution analyse() still sees into (not opaque)."""
    def nested(depth: int) -> str:
        return "echo " + "$(echo " * depth + "x" + ")" * depth

    depth = 1
    while not analyze(nested(depth + 1)).opaque:
        depth += 1
    return nested(depth)


def cpu_ms(command: str, n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        analysis = analyze(command)
    assert not analysis.opaque, analysis.opaque
    return (time.process_time() - start) / n * 1e3


def bash_request(command: str) -> ApprovalRequest:
    return ApprovalRequest("c1", "bash", ToolRisk.PROCESS, "declared risk of bash", f"run {command}",
                           {"argv": ["/bin/bash", "-lc", command]}, json.dumps({"command": command}))


def main() -> None:
    prefixes = ["cd", "make", "tail", "git diff", "git status", "ls", "pytest"] + [f"tool{i} sub" for i in range(13)]
    rules = [{"tool": "bash", "command_prefix": p, "decision": "allow"} for p in prefixes]
    rules.append({"tool": "bash", "command_prefix": "git push", "decision": "deny"})
    loaded = load_config({"approval": {"rules": rules}}, env={})
    policy = ApprovalPolicy.from_loaded(loaded)
    request = bash_request(TYPICAL)
    long_request = bash_request(LONG)
    n = 5000
    baseline = per_call(lambda: json.dumps({"op": "approval_request", **request.to_dict()}), n)
    import_start = time.perf_counter()
    analyze("true")  # loads the grammar once (import + parser)
    grammar_ms = (time.perf_counter() - import_start) * 1e3
    parse_typical = per_call(uncached(TYPICAL), 2000)
    parse_long = per_call(uncached(LONG), 100)
    facts = ShellFacts(git={".": GitFacts(), "src": GitFacts()}, paths_inside={})

    def evaluate(req: ApprovalRequest) -> Callable[[], object]:
        def run() -> object:
            return policy.evaluate(req, facts)

        return run

    assert policy.evaluate(request, facts).action == "allow"
    evaluate_typical = per_call(evaluate(request), 2000)
    evaluate_long = per_call(evaluate(long_request), 100)
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        subprocess.run(["git", "init", "-q", str(workspace)], check=True)
        (workspace / "src").mkdir()
        questions = policy.questions(bash_request("cd src && git status > out.txt"))
        gather_us = per_call(lambda: gather(questions, workspace, {"PATH": "/usr/bin:/bin"}), 2000)
        store = GrantStore(Path(tmp))
        for i in range(1000):
            store.add(ApprovalRequest(f"g{i}", "bash", ToolRisk.PROCESS, "r", "s",
                                      canonical_input=f'{{"command":"x{i}"}}'),
                      "call")
        lookup = per_call(lambda: store.find(request), 2000)
        entry = decision_entry(session_id="s", call_id="c1", tool="bash", args={"command": TYPICAL}, request=request,
                               decision=Decision(True, "policy", "r"), received_at=time.time())
        plain = AuditLog(Path(tmp), 1 << 24, 3)
        write_only = per_call(lambda: plain.commit(entry), 5000)
        synced = AuditLog(Path(tmp), 1 << 24, 3, fsync=True)
        with_fsync = per_call(lambda: synced.commit(entry), 300)
    print(f"baseline: encode the approval request          {baseline:9.1f} µs")
    print(f"load the bash grammar (once per supervisor)     {grammar_ms * 1000:9.1f} µs")

    def row(label: str, micros: float) -> None:
        print(f"{label:<48}{micros:9.1f} µs  ({micros / baseline:.1f}x baseline)")

    row(f"analyse a typical command ({len(TYPICAL)} chars)", parse_typical)
    row(f"analyse a long command ({len(LONG)} chars, 150 parts)", parse_long)
    row("policy.evaluate, typical, 21 rules (uncached)", evaluate_typical)
    row("policy.evaluate, long, 21 rules (uncached)", evaluate_long)
    row("gather facts: git config + a redirection target", gather_us)
    row("grant lookup among 1000 grants", lookup)
    row("audit decision line: write(2)", write_only)
    row("audit decision line: write(2) + fdatasync", with_fsync)
    longest, deepest = longest_accepted(), deepest_accepted()
    typical_ms = parse_typical / 1e3
    for label, command in ((f"longest accepted line ({len(longest)} chars)", longest),
                           (f"deepest accepted line ({deepest.count('$(')} nested $(...))", deepest)):
        ms = cpu_ms(command, 3)
        print(f"analyse the {label:<40}{ms:9.1f} ms CPU  ({ms / typical_ms:.0f}x a typical command)")


if __name__ == "__main__":
    main()
