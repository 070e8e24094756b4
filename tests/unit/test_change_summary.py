"""What a change record says (peon.checkpoints.summary, .records, .head): pure parsing, bounded, hostile input."""

from __future__ import annotations

import json

import pytest

from peon.checkpoints import records
from peon.checkpoints.head import workspace_head
from peon.checkpoints.summary import MAX_LISTED, decode_path, exclusion_lines, parse_diff

A, B, Z = "a" * 40, "b" * 40, "0" * 40


def raw(old_mode: str, new_mode: str, old: str, new: str, status: str, path: bytes) -> bytes:
    return f":{old_mode} {new_mode} {old} {new} {status}".encode() + b"\0" + path + b"\0"


def test_each_kind_of_change_is_named_with_its_lines():
    out = (raw("100644", "100644", A, B, "M", b"mod.txt") + raw("000000", "100644", Z, A, "A", b"new.txt")
           + raw("100644", "000000", B, Z, "D", b"gone.txt") + raw("100644", "100755", A, A, "M", b"run.sh")
           + raw("000000", "120000", Z, B, "A", b"link") + raw("000000", "100644", Z, "c" * 40, "A", b"bin.dat")
           + b"2\t1\tmod.txt\x003\t0\tnew.txt\x000\t4\tgone.txt\x000\t0\trun.sh\x001\t0\tlink\x00-\t-\tbin.dat\x00")
    summary = parse_diff(out).to_dict()
    assert (summary["added"], summary["modified"], summary["deleted"], summary["mode_changes"]) == (3, 1, 1, 1)
    assert (summary["lines_added"], summary["lines_removed"]) == (5, 5)
    files = {item["path"]: item for item in summary["files"]}
    assert files["run.sh"] == {"path": "run.sh", "status": "mode", "lines_added": 0, "lines_removed": 0,
                               "mode": "file -> executable"}
    assert files["link"]["kind"] == "symlink" and files["link"]["binary"]
    assert files["bin.dat"]["binary"] and "lines_added" not in files["bin.dat"]


def test_a_deleted_and_an_added_file_of_the_same_content_are_a_rename():
    out = raw("100644", "000000", A, Z, "D", b"old") + raw("000000", "100644", Z, A, "A", b"new") + \
        b"0\t3\told\x003\t0\tnew\x00"
    summary = parse_diff(out).to_dict()
    assert summary["renamed"] == 1 and summary["added"] == summary["deleted"] == 0
    assert summary["files"] == [{"path": "new", "status": "renamed", "from": "old", "lines_added": 0,
                                 "lines_removed": 0}]


def test_hostile_paths_are_escaped_and_structure_is_never_taken_from_them():
    out = raw("000000", "100644", Z, A, "A", b"a\nb\x1b[31m\xff") + b"1\t0\ta\nb\x1b[31m\xff\x00garbage\x00:bad"
    (item,) = parse_diff(out).to_dict()["files"]
    assert item["path"] == "a\\nb\\x1b[31m\\xff" and item["lines_added"] == 1
    assert decode_path(b"\t") == "\\t"


def test_the_listing_is_bounded_and_the_counts_whole():
    out = b"".join(raw("000000", "100644", Z, f"{i:040x}", "A", f"f{i}".encode()) for i in range(MAX_LISTED + 7))
    summary = parse_diff(out).to_dict()
    assert summary["added"] == MAX_LISTED + 7
    assert len(summary["files"]) == MAX_LISTED and summary["files_not_listed"] == 7


def test_exclusions_become_gitignore_lines_and_ambiguous_ones_are_refused():
    assert exclusion_lines(["node_modules/", "build/cache", ".venv"]) == b"node_modules/\n/build/cache\n.venv\n"
    for bad in ["!keep", "#x", "a\nb", "/", "x\\y"]:
        with pytest.raises(ValueError):
            exclusion_lines([bad])


