"""A fleet on one machine: several ``peon serve`` processes, each with its own workspace on its own
loopback port, driven at the same time through ``peon.RemoteSession``s from concurrent threads. Every
call is answered, and nothing crosses from one sandbox to another. (bench/studies/bench_fleet.py measures the
same shape: throughput and latency against stdio.)"""

from __future__ import annotations

import threading

import peon
from helpers.serve import ServeProcess, serve_env

SERVERS = 3
CALLS = 3


def test_fleet_of_servers_without_cross_talk(leftovers, tmp_path):
    env = serve_env(leftovers, tmp_path)
    servers = []
    try:
        for index in range(SERVERS):
            workspace = tmp_path / f"sandbox-{index}"
            workspace.mkdir()
            servers.append(ServeProcess(workspace, env, tmp_path, "--allow", "process", "--allow", "filesystem",
                                        wait=False))
        for server in servers:
            server.wait_started()
        assert len({s.port for s in servers}) == SERVERS
        results: dict[int, list] = {}
        errors: list[BaseException] = []
        start = threading.Barrier(SERVERS)

        def drive(index: int) -> None:
            try:
                with peon.RemoteSession(servers[index].url, protocol="2026-07-28") as session:
                    start.wait(30)
                    answers = []
                    for call in range(CALLS):
                        answers.append(session.call("write", {"path": f"from-{index}-{call}.txt",
                                                              "content": f"{index}\n", "mode": "create"}))
                        answers.append(session.call("bash", {"command": f"cat from-{index}-{call}.txt; pwd"}))
                    answers.append(session.call("bash", {"command": "ls"}))
                    results[index] = answers
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=drive, args=(i,)) for i in range(SERVERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors, errors
        for index, answers in results.items():
            workspace = servers[index].workspace
            assert len(answers) == 2 * CALLS + 1 and all(a.ok for a in answers), [a for a in answers if not a.ok]
            for call in range(CALLS):
                assert answers[2 * call + 1].value["output"] == f"{index}\n{workspace}\n"
            listed = answers[-1].value["output"].split()
            assert listed == sorted(f"from-{index}-{call}.txt" for call in range(CALLS)), "only its own files"
        assert len(results) == SERVERS
    finally:
        for server in servers:
            assert server.stop() == 0
