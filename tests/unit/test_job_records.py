"""An ended job's record, without a process: compact, about half a KiB, and still answering ``job_list`` and
``job_output`` exactly."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from types import SimpleNamespace

from peon.supervisor.jobs import JobRecord, JobTable


def test_an_ended_job_keeps_a_compact_record_that_still_answers():
    """Ended, a job's record drops what running needed (its events, its result) and keeps what job_list and
    job_output read; whoever still holds the running job sees it end."""

    async def scenario() -> None:
        table = JobTable(SimpleNamespace(output_buffer_bytes=1024, session_output_bytes=4096, max_running=1,
                                         clean_output=True), 1.0)
        job = table.new("call-1", "bash", "echo hi", background=False)
        table.on_event(job)({"op": "output", "id": job.id, "offset": 0, "data": b"hi\n"})
        table.finish(job, {"ok": True, "value": {"exit_code": 0, "signal": None}})
        assert type(table.jobs[job.id]) is JobRecord and job.ended.is_set() and job.reply is None
        info = table.info(job.id)
        assert (info.state, info.exit_code, info.command, info.output_bytes) == ("exited", 0, "echo hi", 3)
        assert table.read(job.id, 0, 100).data == b"hi\n"
        await asyncio.wait_for(table.wait(job.id, 3, 60), 5)  # at once: an ended job has nothing to wait for
        assert (await table.stop(job.id)).state == "exited"
        assert [record.job_id for record in table.list()] == [job.id]

    asyncio.run(scenario())


def test_ended_records_cost_about_half_a_kib_and_still_answer_exactly(tmp_path):
    """A session keeps up to 1024 ended records, so each must be small beyond the bytes it retains: ~0.55 KiB
    here, with or without output (it was ~1.35 KiB, half of it a ring's empty deque). Their output still
    pages, and is still evicted, as before."""
    table = JobTable(SimpleNamespace(output_buffer_bytes=1024, session_output_bytes=4096, max_running=1,
                                     clean_output=True), 1.0, tmp_path)

    def run(number: int, *chunks: bytes) -> str:
        job = table.new(f"call-{number}", "bash", "true", background=False)
        offset = 0
        for chunk in chunks:
            table.on_event(job)({"op": "output", "id": job.id, "offset": offset, "data": bytearray(chunk)})
            offset += len(chunk)
        table.finish(job, {"ok": True, "value": {"exit_code": 0, "signal": None}})
        return job.id

    run(0, b"warm-up\n")
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        ids = [run(number, *([b"hi\n"] if number % 2 else [])) for number in range(1, 1001)]
        gc.collect()
        per_record = (tracemalloc.get_traced_memory()[0] - before) / len(ids)
    finally:
        tracemalloc.stop()
    assert per_record < 900, f"an ended job record costs {per_record:.0f} bytes"
    silent, spoken = table.read(ids[1], 0, 100), table.read(ids[0], 0, 100)
    assert (silent.data, silent.total_bytes, silent.dropped_before) == (b"", 0, None)
    assert (spoken.data, spoken.next_offset, spoken.total_bytes) == (b"hi\n", 3, 3)
    # An ended job's kept output pages exactly, and later output evicts its oldest bytes first.
    table = JobTable(SimpleNamespace(output_buffer_bytes=1024, session_output_bytes=4096, max_running=1,
                                     clean_output=True), 1.0, tmp_path)
    written = b"".join(b"%03d\n" % i for i in range(200))  # 800 bytes
    ended = run(1, written[:100], written[100:450], written[450:])
    assert table.read(ended, 101, 300).data == written[101:401]
    for number, size in enumerate((1024, 1024, 1024, 500), 2):
        run(number, b"y" * size)  # 800 + 3572 bytes: the session keeps 4096, the 276 oldest go
    info = table.info(ended)
    assert (info.output_bytes, info.output_retained_bytes, info.retained_from) == (800, 524, 276)
    page = table.read(ended, 0, 1000)
    assert (page.dropped_before, page.offset, page.data) == (276, 276, written[276:])
    assert table.read(ended, 300, 1000).data == written[300:]

