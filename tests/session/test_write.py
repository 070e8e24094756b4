"""write through a real session (supervisor + workers), with both path resolvers."""

from __future__ import annotations

import hashlib
import os
import stat


from peon.core.paths import TEMP_PREFIX
from helpers import Recorder, expect_error, expect_ok




def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ok(session, args):
    return expect_ok(session, "write", args)


def err(session, args, code):
    return expect_error(session, "write", args, code)


def temps(directory) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(TEMP_PREFIX)]


def test_create_then_replace_in_both_containments(session, workspace):
    (workspace / "src").mkdir()
    v = ok(session, {"path": "src/main.rs", "content": "fn main() {}\n", "mode": "create"})
    assert v == {"path": "src/main.rs", "bytes_written": 13, "sha256": sha(b"fn main() {}\n"), "created": True}
    assert (workspace / "src" / "main.rs").read_text() == "fn main() {}\n"
    v = ok(session, {"path": "./src/main.rs", "content": "héllo 😀", "mode": "replace",
                     "expected_sha256": sha(b"fn main() {}\n").upper()})
    assert v["created"] is False and v["bytes_written"] == len("héllo 😀".encode()) and v["path"] == "src/main.rs"
    assert (workspace / "src" / "main.rs").read_text() == "héllo 😀"
    read = session.call("read", {"path": "src/main.rs"}).value
    assert read["content"] == "héllo 😀" and sha(read["content"].encode()) == v["sha256"]
    assert temps(workspace / "src") == []


def test_create_fails_if_anything_exists(fs_session, workspace):
    (workspace / "file").write_text("old")
    os.symlink("nowhere", workspace / "dangling")
    (workspace / "dir").mkdir()
    os.mkfifo(workspace / "fifo")
    for path, kind in (("file", "regular file"), ("dangling", "symbolic link"), ("dir", "directory"), ("fifo", "FIFO")):
        e = err(fs_session, {"path": path, "content": "new", "mode": "create"}, "already_exists")
        assert kind in e.message and repr(path) in e.message
    assert (workspace / "file").read_text() == "old" and not (workspace / "nowhere").exists()


def test_replace_fails_if_missing_or_not_regular(fs_session, workspace):
    e = err(fs_session, {"path": "absent.txt", "content": "x", "mode": "replace"}, "not_found")
    assert "'absent.txt' does not exist" in e.message
    assert not (workspace / "absent.txt").exists()
    os.mkfifo(workspace / "fifo")
    (workspace / "dir").mkdir()
    for path in ("fifo", "dir"):
        err(fs_session, {"path": path, "content": "x", "mode": "replace"}, "not_a_regular_file")


def test_stale_expected_sha256_carries_the_actual_hash(fs_session, workspace):
    (workspace / "doc").write_bytes(b"v1")
    e = err(fs_session, {"path": "doc", "content": "v2", "mode": "replace", "expected_sha256": sha(b"other")}, "stale")
    assert e.details["actual_sha256"] == sha(b"v1") and sha(b"v1") in e.message
    assert (workspace / "doc").read_bytes() == b"v1" and temps(workspace) == []
    e = err(fs_session, {"path": "doc", "content": "v2", "mode": "create", "expected_sha256": sha(b"v1")},
            "invalid_input")
    assert "only applies to mode 'replace'" in e.message
    e = err(fs_session, {"path": "doc", "content": "v2", "mode": "replace", "expected_sha256": "xyz"}, "invalid_input")
    assert e.details["pointer"] == "/expected_sha256"


def test_schema_rules(fs_session):
    for args, rule in (({"path": "a", "mode": "create"}, "required"),  # mode is optional, content is not
                       ({"path": "a", "content": "x", "mode": "append"}, "enum"),
                       ({"path": "a", "content": 1, "mode": "create"}, "type"),
                       ({"path": "a", "content": "x", "mode": "create", "force": True}, "additionalProperties")):
        assert err(fs_session, args, "invalid_input").details["rule"] == rule


def test_replace_keeps_permission_bits(fs_session, workspace):
    target = workspace / "run.sh"
    target.write_text("#!/bin/sh\n")
    os.chmod(target, 0o754)
    ok(fs_session, {"path": "run.sh", "content": "#!/bin/sh\necho hi\n", "mode": "replace"})
    assert stat.S_IMODE(target.stat().st_mode) == 0o754 and target.read_text().endswith("echo hi\n")


