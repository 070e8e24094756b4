"""The watch that lets a snapshot of an unchanged workspace skip its walk (peon.checkpoints.watch): it is
settled only when nothing recorded can have changed, and fails to "walk" whenever it cannot vouch."""

from __future__ import annotations

import os

from peon.checkpoints import watch as watch_module
from peon.checkpoints.watch import Watch


def settled_after_clear(watch: Watch) -> Watch:
    watch.clear()
    assert watch.settled()
    return watch


def test_a_write_a_new_file_a_chmod_a_rename_and_a_delete_each_unsettle_it(tmp_path):
    (tmp_path / "a.txt").write_text("a")
    watch = settled_after_clear(Watch(tmp_path, [], []))
    for change in (lambda: (tmp_path / "a.txt").write_text("b"), lambda: (tmp_path / "new").write_text("n"),
                   lambda: os.chmod(tmp_path / "a.txt", 0o755), lambda: os.rename(tmp_path / "new", tmp_path / "n2"),
                   lambda: (tmp_path / "n2").unlink(), lambda: os.symlink("/etc", tmp_path / "link")):
        change()
        assert not watch.settled()
        settled_after_clear(watch)
    watch.close()


def test_a_directory_created_since_is_watched_from_the_next_clear(tmp_path):
    watch = settled_after_clear(Watch(tmp_path, [], []))
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    assert not watch.settled()
    settled_after_clear(watch)
    (tmp_path / "sub" / "deeper" / "f").write_text("x")
    assert not watch.settled()
    watch.close()


def test_excluded_trees_and_git_do_not_unsettle_it(tmp_path):
    for name in ("node_modules", ".git", "build"):
        (tmp_path / name / "inner").mkdir(parents=True)
    watch = settled_after_clear(Watch(tmp_path, ["node_modules"], ["build"]))
    (tmp_path / "node_modules" / "inner" / "pkg.js").write_text("x")
    (tmp_path / ".git" / "inner" / "obj").write_text("x")
    (tmp_path / "build" / "inner" / "out.o").write_text("x")
    assert watch.settled()
    watch.close()


def test_when_it_cannot_vouch_it_is_never_settled(tmp_path, monkeypatch):
    monkeypatch.setattr(watch_module, "MAX_DIRECTORIES", 2)
    for index in range(3):
        (tmp_path / f"d{index}").mkdir()
    too_many = Watch(tmp_path, [], [])
    too_many.clear()
    assert not too_many.on and not too_many.settled()
    monkeypatch.setattr(watch_module, "MAX_DIRECTORIES", 50_000)
    closed = Watch(tmp_path, [], [])
    closed.off()
    closed.clear()
    assert not closed.settled()


def test_excluded_trees_are_said_to_have_changed_apart(tmp_path):
    (tmp_path / "node_modules" / "pkg").mkdir(parents=True)
    (tmp_path / "src").mkdir()
    watch = settled_after_clear(Watch(tmp_path, ["node_modules", ".venv"], []))
    (tmp_path / "node_modules" / "pkg" / "index.js").write_text("x")
    (tmp_path / "src" / ".venv").mkdir()  # a new excluded tree, deeper
    watch.settled()
    (tmp_path / "src" / ".venv" / "lib").mkdir()
    (tmp_path / "src" / ".venv" / "lib" / "site.py").write_text("x")
    assert watch.settled()  # nothing recorded changed
    assert watch.take_excluded() == ["node_modules", "src/.venv"]
    (tmp_path / "src" / ".venv" / "lib" / "more.py").write_text("x")  # watched since it appeared
    assert watch.settled() and watch.take_excluded() == ["src/.venv"]
    assert watch.take_excluded() == []
    watch.close()
