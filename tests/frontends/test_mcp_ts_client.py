"""``peon mcp`` driven by the official TypeScript SDK client (``@modelcontextprotocol/sdk``: ``Client`` +
``StdioClientTransport``), pinned in tests/js/package.json and installed by ``.ci/run`` (``npm ci``).

The SDK validates every result the way applications built on it do — including ``structuredContent``
against the tool's ``outputSchema`` on error results — so these tests prove that every error a tool can
give reaches the model as an error result with its stable code, not as a client-side ``-32602``.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from itertools import count
from pathlib import Path

import pytest

from helpers import pids_in, wait_for
from helpers.agents import install_fake_agents
from helpers.mcp import JS, NEEDS_TS_SDK, NODE, isolated_env, server_command, write_config

pytestmark = NEEDS_TS_SDK

BUILT_INS = {"bash", "read", "write", "read_skill", "agent_claude", "agent_codex", "agent_pi", "job_output", "job_stop",
             "job_list", "edit", "apply_patch", "grep", "glob", "job_write", "changes", "rewind"}
SKILL = "---\nname: release-checks\ndescription: Steps before a release.\n---\n# Release checks\n1. Run the tests.\n"


class TsClient:
    """The node driver (tests/js/mcp_driver.mjs) around one SDK client connected to ``peon mcp``."""

    def __init__(self, workspace: Path, env: dict, stderr: Path, *args: str, elicit: dict | None = None):
        command = server_command(workspace, *args)
        config = {"command": command[0], "args": command[1:], "env": env, "cwd": str(workspace), "elicit": elicit}
        self.stderr = open(stderr, "wb")  # noqa: SIM115  (closed in close())
        self.proc = subprocess.Popen([NODE, str(JS / "mcp_driver.mjs"), json.dumps(config)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, cwd=JS, env=env)
        self.ids = count(1)
        self.answers: dict[int, dict] = {}
        self.events: list[dict] = []
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        ready = self.lines.get(timeout=60)
        assert ready and ready.get("ready"), f"the TypeScript client did not connect: {ready}"
        self.server = ready["server"]

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self.lines.put(json.loads(raw))
        self.lines.put(None)

    def send(self, op: str, **fields) -> int:
        command_id = next(self.ids)
        self.proc.stdin.write(json.dumps({"id": command_id, "op": op, **fields}).encode() + b"\n")
        self.proc.stdin.flush()
        return command_id

    def answer(self, command_id: int, timeout: float = 60) -> dict:
        while command_id not in self.answers:
            line = self.lines.get(timeout=timeout)
            assert line is not None, "the TypeScript client exited"
            if "event" in line:
                self.events.append(line)
            else:
                self.answers[line["id"]] = line
        return self.answers.pop(command_id)

    def request(self, op: str, **fields) -> dict:
        return self.answer(self.send(op, **fields))

    def call(self, name: str, arguments: dict, **options) -> dict:
        """The CallToolResult the SDK returned; fails with the SDK's error if it threw instead."""
        answer = self.request("call", name=name, arguments=arguments, **options)
        assert "result" in answer, f"the TypeScript SDK refused the answer to {name}: {answer['error']}"
        return answer

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.request("close")
                self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.stderr.close()


@pytest.fixture
def ts_client(workspace, leftovers, tmp_path):
    clients = []

    def start(*args: str, elicit: dict | None = None, env: dict | None = None) -> TsClient:
        environment = {**isolated_env(leftovers, tmp_path / "home"), **(env or {})}
        client = TsClient(workspace, environment, tmp_path / f"ts-client-{len(clients)}.stderr", *args, elicit=elicit)
        clients.append(client)
        return client

    yield start
    for client in clients:
        client.close()


def ok_value(answer: dict) -> dict:
    result = answer["result"]
    assert result.get("isError") is False, result
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    return result["structuredContent"]


def error_of(answer: dict) -> dict:
    """An error result as the model and a program see it: the code leads the text, and the object is
    in ``_meta``; there is no structuredContent to contradict the outputSchema."""
    result = answer["result"]
    assert result.get("isError") is True and "structuredContent" not in result, result
    error = result["_meta"]["peon/error"]
    assert result["content"][0]["text"].startswith(f"{error['code']}: {error['message']}"), result
    return error