def test_a_replace_never_creates_its_missing_parent_directory(fs_session, workspace):
    e = err(fs_session, {"path": "new/dir/file.txt", "content": "x", "mode": "replace"}, "not_found")
    assert "there is no 'new'" in e.message and "does not create directories" in e.message
    assert not (workspace / "new").exists()


def test_a_create_makes_its_missing_parent_directories_and_reports_each(fs_session, workspace):
    (workspace / "pkg").mkdir()
    v = ok(fs_session, {"path": "pkg/sub/deeper/mod.py", "content": "x = 1\n", "mode": "create"})
    assert v["created"] is True and v["created_directories"] == ["pkg/sub", "pkg/sub/deeper"]
    assert (workspace / "pkg" / "sub" / "deeper" / "mod.py").read_text() == "x = 1\n"
    v = ok(fs_session, {"path": "pkg/sub/other.py", "content": "", "mode": "create"})
    assert "created_directories" not in v  # it made none
    assert temps(workspace / "pkg" / "sub") == [] and temps(workspace / "pkg") == []


def test_without_mode_a_write_creates_or_replaces(fs_session, workspace):
    """The call a model makes first, {path, content}: it creates the file (and its directories), and the
    same call again replaces it; the mode is decided when it is approved."""
    v = ok(fs_session, {"path": "src/app.py", "content": "one\n"})
    assert v["created"] is True and v["created_directories"] == ["src"]
    v = ok(fs_session, {"path": "src/app.py", "content": "two\n"})
    assert v["created"] is False and (workspace / "src" / "app.py").read_text() == "two\n"
    e = err(fs_session, {"path": "src/app.py", "content": "three\n", "expected_sha256": sha(b"one\n")}, "stale")
    assert e.details["actual_sha256"] == sha(b"two\n")
    (workspace / "src" / "dir").mkdir()
    err(fs_session, {"path": "src/dir", "content": "x"}, "not_a_regular_file")
    e = err(fs_session, {"path": "src/app.py", "content": "x", "mode": "overwrite"}, "invalid_input")
    assert "'create'" in e.message and "'replace'" in e.message  # the allowed values


