"""Output capture: bounded memory, head and tail kept, every byte counted, invalid UTF-8 reported."""

from __future__ import annotations

import threading

from helpers.processes import workers_of

GIB = 1 << 30


def peak_rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return 0
    return 0


def test_one_gib_flood_keeps_memory_bounded(open_session):
    session = open_session()
    peaks: list[int] = []
    done = threading.Event()

    def sample():
        while not done.is_set():
            for pid in workers_of(session, "peon-worker bash"):
                peaks.append(peak_rss_kib(pid))
            done.wait(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        r = session.call("bash", {"command": "head -c 1073741824 /dev/zero"})
    finally:
        done.set()
        sampler.join()
    v = r.value
    assert v["exit_code"] == 0
    assert v["output_bytes"] == GIB
    assert v["truncated"] is True
    assert v["output_kept_bytes"] <= 65536
    assert peaks, "the worker was never sampled"
    assert max(peaks) < 200 * 1024, f"worker peak RSS {max(peaks)} KiB"


def test_very_long_line_keeps_head_and_tail(open_session):
    session = open_session({"limits": {"max_output_bytes": 4096}})
    command = "printf 'HEAD'; head -c 10000000 /dev/zero | tr '\\0' a; printf 'TAIL'"
    v = session.call("bash", {"command": command}).value
    assert v["output_bytes"] == 10_000_008
    assert v["truncated"] is True and v["output_kept_bytes"] == 4096
    assert v["output"].startswith("HEADaaa") and v["output"].endswith("aaaTAIL")
    assert "[... 9995912 bytes omitted ...]" in v["output"]


def test_invalid_utf8_is_reported_not_raised(session):
    v = session.call("bash", {"command": "printf 'ok\\xff\\xfeok\\n'"}).value
    assert v["output_invalid_utf8"] is True
    assert v["output"] == "ok\ufffd\ufffdok\n"
    assert v["output_bytes"] == 7


def test_multibyte_characters_are_not_split_at_the_cut(open_session):
    session = open_session({"limits": {"max_output_bytes": 1024}})
    v = session.call("bash", {"command": "for i in $(seq 2000); do printf 'é€'; done"}).value
    assert v["truncated"] is True
    assert v["output_invalid_utf8"] is False
    assert "\ufffd" not in v["output"]


def test_progress_reports_elapsed_time_and_bytes(open_session):
    session = open_session()
    updates = []
    r = session.call("bash", {"command": "for i in 1 2 3 4 5 6; do echo line $i; sleep 0.25; done"},
                     on_progress=updates.append)
    assert r.ok
    assert len(updates) >= 2
    elapsed = [u["elapsed_ms"] for u in updates]
    assert elapsed == sorted(elapsed) and len(set(elapsed)) == len(elapsed)
    assert updates[-1]["output_bytes"] > 0