def test_list_and_a_successful_call_of_every_built_in(ts_client, workspace, tmp_path):
    (workspace / "notes.txt").write_text("hello from the workspace\n")
    skills = workspace / ".peon" / "skills" / "release-checks"
    skills.mkdir(parents=True)
    (skills / "SKILL.md").write_text(SKILL)
    agents = install_fake_agents(tmp_path / "agents")
    client = ts_client(*[f"--allow={risk}" for risk in ("filesystem", "process", "delegate")],
                       env={"PATH": f"{agents}:/usr/bin:/bin", "FAKE_AGENT_LOG": str(tmp_path / "agents.log")})
    assert client.server["name"] == "peon"

    listed = client.request("list")
    tools = {tool["name"]: tool for tool in listed["tools"]}
    assert set(tools) == BUILT_INS and listed["nextCursor"] is None
    for tool in tools.values():
        assert tool["outputSchema"]["type"] == "object" and set(tool["annotations"]) == {
            "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}, tool

    failed = ok_value(client.call("bash", {"command": "echo out; exit 3"}))  # a non-zero exit is a result
    assert failed["exit_code"] == 3 and failed["output"] == "out\n"
    bash = ok_value(client.call("bash", {"command": "echo hello"}))
    assert bash["exit_code"] == 0 and bash["output"] == "hello\n"
    read = ok_value(client.call("read", {"path": "notes.txt"}))
    assert read["content"] == "hello from the workspace\n"
    written = ok_value(client.call("write", {"path": "new.txt", "content": "written\n", "mode": "create"}))
    assert (workspace / "new.txt").read_text() == "written\n", written
    skill = ok_value(client.call("read_skill", {"name": "release-checks"}))
    assert "Run the tests." in json.dumps(skill)
    for agent in ("agent_claude", "agent_codex", "agent_pi"):
        value = ok_value(client.call(agent, {"prompt": "summarize the notes please"}))
        assert value["exit_code"] == 0 and "received a prompt of 26 bytes" in value["output"], (agent, value)


def test_error_results_reach_the_model_with_their_code(ts_client, workspace, tmp_path):
    (workspace / "notes.txt").write_text("x\n")
    config = write_config(tmp_path, '[approval]\nread_only = "allow"\nfilesystem = "allow"\nprocess = "deny"\n')
    client = ts_client("--config", config)
    client.request("list")  # the SDK validates results against the outputSchemas it has listed
    cases = [
        ("bash", {"command": "touch ran"}, "denied"),
        ("read", {"path": "missing.txt"}, "not_found"),
        ("read", {"path": "notes.txt", "offset": -1}, "invalid_input"),
        ("write", {"path": "notes.txt"}, "invalid_input"),
        ("read", {"path": "../outside.txt"}, "outside_workspace"),
        ("write", {"path": "/etc/passwd", "content": "x", "mode": "replace"}, "invalid_path"),
        ("read_skill", {"name": "nothing-here"}, "invalid_input"),
    ]
    for name, arguments, code in cases:
        error = error_of(client.call(name, arguments))
        assert error["code"] == code, (name, arguments, error)
    assert not (workspace / "ran").exists()


def test_progress_and_cancellation(ts_client, workspace):
    client = ts_client("--allow", "process")
    client.request("list")
    answer = client.call("bash", {"command": "for i in 1 2 3 4; do echo tick $i; sleep 0.4; done"}, progress=True)
    assert ok_value(answer)["exit_code"] == 0
    progress = [update["progress"] for update in answer["progress"]]
    assert len(progress) >= 2 and progress == sorted(set(progress)), answer["progress"]
    assert all("running for" in update["message"] for update in answer["progress"])

    pid_file = workspace / "pids"
    running = client.send("call", name="bash", arguments={"command": f"echo $$ > {pid_file}; sleep 300 & wait"})
    assert wait_for(lambda: pids_in(pid_file), 30), "the call did not start"
    assert client.request("cancel", target=running)["cancelled"] is True
    cancelled = client.answer(running)
    assert cancelled["error"]["name"] == "AbortError" or "cancel" in cancelled["error"]["message"].lower(), cancelled
    assert wait_for(lambda: not Path(f"/proc/{pids_in(pid_file)[0]}").exists(), 20), "the cancelled command lives on"
    assert ok_value(client.call("bash", {"command": "echo after"}))["output"] == "after\n"


def test_approval_through_elicitation_and_a_policy_denial(ts_client, workspace, tmp_path):
    agents = install_fake_agents(tmp_path / "agents")
    config = write_config(tmp_path, '[approval]\nprocess = "ask"\ndelegate = "deny"\n')
    client = ts_client("--config", config, elicit={"decision": "allow_once"}, env={"PATH": f"{agents}:/usr/bin:/bin"})
    client.request("list")
    assert ok_value(client.call("bash", {"command": "echo approved"}))["output"] == "approved\n"
    [asked] = client.events
    assert asked["params"]["requestedSchema"]["required"] == ["decision"]
    assert "echo approved" in asked["params"]["message"]
    denied = error_of(client.call("agent_codex", {"prompt": "do the thing please"}))
    assert denied["code"] == "denied" and denied["details"]["by"] == "policy"
    assert len(client.events) == 1  # deny is never asked about


def test_the_file_tools_through_the_typescript_sdk(ts_client, workspace):
    """edit, apply_patch, grep and glob: annotations by risk, results the SDK validates against each
    outputSchema, and their own error codes as error results."""
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("def main():\n    return 1\n")
    client = ts_client("--allow", "filesystem")
    tools = {tool["name"]: tool for tool in client.request("list")["tools"]}
    for name, read_only in (("edit", False), ("apply_patch", False), ("grep", True), ("glob", True)):
        hints = tools[name]["annotations"]
        assert (hints["readOnlyHint"], hints["destructiveHint"], hints["idempotentHint"]) == \
            (read_only, not read_only, read_only), (name, hints)
        assert tools[name]["outputSchema"]["type"] == "object"

    edited = ok_value(client.call("edit", {"path": "src/app.py", "edits": [
        {"old_string": "return 1", "new_string": "return 2"}]}))
    assert "+    return 2" in edited["diff"] and (workspace / "src" / "app.py").read_text().endswith("return 2\n")
    patched = ok_value(client.call("apply_patch", {"patch": "*** Begin Patch\n*** Add File: src/util.py\n+X = 1\n"
                                                            "*** End Patch\n"}))
    assert patched["files"][0]["action"] == "add" and (workspace / "src" / "util.py").read_text() == "X = 1\n"
    found = ok_value(client.call("grep", {"pattern": "return|X =", "output": "lines"}))
    assert [(e["path"], e["line"]) for e in found["entries"]] == [("src/app.py", 2), ("src/util.py", 1)]
    listed = ok_value(client.call("glob", {"pattern": "**/*.py"}))
    assert sorted(listed["paths"]) == ["src/app.py", "src/util.py"]

    assert error_of(client.call("edit", {"path": "src/app.py", "edits": [
        {"old_string": "nowhere", "new_string": "x"}]}))["code"] == "not_found"
    assert error_of(client.call("apply_patch", {"patch": "not a patch"}))["code"] == "invalid_patch"
    assert error_of(client.call("grep", {"pattern": "("}))["code"] == "invalid_pattern"
    assert error_of(client.call("glob", {"pattern": "../*"}))["code"] == "invalid_pattern"


def test_prompts_resources_subscriptions_and_logs(ts_client, workspace):
    skills = workspace / ".peon" / "skills" / "release-checks"
    skills.mkdir(parents=True)
    (skills / "SKILL.md").write_text(SKILL.replace("description: Steps before a release.\n",
                                                   "description: Steps before a release.\narguments: version\n"))
    client = ts_client("--allow", "process")

    def ok(method: str, **params) -> dict:
        answer = client.request("request", method=method, params=params)
        assert "result" in answer, f"the TypeScript SDK refused {method}: {answer['error']}"
        return answer["result"]

    prompts = ok("prompts/list")["prompts"]
    assert [(p["name"], [a["name"] for a in p["arguments"]]) for p in prompts] == [("release-checks", ["version"])]
    message = ok("prompts/get", name="release-checks", arguments={"version": "2.0"})["messages"][0]
    assert message["role"] == "user" and "untrusted" in message["content"]["text"]
    assert "1. Run the tests." in message["content"]["text"]
    skill = ok("resources/read", uri="skill://release-checks")["contents"][0]
    assert skill["text"].endswith("1. Run the tests.\n")
    ok("logging/setLevel", level="debug")

    job = ok_value(client.call("bash", {"command": "echo one; while [ ! -e go ]; do sleep 0.05; done; echo two",
                                        "background": True}))
    uri = f"job://{job['job_id']}/output"
    assert uri in [r["uri"] for r in ok("resources/list")["resources"]]
    completed = ok("completion/complete", ref={"type": "ref/resource", "uri": "job://{id}/output"},
                   argument={"name": "id", "value": ""})
    assert job["job_id"] in completed["completion"]["values"]
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("x\n")
    (workspace / "src" / ".env").write_text("TOKEN=x\n")
    files = ok("completion/complete", ref={"type": "ref/resource", "uri": "file:///{path}"},
               argument={"name": "path", "value": "sr"})
    assert files["completion"]["values"] == ["src/"]
    files = ok("completion/complete", ref={"type": "ref/resource", "uri": "file:///{path}"},
               argument={"name": "path", "value": "src/"})
    assert files["completion"] == {"values": ["src/app.py"], "total": 1, "hasMore": False}
    escaped = client.request("request", method="completion/complete", params={
        "ref": {"type": "ref/resource", "uri": "file:///{path}"}, "argument": {"name": "path", "value": "../"}})
    assert escaped["error"]["code"] == -32602 and "leaves the workspace" in escaped["error"]["message"], escaped
    ok("resources/subscribe", uri=uri)
    (workspace / "go").write_text("")

    def updates() -> list:
        while True:
            try:
                line = client.lines.get(timeout=0.2)
            except queue.Empty:
                break
            if line is not None and "event" in line:
                client.events.append(line)
            elif line is not None:
                client.answers[line["id"]] = line
        return [e for e in client.events if e["event"] == "resource_updated"]

    assert wait_for(lambda: updates(), 30), client.events
    assert {e["params"]["uri"] for e in updates()} == {uri}
    assert wait_for(lambda: ok("resources/read", uri=uri)["contents"][0]["_meta"]["peon/eof"], 30)
    assert ok("resources/read", uri=uri)["contents"][0]["text"] == "one\ntwo\n"

    slow = ok_value(client.call("bash", {"command": "sleep 30", "timeout_seconds": 0.3}))
    assert slow["timed_out"] is True

    def logs() -> list:
        updates()
        return [e["params"] for e in client.events if e["event"] == "log"]

    assert wait_for(lambda: any(log["data"].get("event") == "killed" for log in logs()), 30), client.events