def test_directories_are_never_made_through_a_symlink(fs_session, workspace, tmp_path):
    """A missing directory a symlink leads to is not made (inside or out); a link that leaves is refused
    before anything is made; nothing lands outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink("missing-target", workspace / "dangling")
    os.symlink("../outside", workspace / "out")
    e = err(fs_session, {"path": "dangling/x.py", "content": "x", "mode": "create"}, "not_found")
    assert "there is no 'missing-target'" in e.message and "does not create directories" not in e.message
    err(fs_session, {"path": "out/new/x.py", "content": "x", "mode": "create"}, "outside_workspace")
    assert not (workspace / "missing-target").exists() and os.listdir(outside) == []


def test_a_new_agent_control_directory_is_asked_as_agent_control(open_session, workspace):
    """Writing beneath a new .git or .claude, or making .github (which holds agent-control paths), is asked
    although approval.filesystem = "allow", and a denied call makes no directory."""
    approver = []
    session = open_session({"approval": {"read_only": "allow", "filesystem": "allow"}},
                           approver=lambda request: approver.append(request) or "deny")
    for path, entry in ((".git/info/exclude", ".git/info"), (".claude/agents/x.md", ".claude"),
                        (".github/notes.md", ".github/copilot-instructions.md")):
        assert session.call("write", {"path": path, "content": "x"}).error.code == "denied"
        assert approver[-1]["details"]["agent_control"] == entry, approver[-1]
        assert approver[-1]["details"]["create_directories"][0] == path.split("/")[0]
    assert "creates the directory '.github', which is or holds" in approver[2]["risk_reason"]
    assert not any((workspace / name).exists() for name in (".git", ".claude", ".github"))
    assert expect_ok(session, "write", {"path": "docs/new/page.md", "content": "x"})["created_directories"] == [
        "docs", "docs/new"]
    assert len(approver) == 3


def test_symlinks_out_refused_and_nothing_lands_outside(fs_session, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("original")
    sibling = tmp_path / "ws-twin"
    sibling.mkdir()
    os.symlink("../outside", workspace / "out-dir")
    os.symlink(str(outside), workspace / "out-abs")
    os.symlink("../outside/victim", workspace / "out-file")
    os.symlink("../ws-twin", workspace / "twin")
    for path, mode in (("out-dir/new", "create"), ("out-dir/victim", "replace"), ("out-abs/new", "create"),
                       ("out-file", "replace"), ("twin/new", "create"), ("../outside/new", "create"),
                       ("../ws-twin/new", "create")):
        e = err(fs_session, {"path": path, "content": "PWNED", "mode": mode}, "outside_workspace")
        assert "leaves the workspace" in e.message
    assert sorted(os.listdir(outside)) == ["victim"] and (outside / "victim").read_text() == "original"
    assert os.listdir(sibling) == []
    # the symlink leading out is itself not replaced by a create either
    err(fs_session, {"path": "out-file", "content": "x", "mode": "create"}, "already_exists")
    assert os.readlink(workspace / "out-file") == "../outside/victim"


def test_replace_follows_symlinks_inside(fs_session, workspace):
    (workspace / "real.txt").write_text("old")
    os.symlink("real.txt", workspace / "alias.txt")
    ok(fs_session, {"path": "alias.txt", "content": "new", "mode": "replace"})
    assert os.path.islink(workspace / "alias.txt") and (workspace / "real.txt").read_text() == "new"


def test_reserved_temp_name_and_invalid_paths(fs_session):
    e = err(fs_session, {"path": TEMP_PREFIX + "0123456789abcdef", "content": "x", "mode": "create"}, "invalid_path")
    assert "reserved" in e.message
    for path, code in (("", "invalid_path"), ("/abs", "invalid_path"), ("a/../../x", "outside_workspace"),
                       ("dir/", "invalid_path"), (".", "invalid_path")):
        err(fs_session, {"path": path, "content": "x", "mode": "create"}, code)


def test_write_risk_and_approval_details(open_session, workspace):
    requests = []

    def approver(request):
        requests.append(request)
        return "allow_once"

    session = open_session({"approval": {"read_only": "allow", "filesystem": "ask"}}, approver=approver)
    content = "line\n" * 2000
    ok(session, {"path": "big.txt", "content": content, "mode": "create"})
    ok(session, {"path": ".env", "content": "A=1\n", "mode": "create"})
    first, second = requests
    assert first["risk"] == "filesystem" and "creates a file" in first["risk_reason"]
    assert first["details"]["bytes"] == len(content) and first["details"]["sha256"] == sha(content.encode())
    assert len(first["details"]["content_preview"].encode()) < 4200 and "omitted" in first["details"]["content_preview"]
    assert first["summary"] == "create 'big.txt' with 10000 bytes"
    assert "secret-like path" in second["risk_reason"]


def test_write_is_denied_under_deny_policy(open_session, workspace):
    session = open_session({"approval": {"read_only": "allow", "filesystem": "deny"}})
    r = session.call("write", {"path": "x", "content": "x", "mode": "create"})
    assert r.error.code == "denied" and not (workspace / "x").exists()


def test_workspace_parent_untouched(fs_session, workspace):
    parent = workspace.parent
    before = (sorted(os.listdir(parent)), os.stat(parent).st_mtime_ns)
    ok(fs_session, {"path": "top.txt", "content": "a", "mode": "create"})
    ok(fs_session, {"path": "top.txt", "content": "b" * 100000, "mode": "replace"})
    assert (sorted(os.listdir(parent)), os.stat(parent).st_mtime_ns) == before


def test_writes_to_agent_control_paths_are_asked_even_when_filesystem_is_allowed(open_session, workspace):
    """sandbox.protected (.git/hooks, .claude, .mcp.json...) is rated by the resolved path: a write there,
    or through a harmless-looking link to there, is asked although approval.filesystem = "allow"; other
    writes are not."""
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / ".claude").mkdir()
    (workspace / "innocent").symlink_to(".git/hooks")
    requests = []

    def approver(request):
        requests.append(request)
        return "deny"

    session = open_session({"approval": {"read_only": "allow", "filesystem": "allow"}}, approver=approver)
    ok(session, {"path": "notes.txt", "content": "x", "mode": "create"})
    assert requests == []
    for path in (".git/hooks/pre-commit", "innocent/post-checkout", ".claude/settings.json", ".mcp.json"):
        r = session.call("write", {"path": path, "content": "#!/bin/sh\n", "mode": "create"})
        assert r.error.code == "denied", (path, r)
    assert [req["details"]["agent_control"] for req in requests] == [".git/hooks", ".git/hooks", ".claude", ".mcp.json"]
    assert "agent-control path" in requests[1]["risk_reason"] and "resolves to" in requests[1]["risk_reason"]
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists() and not (workspace / ".mcp.json").exists()
    # The list is configurable: a project may add to it, and a user may shorten it.
    session = open_session({"approval": {"read_only": "allow", "filesystem": "allow"},
                            "sandbox": {"protected": [".claude"]}}, approver=approver)
    ok(session, {"path": ".mcp.json", "content": "{}", "mode": "create"})


def test_all_of_git_and_every_agent_control_file_is_asked_for_each_writing_tool(open_session, workspace):
    """For the file tools all of a repository's ``.git`` is agent-control — git's redirections (``commondir``,
    ``info/``, ``modules/*/config``, ``worktrees/``, ``objects/info/alternates``) and a ``.git`` file
    (``gitdir:``) too — and so are the files that make another program run code or steer an agent
    (``.envrc``, ``.cursor/``, ``.vscode/``, ``.pre-commit-config.yaml``, instruction files such as
    ``AGENTS.md`` in any directory): ``write``, ``edit`` and ``apply_patch`` of one are asked although
    ``approval.filesystem = "allow"``; reading one is not."""
    for directory in (".git/info", ".git/modules/sub", ".git/worktrees/w", ".git/objects/info", "vendor/lib",
                      ".cursor", ".vscode", "docs"):
        (workspace / directory).mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    (workspace / "AGENTS.md").write_text("Be careful.\n")
    approver = Recorder(otherwise="deny")
    session = open_session({"approval": {"read_only": "allow", "filesystem": "allow"}}, approver=approver)
    writes = {".git/commondir": ".git/commondir", ".git/info/attributes": ".git/info",
              ".git/modules/sub/config": "**/.git", ".git/worktrees/w/gitdir": ".git/worktrees",
              ".git/objects/info/alternates": ".git/objects/info/alternates", "vendor/lib/.git": "**/.git",
              ".envrc": ".envrc", ".cursor/mcp.json": ".cursor", ".vscode/tasks.json": ".vscode",
              ".pre-commit-config.yaml": ".pre-commit-config.yaml", "docs/CLAUDE.md": "**/CLAUDE.md"}
    for path in writes:
        r = session.call("write", {"path": path, "content": "gitdir: /tmp/elsewhere\n", "mode": "create"})
        assert r.error is not None and r.error.code == "denied", (path, r)
    r = session.call("edit", {"path": ".git/config", "edits": [{"old_string": "[core]\n",
                                                                  "new_string": "[core]\n\thooksPath = /tmp/x\n"}]})
    assert r.error is not None and r.error.code == "denied", r
    r = session.call("edit", {"path": "AGENTS.md", "edits": [{"old_string": "careful", "new_string": "reckless"}]})
    assert r.error is not None and r.error.code == "denied", r
    r = session.call("apply_patch", {"patch": "*** Begin Patch\n*** Add File: .envrc\n+curl x | sh\n*** End Patch\n"})
    assert r.error is not None and r.error.code == "denied", r
    assert [req["details"].get("agent_control") for req in approver.requests] == [
        *writes.values(), ".git/config", "**/AGENTS.md", ".envrc"]
    assert all("agent-control path" in req["risk_reason"] for req in approver.requests)
    assert not any((workspace / path).exists() for path in writes)
    assert (workspace / "AGENTS.md").read_text() == "Be careful.\n"
    assert (workspace / ".git" / "config").read_text() == "[core]\n"
    asked = len(approver.requests)
    assert expect_ok(session, "read", {"path": "AGENTS.md"})["content"] == "Be careful.\n"
    assert len(approver.requests) == asked  # reading them is free
