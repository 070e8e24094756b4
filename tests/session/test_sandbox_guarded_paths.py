"""After any sandboxed command, the user's next ``git status`` and ``git commit``, run outside the sandbox, run
nothing the command wrote, and the agent-control files the command created are not left where the next agent
or editor reads them. Each attack of the list a real git would follow — a hook, ``core.fsmonitor`` in the
config, ``.git`` renamed aside and built again, ``.git/commondir`` pointing at a config the command wrote,
``.git`` replaced by a ``gitdir:`` file or a link, hooks created where none existed, ``.github`` renamed
aside, ``.claude/settings.json``, ``.mcp.json``, ``.vscode/tasks.json``, ``.envrc``, a ``.cursor`` rule
and ``AGENTS.md`` created (the attacks: tests/helpers/git_attacks.py) — in a real sandbox of
each kind this machine has: the mount view (root), Landlock alone, and bwrap. Each payload would create a
marker file; the test runs git itself, outside, and looks for it. The pure parts (which paths, what may stay,
the ledger) are tests/unit/test_sandbox_guarded.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from helpers import Leftovers
from helpers.git_attacks import ABSENT, ATTACKS, fresh_repository, git, git_env, user_runs_git
from helpers.sandbox import bwrap_support, open_module_session
from peon.workers.sandbox import landlock as ll
from peon.workers.sandbox import namespaces

ABI = ll.abi_version().abi
VIEW = ABI >= 1 and not namespaces.probe()
pytestmark = pytest.mark.skipif(ABI < 1 or not shutil.which("git"), reason="needs Landlock and git")

MODES = {
    # The default sandbox as root: Landlock, the mount view (read-only binds, containers bound to themselves).
    "view": ({"mode": "required", "kind": "landlock"}, {}),
    # Landlock alone: nothing is read-only inside the workspace; what the command left is judged after it.
    "landlock": ({"mode": "auto", "kind": "landlock"}, {"PEON_SANDBOX_SIMULATE": "no-namespaces"}),
    "bwrap": ({"mode": "required", "kind": "bwrap", "network": False}, {}),
}

class Box:
    def __init__(self, root: Path, guard: Leftovers, mode: str):
        self.workspace, self.tmp, self.home = root / "ws", root / "tmp", root / "home"
        for directory in (self.workspace, self.tmp, self.home):
            directory.mkdir()
        self.marker = self.tmp / "ran"  # the sandbox's temp dir: writable, so a payload run inside could too
        sandbox, env = MODES[mode]
        self.session = open_module_session(self.workspace, root / "state", guard, sandbox,
                                           {"TMPDIR": str(self.tmp), **env})
        self.git_env = git_env(self.home)

    def fresh_repository(self, *, hooks: bool = True) -> None:
        fresh_repository(self.workspace, self.git_env, hooks=hooks)
        if self.marker.exists():
            self.marker.unlink()

    def user_runs_git(self) -> None:
        user_runs_git(self.workspace, self.git_env)

    def close(self) -> None:
        self.session.close()


def _box(tmp_path_factory, mode: str):
    guard = Leftovers(tmp_path_factory.mktemp("home"))
    box = Box(tmp_path_factory.mktemp(mode), guard, mode)
    yield box
    box.close()
    assert guard.kill_all() == [], "processes outlived the guarded-path tests"


@pytest.fixture(scope="module", params=list(MODES))
def box(request, tmp_path_factory):
    mode = request.param
    if mode == "view" and not VIEW:
        pytest.skip("the mount view needs root and namespaces")
    if mode == "bwrap" and not bwrap_support().works:
        pytest.skip(f"bwrap unusable here: {bwrap_support().detail}")
    yield from _box(tmp_path_factory, mode)


def test_the_control_a_payload_run_outside_leaves_its_marker(box):
    box.fresh_repository()
    git(box.workspace, "config", "core.fsmonitor", f"touch {box.marker}", env=box.git_env)
    box.user_runs_git()
    assert box.marker.exists(), "the payload would not have shown: the test proves nothing"


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_after_a_sandboxed_command_git_runs_nothing_it_wrote(box, attack):
    box.fresh_repository(hooks=attack != "absent_hooks")
    r = box.session.call("bash", {"command": f'PAYLOAD="touch {box.marker}"; {ATTACKS[attack]}; true'})
    assert r.ok, r
    sandbox = r.value["sandbox"]
    assert sandbox is not None and sandbox["kind"] in ("landlock", "bwrap"), r.value
    assert not box.marker.exists(), "the payload ran inside the sandbox: the attack did not get that far"
    box.user_runs_git()
    assert not box.marker.exists(), (attack, r.value)
    for path in ABSENT.get(attack, ()):
        assert not os.path.lexists(box.workspace / path), (path, r.value)
    if attack in ("agent_files", "absent_hooks", "steering_files"):
        assert sandbox.get("set_aside"), r.value  # created where nothing was: set aside, and said
        for entry in sandbox["set_aside"]:
            if "moved_to" in entry:
                assert os.path.lexists(entry["moved_to"]) and not os.path.lexists(entry["path"])


def test_git_works_inside_the_sandbox_and_nothing_is_set_aside(box):
    box.fresh_repository()
    r = box.session.call("bash", {"command": "echo more >> README && git add README && "
                                             "git -c user.name=a -c user.email=a@example.test commit -qm two && "
                                             "git status --short && git log --oneline | wc -l"})
    assert r.ok and r.value["exit_code"] == 0, r
    assert r.value["output"].split()[-1] == "2"
    assert not r.value["sandbox"].get("set_aside"), r.value
