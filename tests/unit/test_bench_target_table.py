"""bench/targets.py without running a benchmark: the one table of every target, how benchmarks hand it their
figures, how each is judged, the performance page it writes, and how benchmarks time calls back to back
(bench/lib/rhythm.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


def test_a_figure_is_recorded_only_where_the_environment_names_a_file(bench, tmp_path, monkeypatch):
    figures, _ = bench
    monkeypatch.delenv(figures.ENV, raising=False)
    figures.record("bash.apart", 9.0, "ms", baseline=4.5, against="bash -lc true")
    assert list(tmp_path.iterdir()) == []
    out = tmp_path / "figures.jsonl"
    monkeypatch.setenv(figures.ENV, str(out))
    figures.record("bash.apart", 9.0, "ms", baseline=4.5, against="bash -lc true", calls=50)
    figures.record("flood_rss", 62.5, "MiB", pss=43.0)
    lines = out.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"key": "bash.apart", "value": 9.0, "unit": "ms", "baseline": 4.5, "against": "bash -lc true", "calls": 50},
        {"key": "flood_rss", "value": 62.5, "unit": "MiB", "baseline": None, "against": None, "pss": 43.0},
    ]


def test_targets_are_judged_on_the_ratio_to_the_baseline_of_the_same_run_or_on_the_value(bench):
    _, targets = bench
    by_key = {t.key: t for t in targets.TARGETS}
    bash = by_key["bash.back_to_back"]  # ratio <= 1.2
    assert bash.judge({"value": 6.0, "baseline": 5.0}) == ("met", pytest.approx(1.2))
    assert bash.judge({"value": 6.1, "baseline": 5.0})[0] == "not met"
    assert bash.judge({"value": 6.0, "baseline": None}) == ("not measured", None)  # the peer or baseline is absent
    assert bash.judge(None) == ("not measured", None)
    rate = by_key["mcp.read_rate"]  # higher is better
    assert rate.judge({"value": 700.0, "baseline": 676.0})[0] == "met"
    assert rate.judge({"value": 101.0, "baseline": 676.0})[0] == "not met"
    deadline = by_key["deadline_to_clean.cgroup"]  # value < 100 ms
    assert deadline.judge({"value": 99.9, "baseline": None}) == ("met", 99.9)
    assert deadline.judge({"value": 100.0, "baseline": None})[0] == "not met"
    assert by_key["idle_cpu"].judge({"value": 0.0})[0] == "met"
    assert by_key["idle_cpu"].judge({"value": 10.0})[0] == "not met"


def test_the_table_has_a_line_per_target_and_says_what_was_not_measured(bench):
    _, targets = bench
    figures = targets.read_figures([
        json.dumps({"key": "bash.back_to_back", "value": 7.78, "unit": "ms", "baseline": 4.52,
                    "against": "bash -lc true"}),
        json.dumps({"key": "mcp.bash", "value": 14.4, "unit": "ms", "baseline": None, "against": "mcp-shell-server"}),
        json.dumps({"key": "flood_rss", "value": 62.6, "unit": "MiB", "baseline": None, "against": None}),
        "",
    ])
    lines = targets.table(figures)
    assert len(lines) == len(targets.TARGETS) + 3  # the heading's two lines and the count
    by_label = {line[:50].rstrip(): line for line in lines[2:-1]}
    bash = by_label["Session.call bash true, back to back"]
    assert "7.78 ms" in bash and "4.52 ms bash -lc true" in bash and " 1.72 " in bash and bash.endswith("not met")
    assert by_label["peon mcp tools/call bash true"].endswith("not measured")
    assert "mcp-shell-server: absent" in by_label["peon mcp tools/call bash true"]
    assert by_label["1 GiB flood, supervisor + worker RSS"].endswith(" met")
    assert by_label["soak: processes gained after warm-up"].endswith("not measured")
    assert lines[-1] == f"1 of {len(targets.TARGETS)} targets met; 0 out of reach: missed even by the design's floor"


def judged(targets, *entries: dict) -> tuple[list[str], dict[str, str]]:
    """The table of these recorded figures, and its target lines by label."""
    lines = targets.table(targets.read_figures([json.dumps(entry) for entry in entries]))
    return lines, {line[:50].rstrip(): line for line in lines[2:len(targets.TARGETS) + 2]}


REUSED = "a bare multiprocessing worker waiting for the call reading the file, nothing of Peon's"
REUSED_SUPERVISED = ("a bare supervisor process having the file read by a waiting bare worker of its own, "
                     "nothing of Peon's")
SPAWNED = "a bare long-lived worker posix_spawning bash -lc true and reaping it, nothing of Peon's"
SPAWNED_SUPERVISED = ("a bare supervisor process having bash -lc true posix_spawned and reaped by a long-lived "
                      "bare worker of its own, nothing of Peon's")
BARE = "the former design: a bare multiprocessing worker per call reading the file, nothing of Peon's"


def test_a_target_the_designs_floor_misses_is_out_of_reach_one_only_peons_floor_misses_is_not_met(bench):
    """The design's floor is the current design's, nothing of Peon's: a command spawned and reaped by a
    long-lived worker (bench_core.py), a read by a waiting worker (bench_read.py), each asked directly and
    through a bare supervisor; the most binding decides "out of reach". Peon's floors (the supervisor's
    answer, a no-op call in a worker) are listed beside it. A floor's ratio: a whole call (bash, read), a
    part added to the baseline (the supervisor's answer to bash), or a cap on calls/s taken from another
    figure of the same run (MCP read rate)."""
    _, targets = bench
    lines, by_label = judged(
        targets,
        {"key": "bash.back_to_back", "value": 8.0, "unit": "ms", "baseline": 5.0, "against": "bash -lc true",
         "supervisor_only": 1.5, "spawned": 5.2, "spawned_supervised": 6.25},
        {"key": "bash.apart", "value": 8.0, "unit": "ms", "baseline": 5.0, "against": "bash -lc true",
         "supervisor_only": 0.5, "spawned": 5.1, "spawned_supervised": 5.5},
        {"key": "read.back_to_back", "value": 7.0, "unit": "ms", "baseline": 1.6, "against": "starting /bin/cat",
         "floor": 6.4, "reused": 0.1, "reused_supervised": 0.24},
        {"key": "read.apart", "value": 4.0, "unit": "ms", "baseline": 2.0, "against": "starting /bin/cat",
         "floor": 3.0, "reused": 0.5, "reused_supervised": 2.4},
        {"key": "mcp.read_rate", "value": 100.0, "unit": "calls/s", "baseline": 800.0, "against": "server-filesystem"},
        {"key": "mcp.start", "value": 300.0, "unit": "ms", "baseline": 350.0, "against": "server-filesystem"},
    )
    # ratio, the design's floor, Peon's floor (the most binding of each kind), verdict
    bash = by_label["Session.call bash true, back to back"]  # 6.25 / 5.0 = 1.25 > 1.2
    assert " 1.60   1.25  1.30 " in bash and bash.endswith("out of reach")
    bash = by_label["Session.call bash true, 100 ms apart"]  # 5.5 / 5.0 = 1.10 <= 1.2
    assert " 1.60   1.10  1.10 " in bash and bash.endswith(" not met")
    read = by_label["Session.call read 4 KiB, back to back"]  # 0.24 / 1.6 = 0.15: only Peon's floor misses
    assert " 4.38   0.15  4.00 " in read and read.endswith(" not met")
    read = by_label["Session.call read 4 KiB, 100 ms apart"]  # 2.4 / 2.0 = 1.20 > 1.0
    assert " 2.00   1.20  1.50 " in read and read.endswith("out of reach")
    rate = by_label["peon mcp read, back to back (calls/s)"]  # 1000 / 0.24 ms = 4167 calls/s of 800: 5.21
    assert " 0.12   5.21  0.20 " in rate and rate.endswith(" not met")
    assert by_label["peon mcp start to first tools/list"].endswith(" met")  # no floor: judged as before

    count = len(targets.TARGETS) + 2
    assert lines[count] == f"1 of {len(targets.TARGETS)} targets met; 2 out of reach: missed even by the design's floor"
    assert lines[count + 2:] == [  # every floor measured, in each target's order
        f"  Session.call bash true, back to back: 1.04x, {SPAWNED} (back to back) 5.20 ms, bash -lc true 5.00 ms",
        f"  Session.call bash true, back to back: 1.25x, {SPAWNED_SUPERVISED} (back to back) 6.25 ms,"
        " bash -lc true 5.00 ms",
        "  Session.call bash true, back to back: 1.30x, a call answered by the supervisor alone (no worker) 1.50 ms"
        " + bash -lc true 5.00 ms",
        "  Session.call bash true, back to back: 1.28x, a call doing nothing in a worker (Session.call, back to"
        " back) 6.40 ms, bash -lc true 5.00 ms",
        f"  Session.call bash true, 100 ms apart: 1.02x, {SPAWNED} (100 ms apart) 5.10 ms, bash -lc true 5.00 ms",
        f"  Session.call bash true, 100 ms apart: 1.10x, {SPAWNED_SUPERVISED} (100 ms apart) 5.50 ms,"
        " bash -lc true 5.00 ms",
        "  Session.call bash true, 100 ms apart: 1.10x, a call answered by the supervisor alone (no worker) 0.50 ms"
        " + bash -lc true 5.00 ms",
        f"  Session.call read 4 KiB, back to back: 0.06x, {REUSED} (back to back) 0.10 ms, starting /bin/cat 1.60 ms",
        f"  Session.call read 4 KiB, back to back: 0.15x, {REUSED_SUPERVISED} (back to back) 0.24 ms,"
        " starting /bin/cat 1.60 ms",
        "  Session.call read 4 KiB, back to back: 4.00x, a call doing nothing in a worker 6.40 ms,"
        " starting /bin/cat 1.60 ms",
        f"  Session.call read 4 KiB, 100 ms apart: 0.25x, {REUSED} (100 ms apart) 0.50 ms, starting /bin/cat 2.00 ms",
        f"  Session.call read 4 KiB, 100 ms apart: 1.20x, {REUSED_SUPERVISED} (100 ms apart) 2.40 ms,"
        " starting /bin/cat 2.00 ms",
        "  Session.call read 4 KiB, 100 ms apart: 1.50x, a call doing nothing in a worker 3.00 ms,"
        " starting /bin/cat 2.00 ms",
        f"  peon mcp read, back to back (calls/s): 12.50x, {REUSED} (back to back) 0.10 ms: at most 10000 calls/s,"
        " server-filesystem 800 calls/s",
        f"  peon mcp read, back to back (calls/s): 5.21x, {REUSED_SUPERVISED} (back to back) 0.24 ms: at most"
        " 4167 calls/s, server-filesystem 800 calls/s",
        "  peon mcp read, back to back (calls/s): 0.20x, a call doing nothing in a worker (Session.call,"
        " back to back) 6.40 ms: at most 156 calls/s, server-filesystem 800 calls/s",
    ]


def test_the_former_designs_floors_are_listed_but_never_decide_a_verdict(bench):
    """A worker per call (bench_read.py's bare workers) would put read back to back out of reach; the
    current design's floor (a waiting worker) does not, so the verdict is "not met", the former floor
    listed beside the others, named as the former design's."""
    _, targets = bench
    lines, by_label = judged(
        targets,
        {"key": "read.back_to_back", "value": 5.0, "unit": "ms", "baseline": 0.9, "against": "starting /bin/cat",
         "floor": 0.8, "bare_multiprocessing": 3.0, "bare_supervised": 3.6, "reused": 0.05,
         "reused_supervised": 0.45},
        {"key": "bash.back_to_back", "value": 8.0, "unit": "ms", "baseline": 5.0, "against": "bash -lc true"},
    )
    read = by_label["Session.call read 4 KiB, back to back"]  # design 0.45 / 0.9 = 0.50; Peon's 0.8 / 0.9
    assert " 5.56   0.50  0.89 " in read and read.endswith(" not met")
    assert (f"  Session.call read 4 KiB, back to back: 3.33x, {BARE} (back to back) 3.00 ms, starting /bin/cat"
            " 0.90 ms") in lines
    assert ("  Session.call read 4 KiB, back to back: 4.00x, the former design: a bare supervisor process having the"
            " file read by a bare worker per call, nothing of Peon's (back to back) 3.60 ms, starting /bin/cat"
            " 0.90 ms") in lines
    # bash: the former design's worker per call came on top of bash -lc, (5.0 + 3.6) / 5.0 = 1.72 > 1.2, and
    # no floor of the current design was measured: "not met", the no-op call the most binding shown.
    bash = by_label["Session.call bash true, back to back"]
    assert " 1.60         0.16 " in bash and bash.endswith(" not met")  # 0.8 / 5.0
    assert ("  Session.call bash true, back to back: 1.72x, the former design: a bare supervisor process having the"
            " file read by a bare worker per call, nothing of Peon's (back to back) 3.60 ms + bash -lc true 5.00 ms"
            in lines)


def test_a_floor_of_two_parts_adds_the_part_measured_by_another_figure_when_it_was(bench):
    """MCP bash: Peon's floor is bash -lc true plus the supervisor-only answer through peon mcp (recorded
    with MCP read), and without that figure bash -lc true alone; the design's is bash -lc true spawned and
    reaped by a long-lived worker behind a bare supervisor (recorded with bash back to back)."""
    _, targets = bench
    bash = {"key": "mcp.bash", "value": 8.0, "unit": "ms", "baseline": 3.0, "against": "mcp-shell-server",
            "bash_lc": 2.0}
    read = {"key": "mcp.read", "value": 5.0, "unit": "ms", "baseline": 0.8, "against": "server-filesystem",
            "supervisor_only": 0.7}
    spawned = {"key": "bash.back_to_back", "value": 4.0, "unit": "ms", "baseline": 2.0, "against": "bash -lc true",
               "spawned": 2.1, "spawned_supervised": 3.6}

    def mcp_bash(*entries: dict) -> tuple[str, list[str]]:
        lines = targets.table(targets.read_figures([json.dumps(entry) for entry in entries]))
        line = next(line for line in lines if line.startswith("peon mcp tools/call bash true"))
        return line, [line for line in lines if line.startswith("  peon mcp tools/call bash true")]

    line, floors = mcp_bash(bash, read)  # no design floor: (2.0 + 0.7) / 3.0 = 0.90 is Peon's
    assert " 2.67         0.90 " in line and line.endswith(" not met")
    assert floors == ["  peon mcp tools/call bash true: 0.90x, /bin/bash -lc true alone, as the bash tool starts it"
                      " 2.00 ms + a call answered by the supervisor alone (no worker), through peon mcp 0.70 ms,"
                      " mcp-shell-server 3.00 ms"]
    line, floors = mcp_bash(bash, spawned)  # 3.6 / 3.0 = 1.20 > 1.0; Peon's: 2.0 / 3.0 = 0.67
    assert " 2.67   1.20  0.67 " in line and line.endswith("out of reach")
    assert floors == [f"  peon mcp tools/call bash true: 0.70x, {SPAWNED} (back to back) 2.10 ms,"
                      " mcp-shell-server 3.00 ms",
                      f"  peon mcp tools/call bash true: 1.20x, {SPAWNED_SUPERVISED} (back to back) 3.60 ms,"
                      " mcp-shell-server 3.00 ms",
                      "  peon mcp tools/call bash true: 0.67x, /bin/bash -lc true alone, as the bash tool starts it"
                      " 2.00 ms, mcp-shell-server 3.00 ms"]


def test_back_to_back_a_no_op_call_in_a_worker_is_peons_floor_of_bash_and_mcp_calls_too(bench):
    """Back to back, a bash or MCP call does at least what a no-op call does back to back in a worker
    (bench_read.py's floor): where that binds harder than the supervisor's answer, it is the one
    shown; being Peon's, it leaves the verdict "not met"."""
    _, targets = bench
    bash_figure = {"key": "bash.back_to_back", "value": 8.0, "unit": "ms", "baseline": 2.5,
                   "against": "bash -lc true", "supervisor_only": 0.3}
    no_op_figure = {"key": "read.back_to_back", "value": 5.0, "unit": "ms", "baseline": 1.0,
                    "against": "starting /bin/cat", "floor": 4.5}
    read_figure = {"key": "mcp.read", "value": 6.0, "unit": "ms", "baseline": 0.8, "against": "server-filesystem",
                   "supervisor_only": 0.7}
    lines, by_label = judged(targets, bash_figure, no_op_figure, read_figure)
    bash = by_label["Session.call bash true, back to back"]  # (2.5 + 0.3) / 2.5 = 1.12, but 4.5 / 2.5 = 1.80
    assert " 3.20         1.80 " in bash and bash.endswith(" not met")
    read = by_label["peon mcp tools/call read 1 KiB"]  # 0.7 / 0.8 = 0.87, but 4.5 / 0.8 = 5.62
    assert " 7.50         5.62 " in read and read.endswith(" not met")
    assert "  Session.call bash true, back to back: 1.80x, a call doing nothing in a worker (Session.call," \
           " back to back) 4.50 ms, bash -lc true 2.50 ms" in lines
    # Without the no-op figure, the supervisor's answer alone is shown.
    _, by_label = judged(targets, bash_figure, read_figure)
    assert " 3.20         1.12 " in by_label["Session.call bash true, back to back"]
    assert " 7.50         0.87 " in by_label["peon mcp tools/call read 1 KiB"]


def test_back_to_back_cases_take_turns_in_blocks_and_the_first_run_of_each_block_is_not_counted(monkeypatch):
    """bench/lib/rhythm.py: each counted run comes right after a run of the same case."""
    monkeypatch.syspath_prepend(str(ROOT))
    from bench.lib import rhythm

    order: list[str] = []
    runs = rhythm.back_to_back({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, calls=5, block=3)
    assert {name: len(times) for name, times in runs.items()} == {"a": 5, "b": 5}
    # Blocks of three (one uncounted, two counted) until five are counted: the last block holds one.
    assert "".join(order) == "aaa" "bbb" "aaa" "bbb" "aa" "bb"
    assert all(t >= 0 for times in runs.values() for t in times)
    with pytest.raises(ValueError, match="at least 2 runs"):
        rhythm.back_to_back({"a": lambda: None}, calls=1, block=1)


def test_cases_timed_apart_take_turns_call_by_call(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    from bench.lib import rhythm

    order: list[str] = []
    runs = rhythm.apart({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, calls=3, gap=0.001)
    assert {name: len(times) for name, times in runs.items()} == {"a": 3, "b": 3}
    assert "".join(order) == "ababab"


def test_the_performance_page_has_the_table_the_machine_the_command_and_what_it_means(bench):
    _, targets = bench
    figures = targets.read_figures([json.dumps({"key": "flood_rss", "value": 62.6, "unit": "MiB", "baseline": None,
                                                "against": None})])
    printed = ["every target, one run (400 s; 2 cores; load average 0.10)", *targets.table(figures)]
    footprint = targets.Footprint({"supervisor": 1, "forkserver": 1, "standby": 2}, pss_kib=48 * 1024,
                                  rss_kib=100 * 1024, client_pss_kib=16 * 1024)
    facts = {"cpu": "Example CPU", "cores": "2", "memory": "8.0 GiB", "memory_kib": str(8 << 20),
             "kernel": "Linux 6.1 x86_64", "python": "CPython 3.12.1"}
    text = targets.page(printed, figures, footprint, facts, "python bench/targets.py --write-page docs/performance.md",
                        400.0, quick=False)
    assert text.startswith("# Performance\n")
    assert "```sh\npython bench/targets.py --write-page docs/performance.md\n```" in text
    assert "```text\n" + "\n".join(printed) + "\n```" in text  # the table exactly as the run printed it
    assert "| cpu | Example CPU |" in text and "| memory | 8.0 GiB |" in text
    for target in targets.TARGETS:  # every figure is explained, measured or not
        assert f"* **{target.label}** (" in text and targets.MEANINGS[target.key]
    assert "**1 GiB flood, supervisor + worker RSS** (62.6 MiB)" in text
    assert "costs the host **48 MiB**" in text
    assert "about **128 idle agent sessions**" in text  # 8 GiB / (48 + 16) MiB
    assert "--quick" not in text
    assert "short run (`--quick`)" in targets.page(printed, figures, None, facts, "c", 1.0, quick=True)


def test_the_agent_mix_rows_are_judged_on_their_ratio_to_the_peers_or_on_their_value(bench):
    _, targets = bench
    by_key = {t.key: t for t in targets.TARGETS}
    cpu = by_key["agents.cpu.mcp"]  # server CPU per call <= 1.0x the fs+shell peers'
    assert cpu.judge({"value": 3.0, "baseline": 3.0})[0] == "met"
    assert cpu.judge({"value": 3.3, "baseline": 3.0})[0] == "not met"
    assert cpu.judge({"value": 13.0, "baseline": 3.0})[0] == "not met"
    rate = by_key["agents.rate.serve"]  # 64 agents' calls per second >= 0.9x the peers' in the same run
    assert rate.judge({"value": 190.0, "baseline": 200.0})[0] == "met"
    assert rate.judge({"value": 170.0, "baseline": 200.0})[0] == "not met"
    p99 = by_key["agents.p99.mcp"]  # 64 agents' p99 <= 1.2x the peers' in the same run
    assert p99.judge({"value": 110.0, "baseline": 100.0})[0] == "met"
    assert p99.judge({"value": 130.0, "baseline": 100.0})[0] == "not met"
    agents = by_key["agents.agents.embedded"]  # at least 64 agents before p99 passes 100 ms
    assert agents.judge({"value": 64.0})[0] == "met"
    assert agents.judge({"value": 48.0})[0] == "not met"
    assert by_key["idle_pss.embedded"].judge({"value": 25.0})[0] == "met"
    assert by_key["idle_pss.mcp"].judge({"value": 40.1})[0] == "not met"
    assert by_key["job.python_processes"].judge({"value": 1.0})[0] == "not met"
    assert by_key["agents.agents.serve"].judge(None)[0] == "not measured"


def test_the_knee_is_the_first_number_of_agents_whose_paced_p99_passes_100_ms(bench):
    from bench.suite import bench_agents

    def outcome(agents: int, rhythm: str, slow: float) -> bench_agents.Outcome:
        latencies = [0.005] * 98 + [slow] * 2  # p99 is the slow one
        return bench_agents.Outcome("embedded", agents, rhythm, latencies, 1.0, {"client": 0.001, "workers": 0.002})

    runs = [outcome(1, "paced", 0.02), outcome(8, "paced", 0.09), outcome(16, "paced", 0.2),
            outcome(32, "paced", 0.05), outcome(64, "back to back", 0.5)]
    assert bench_agents.knee(runs, "embedded") == 16
    assert bench_agents.knee(runs[:2], "embedded") is None
    assert runs[2].percentile(0.99) == pytest.approx(200.0)
    assert runs[0].server_cpu_ms == pytest.approx(2.0)  # the client's CPU is not the server's
    assert set(bench_agents.MIX) == {"read", "status", "ls", "write"}
    assert [bench_agents.MIX.count(kind) for kind in ("read", "status", "ls", "write")] == [5, 2, 1, 2]