def test_records_are_read_back_in_order_and_hostile_lines_skipped(tmp_path):
    records.append(tmp_path, {"event": "before", "id": "c1", "tool": "bash", "tree": A, "at": 1.0})
    with open(tmp_path / records.FILE_NAME, "ab") as log:
        log.write(b"not json\n[1]\n{\"event\": 3, \"id\": \"c1\"}\n")
    records.append(tmp_path, {"event": "after", "id": "c1", "tree": B, "at": 2.0, "changes": {"added": 1},
                              "shared_with": ["job-1"]})
    records.append(tmp_path, {"event": "after", "id": "never-began", "tree": B})
    (entry,) = records.timeline(records.read(tmp_path))
    assert (entry.id, entry.before, entry.after, entry.shared_with) == ("c1", A, B, ["job-1"])
    assert entry.changes == {"added": 1}


def test_a_record_line_is_bounded(tmp_path):
    files = [{"path": "x" * 500, "status": "added"} for _ in range(1000)]
    records.append(tmp_path, {"event": "after", "id": "c1", "changes": {"files": files}})
    line = (tmp_path / records.FILE_NAME).read_bytes()
    assert len(line) < records.MAX_LINE_BYTES and json.loads(line)["changes"]["files_cut"] is True


def test_the_log_is_never_read_through_a_link(tmp_path):
    (tmp_path / "elsewhere").write_text("{}\n")
    (tmp_path / records.FILE_NAME).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        records.read(tmp_path)
    with pytest.raises(OSError):
        records.append(tmp_path, {"event": "before", "id": "c"})


def test_the_head_is_read_from_files_only(tmp_path):
    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    assert workspace_head(tmp_path) == "refs/heads/main (no commit yet)"
    (git / "packed-refs").write_text(f"# pack-refs\n{A} refs/heads/main\n")
    assert workspace_head(tmp_path) == f"refs/heads/main {A}"
    (git / "refs" / "heads" / "main").write_text(B + "\n")
    assert workspace_head(tmp_path) == f"refs/heads/main {B}"
    (git / "HEAD").write_text("ref: refs/../../etc/passwd\n")
    assert workspace_head(tmp_path) is None
    (git / "HEAD").write_text(A)
    assert workspace_head(tmp_path) == f"detached {A}"
    assert workspace_head(tmp_path / "nothing") is None


def test_a_checkpoint_taken_while_files_changed_is_never_rewound_to(tmp_path):
    from peon.checkpoints.book import STORE_DIR
    from peon.checkpoints.review import Review, ReviewError

    store = tmp_path / "state" / STORE_DIR
    store.mkdir(parents=True)
    records.append(store, {"event": "before", "id": "c1", "tool": "bash", "tree": A, "unsettled": ["log.txt"]})
    records.append(store, {"event": "after", "id": "c1", "tree": B})
    with pytest.raises(ReviewError, match="not one a rewind restores"):
        Review(tmp_path / "state", tmp_path / "ws").rewind("c1")


def test_a_change_summary_reads_the_same_to_the_model_and_on_the_command_line() -> None:
    from peon.cli.changes import describe
    from peon.client.result import change_counts
    from peon.mcp.tools import describe_changes

    changes = {"added": 1, "modified": 2, "deleted": 0, "mode_changes": 1, "lines_added": 3, "lines_removed": 1,
               "checkpoint": "abc"}
    assert change_counts(changes) == "1 added, 2 modified, 1 mode changes (+3 -1 lines)"
    assert describe(changes) == "1 added, 2 modified, 1 mode changes (+3 -1 lines)"
    assert describe_changes(changes) == ("Workspace changes: 1 added, 2 modified, 1 mode changes (+3 -1 lines); "
                                         "checkpoint before the call: abc")
    assert change_counts({"added": 0}) == "" and describe({"added": 0}) == "no changes"
    assert describe_changes({"added": 0}) == ""
    assert describe({"not_checkpointed": "too large"}) == "not checkpointed: too large"
