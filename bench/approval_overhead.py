"""How much the approval path adds to a call, in the supervisor, without processes.

Prints per-operation times for the policy evaluation (with rules), a grant lookup in a store of 1000
grants, and one audit-log line, each against a baseline measured in the same run: encoding the
approval request as the JSON line the supervisor would send anyway.

    python bench/approval_overhead.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from peon.config import load_config  # noqa: E402
from peon.tool import ToolRisk  # noqa: E402
from peon.policy import ApprovalPolicy, ApprovalRequest, Decision  # noqa: E402
from supervisor.audit import AuditLog, audit_entry  # noqa: E402
from supervisor.grants import GrantStore  # noqa: E402


def per_call(fn, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    rules = [{"tool": "bash", "command_prefix": f"tool{i} sub", "decision": "allow"} for i in range(20)]
    loaded = load_config({"approval": {"rules": rules}}, env={})
    policy = ApprovalPolicy.from_loaded(loaded)
    request = ApprovalRequest("c1", "bash", ToolRisk.PROCESS, "declared risk of bash", "run make test",
                              {"argv": ["/bin/bash", "-lc", "make test -j4"]}, '{"command":"make test -j4"}')
    n = 20000
    baseline = per_call(lambda: json.dumps({"op": "approval_request", **request.to_dict()}), n)
    evaluate = per_call(lambda: policy.evaluate(request), n)
    with tempfile.TemporaryDirectory() as tmp:
        store = GrantStore(Path(tmp))
        for i in range(1000):
            store.add(ApprovalRequest(f"g{i}", "bash", ToolRisk.PROCESS, "r", "s", canonical_input=f'{{"command":"x{i}"}}'),
                      "call")
        lookup = per_call(lambda: store.find(request), 2000)
        add = per_call(lambda: store.add(request, "call"), 50)
        log = AuditLog(Path(tmp), 1 << 20, 3)
        entry = audit_entry(session_id="s", call_id="c1", tool="bash", args={"command": "make test -j4"},
                            request=request, decision=Decision(True, "policy", "r"),
                            reply={"ok": True, "value": {"exit_code": 0, "truncated": False}},
                            received_at=time.time(), duration_ms=5)
        record = per_call(lambda: log.record(entry), 5000)
    print(f"baseline: encode the approval request     {baseline:8.1f} µs")
    print(f"policy.evaluate (20 prefix rules)         {evaluate:8.1f} µs  ({evaluate / baseline:.1f}x baseline)")
    print(f"grant lookup among 1000 grants            {lookup:8.1f} µs  ({lookup / baseline:.1f}x baseline)")
    print(f"grant add (rewrite + fsync, 1000 grants)  {add:8.1f} µs  ({add / baseline:.1f}x baseline)")
    print(f"audit line (append, with rotation check)  {record:8.1f} µs  ({record / baseline:.1f}x baseline)")


if __name__ == "__main__":
    main()
