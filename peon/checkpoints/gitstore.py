"""The checkpoint store: snapshots of a workspace as git trees in a git directory and index of Peon's own.

Why git: its object database is content-addressed (an unchanged file costs nothing, a snapshot of an
unchanged tree is the same tree id), its index compares a tree with the workspace by ``lstat`` alone
(a call that changes nothing costs about what ``git status`` does), it stores symbolic links as links
and the executable bit, and ``read-tree -u`` restores a tree without writing through a symbolic link.

Promises:

* the workspace's own repository is never read or written through git: every command runs with
  ``GIT_DIR`` and ``GIT_INDEX_FILE`` in the store, an environment built here from nothing (no
  ``GIT_*`` variable of the caller's, ``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``,
  ``HOME`` and ``XDG_CONFIG_HOME`` in the store) and ``-c`` options that turn off hooks, fsmonitor,
  the user's attributes and excludes, line-ending conversion and the untracked cache; the store's
  ``info/attributes`` unsets ``filter``, ``text``, ``eol``, ``ident`` and ``working-tree-encoding``
  for every path, above any ``.gitattributes`` of the workspace — so no filter, hook, fsmonitor or
  textconv of the workspace runs, and content is stored byte for byte;
* a snapshot records every regular file, link and executable bit under the workspace, ignored and
  untracked ones too (the workspace's ``.gitignore`` files are never consulted), except the excluded
  trees (:func:`peon.checkpoints.summary.exclusion_lines`, never walked) and any ``.git``; a file
  larger than ``max_file_bytes`` is dropped from it and named; a nested repository is not entered;
  the exclusions and ``max_file_bytes`` are kept with the store, so a reader's snapshot (a rewind's)
  drops exactly what the writer's did;
* every command is bounded by the caller's time (:class:`StoreTimeout` past it, the command killed); no
  descriptor of the caller's reaches git (``close_fds``, stdin a pipe of the store's own);
* the store keeps each snapshot's tree alive by a ref named after it (``refs/peon/<tree>``); dropping
  those of old snapshots and :meth:`GitStore.prune` frees what only they held.

One store is one session's; its callers serialise the commands that use the index (the supervisor's
:mod:`peon.supervisor.checkpointing`, a reader's lock file).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from peon.checkpoints.summary import EMPTY_TREE, Changes, exclusion_lines, parse_diff

HARDENING = (
    "core.bare=false", "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.attributesFile=/dev/null",
    "core.excludesFile=/dev/null", "core.autocrlf=false", "core.safecrlf=false", "core.eol=lf",
    "core.symlinks=true", "core.fileMode=true", "core.ignoreCase=false", "core.precomposeUnicode=false",
    "core.quotePath=false", "core.untrackedCache=false", "core.splitIndex=false", "core.sparseCheckout=false",
    "core.checkRoundtripEncoding=", "core.bigFileThreshold=512m", "gc.auto=0", "protocol.allow=never",
    "submodule.recurse=false", "diff.external=", "diff.noprefix=false", "color.ui=false", "core.pager=cat",
    "index.threads=1", "feature.manyFiles=false",
)
DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
STATUS_MARK = "peon-git-status:"
SETTINGS_NAME = "settings.json"  # what the store was created with, for the readers that snapshot it
ATTRIBUTES = b"* -filter -text !eol -ident !working-tree-encoding !diff -merge\n"


class StoreError(Exception):
    """The store could not do what was asked (its message says why)."""


class StoreTimeout(StoreError):
    """A store command took longer than its bound and was killed."""


def find_git() -> str | None:
    for candidate in ("/usr/bin/git", "/usr/local/bin/git", "/bin/git"):
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("git")


@dataclass
class Snapshot:
    tree: str
    dropped: list[str] = field(default_factory=list)  # files over max_file_bytes, not stored
    unsettled: list[str] = field(default_factory=list)  # changed while the snapshot was taken


class GitStore:
    """The snapshots of ``workspace`` in ``directory`` (created on first use, mode 0700)."""

    def __init__(self, directory: Path, workspace: Path, *, exclude: tuple[str, ...] | list[str] = (),
                 max_file_bytes: int | None = None):
        self.directory = Path(directory)
        self.workspace = Path(workspace)
        self.git_dir = self.directory / "git"
        self.index = self.directory / "index"
        self.excludes = exclusion_lines(exclude)
        self.exclude_file = self.directory / "exclude"
        # None: as the store was created with (a reader's snapshot must drop what the writer's dropped)
        self.max_file_bytes = max_file_bytes if max_file_bytes is not None else self._stored_max_file_bytes()
        git = find_git()
        if git is None:
            raise StoreError("git is not installed: checkpoints need it (install git, or set checkpoints.enabled "
                             "= false)")
        self.git = git
        self.env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "HOME": str(self.directory),
                    "XDG_CONFIG_HOME": str(self.directory / "xdg"), "GIT_CONFIG_NOSYSTEM": "1",
                    "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1", "GIT_DIR": str(self.git_dir),
                    "GIT_WORK_TREE": str(self.workspace), "GIT_INDEX_FILE": str(self.index),
                    "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "GIT_NO_REPLACE_OBJECTS": "1",
                    "GIT_AUTHOR_NAME": "peon", "GIT_AUTHOR_EMAIL": "peon@localhost",
                    "GIT_COMMITTER_NAME": "peon", "GIT_COMMITTER_EMAIL": "peon@localhost"}

    def _stored_max_file_bytes(self) -> int:
        try:
            settings = json.loads((self.directory / SETTINGS_NAME).read_text())
            value = settings.get("max_file_bytes")
            return value if isinstance(value, int) and value > 0 else DEFAULT_MAX_FILE_BYTES
        except (OSError, ValueError, AttributeError):
            return DEFAULT_MAX_FILE_BYTES

    # -- running git ---------------------------------------------------------------------------------

    def run(self, args: list[str], timeout: float, *, check: bool = True,
            bare: bool = False, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        """Run git with ``args`` in the store, bounded by ``timeout`` (then it and everything it started
        are killed: :class:`StoreTimeout`). Git's exit status comes back through its stderr, from a
        shell that waits for it: a process that reaps every child it has (the supervisor, a subreaper)
        may take a child's status before ``subprocess`` does, never what went through a pipe."""
        env = {k: v for k, v in self.env.items() if k != "GIT_WORK_TREE"} if bare else self.env
        command = [self.git]
        for option in HARDENING:
            command += ["-c", option]
        command += args
        wrapped = ["/bin/sh", "-c", f'"$@"; printf "\\n{STATUS_MARK}%d" "$?" >&2', "sh", *command]
        process = subprocess.Popen(wrapped, env=env, cwd=self.directory, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True,
                                   start_new_session=True)
        try:
            out, err = process.communicate(stdin or b"", timeout=max(timeout, 0.001))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.communicate()
            raise StoreTimeout(f"git {args[0]} took longer than {timeout:.1f} s") from None
        err, _mark, status = err.rpartition(STATUS_MARK.encode())
        returncode = int(status) if status.isdigit() else -1  # no status: the shell did not see git end
        done = subprocess.CompletedProcess(command, returncode, out, err)
        if check and returncode != 0:
            message = err.decode("utf-8", "replace").strip().splitlines()
            raise StoreError(f"git {args[0]} failed: {message[-1] if message else returncode}")
        return done

    def ensure(self, timeout: float) -> None:
        """Create the store if it does not exist yet."""
        if (self.git_dir / "HEAD").is_file():
            return
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.exclude_file.write_bytes(self.excludes)
        (self.directory / SETTINGS_NAME).write_text(json.dumps({"max_file_bytes": self.max_file_bytes}))
        self.run(["init", "-q", "--bare", str(self.git_dir)], timeout, bare=True)
        info = self.git_dir / "info"
        info.mkdir(exist_ok=True)
        (info / "attributes").write_bytes(ATTRIBUTES)
        hooks = self.git_dir / "hooks"
        shutil.rmtree(hooks, ignore_errors=True)  # none would run (core.hooksPath), and none is kept

    # -- snapshots -------------------------------------------------------------------------------------

    def snapshot(self, timeout: float, *, check_settled: bool = False) -> Snapshot:
        """The workspace now, as a tree in the store (kept by its ref); ``check_settled``: also name the
        files that changed while it was taken (a snapshot with any is not one a rewind restores)."""
        self.ensure(timeout)
        try:  # left by a git this store's lock holder killed at its bound: no other git uses this index
            os.unlink(self.directory / "index.lock")
        except FileNotFoundError:
            pass
        self.run(["add", "-u", "--ignore-errors"], timeout, check=False)  # changed and deleted files
        listed = self.run(["ls-files", "-o", "-z", f"--exclude-from={self.exclude_file}"], timeout).stdout
        new = [name for name in listed.split(b"\0") if name and not name.endswith(b"/")]  # b"x/": a nested repository
        new, dropped = self._within_size(new)
        if new:
            # one unreadable file must not keep the others out: add goes on past it (update-index stops)
            self.run(["add", "-f", "--ignore-errors", "--pathspec-from-file=-", "--pathspec-file-nul"], timeout,
                     check=False, stdin=b"".join(b":(literal)" + name + b"\0" for name in new))
        tree = self.write_tree(timeout)
        snapshot = Snapshot(tree, dropped=dropped)
        if check_settled:
            changed = self.run(["diff-files", "-z", "--name-only"], timeout).stdout
            snapshot.unsettled = [os.fsdecode(name) for name in changed.split(b"\0") if name]
        self.keep(tree)
        return snapshot

    def _within_size(self, names: list[bytes]) -> tuple[list[bytes], list[str]]:
        """``names`` (new files) split into those to store and those over ``max_file_bytes``."""
        kept, dropped = [], []
        for name in names:
            try:
                size = os.lstat(os.path.join(os.fsencode(self.workspace), name)).st_size
            except OSError:
                continue
            if size > self.max_file_bytes:
                dropped.append(os.fsdecode(name))
            else:
                kept.append(name)
        return kept, dropped

    def write_tree(self, timeout: float) -> str:
        tree = self.run(["write-tree"], timeout).stdout.decode("ascii").strip()
        if len(tree) not in (40, 64):
            raise StoreError(f"git write-tree gave {tree!r}")
        return tree

    def drop_large(self, paths: list[str], timeout: float) -> tuple[str, list[str]]:
        """Drop from the index the ``paths`` (changed since the last snapshot) over ``max_file_bytes``;
        the new tree and the paths dropped."""
        large = []
        for path in paths:
            try:
                info = os.lstat(self.workspace / path)
            except OSError:
                continue
            if info.st_size > self.max_file_bytes and not os.path.islink(self.workspace / path):
                large.append(path)
        if not large:
            return "", []
        self.run(["rm", "-q", "--cached", "--ignore-unmatch", "--", *(f":(literal){path}" for path in large)],
                 timeout)
        tree = self.write_tree(timeout)
        self.keep(tree)
        return tree, large

    def keep(self, tree: str) -> None:
        ref = self.git_dir / "refs" / "peon" / tree
        if not ref.exists():
            ref.parent.mkdir(parents=True, exist_ok=True)
            ref.write_text(tree + "\n")

    def release(self, trees: set[str]) -> None:
        for tree in trees:
            try:
                (self.git_dir / "refs" / "peon" / tree).unlink()
            except OSError:
                pass

    def kept(self) -> set[str]:
        try:
            return {entry.name for entry in os.scandir(self.git_dir / "refs" / "peon")}
        except OSError:
            return set()

    def prune(self, timeout: float) -> None:
        """Free the objects no kept snapshot holds."""
        self.run(["prune", "--expire=now"], timeout)

    def size(self) -> int:
        total = 0
        for root, _dirs, files in os.walk(self.git_dir / "objects"):
            for name in files:
                try:
                    total += os.lstat(os.path.join(root, name)).st_size
                except OSError:
                    continue
        return total

    # -- reading -----------------------------------------------------------------------------------------

    def diff(self, old: str, new: str, timeout: float) -> Changes:
        if old == new:
            return Changes()
        output = self.run(["diff-tree", "-r", "-z", "--raw", "--numstat", "--no-renames", "--no-ext-diff",
                           "--no-textconv", old or EMPTY_TREE, new or EMPTY_TREE], timeout).stdout
        return parse_diff(output)

    def patch(self, old: str, new: str, timeout: float, max_bytes: int = 4 * 1024 * 1024) -> str:
        """The unified diff from ``old`` to ``new`` (binary files named, not shown), at most ``max_bytes``."""
        if old == new:
            return ""
        output = self.run(["diff-tree", "-r", "-p", "--no-ext-diff", "--no-textconv", "--no-color", "-M",
                           old or EMPTY_TREE, new or EMPTY_TREE], timeout).stdout
        text = output[:max_bytes].decode("utf-8", "replace")
        if len(output) > max_bytes:
            text += f"\n[diff cut at {max_bytes} bytes of {len(output)}]\n"
        return text

    def has(self, tree: str, timeout: float) -> bool:
        done = self.run(["cat-file", "-e", f"{tree}^{{tree}}"], timeout, check=False)
        return done.returncode == 0

    def restore(self, tree: str, timeout: float) -> None:
        """Make the workspace's stored files those of ``tree``: changed and deleted ones written back, those
        added since removed; excluded trees and dropped large files left as they are. The index must
        hold the workspace as it is (a snapshot just taken). git checks every path it writes for a
        symbolic link on its way, so nothing is written outside the workspace."""
        self.run(["read-tree", "-u", "--reset", tree], timeout)
