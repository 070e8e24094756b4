"""peon.workers.fs directly, with both resolvers: containment, file kinds, ranges, atomic installs, temp files."""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from peon.core.errors import ToolError
from peon.core.paths import TEMP_PREFIX, parse_file_path
from peon.workers import fs, linux

RESOLVERS = [fs.Resolver.OPENAT2, fs.Resolver.WALK]


@pytest.fixture(params=RESOLVERS, ids=lambda r: r.value)
def resolver(request):
    if request.param is fs.Resolver.OPENAT2 and not fs.openat2_available():
        pytest.skip("openat2 is not available on this kernel")
    return request.param


@pytest.fixture
def root(tree):
    fd = fs.open_root(tree / "ws")
    yield fd
    os.close(fd)


def read(root, text, resolver, select=lambda total: (0, total)):
    return fs.read_window(root, parse_file_path(text), resolver, select)


def write(root, text, data, resolver, *, create, expected=None, use_link=False):
    return fs.write_file(root, parse_file_path(text), data, create=create, expected_sha256=expected,
                         resolver=resolver, use_link=use_link)


def error(fn, *args, **kwargs) -> ToolError:
    with pytest.raises(ToolError) as info:
        fn(*args, **kwargs)
    return info.value


def snapshot(directory: Path) -> dict:
    return {str(p.relative_to(directory)): (p.is_symlink(),
                                            p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(directory.rglob("*"))}


# -- resolution -----------------------------------------------------------------------------------------


def test_auto_picks_openat2_where_available():
    assert isinstance(fs.openat2_available(), bool)
    expected = fs.Resolver.OPENAT2 if fs.openat2_available() else fs.Resolver.WALK
    assert fs.choose_resolver(None) is expected
    assert fs.choose_resolver("auto") is expected
    assert fs.choose_resolver("walk") is fs.Resolver.WALK
    err = error(fs.choose_resolver, "bogus")
    assert err.code.value == "config_invalid" and "'bogus'" in err.message


def test_plain_and_inside_symlinks(tree, root, resolver):
    ws = tree / "ws"
    os.symlink("d/f.txt", ws / "file-link")
    os.symlink("d", ws / "dir-link")
    os.symlink("../top.txt", ws / "d" / "up-link")  # '..' that stays inside
    os.symlink("./../d/./f.txt", ws / "d" / "winding")
    for text in ("d/f.txt", "file-link", "dir-link/f.txt", "dir-link/../d/f.txt", "d/winding"):
        assert read(root, text, resolver).data == b"inside", text
    assert read(root, "d/up-link", resolver).data == b"top"


def test_symlink_chain_inside_and_chain_that_leaves(tree, root, resolver):
    ws = tree / "ws"
    os.symlink("b", ws / "a")
    os.symlink("d/c", ws / "b")
    os.symlink("f.txt", ws / "d" / "c")
    assert read(root, "a", resolver).data == b"inside"
    os.symlink("hop2", ws / "hop1")
    os.symlink("d/hop3", ws / "hop2")
    os.symlink("../../outside/secret", ws / "d" / "hop3")
    err = error(read, root, "hop1", resolver)
    assert err.code.value == "outside_workspace"
    assert "'d/hop3'" in err.message and "'../../outside/secret'" in err.message
    assert "above the workspace root" in err.message


def test_symlink_hop_limit_and_loops(tree, root, resolver):
    ws = tree / "ws"
    previous = "top.txt"
    for i in range(1, 42):
        os.symlink(previous, ws / f"l{i}")
        previous = f"l{i}"
    assert read(root, "l40", resolver).data == b"top"
    err = error(read, root, "l41", resolver)
    assert err.code.value == "io_error" and "more than 40 symbolic links" in err.message
    os.symlink("loop-b", ws / "loop-a")
    os.symlink("loop-a", ws / "loop-b")
    assert "symlink loop" in error(read, root, "loop-a", resolver).message


@pytest.mark.parametrize("link, target", [
    ("dir-out", "../outside"),  # relative directory symlink
    ("dir-abs", "{tmp}/outside"),  # absolute directory symlink
    ("file-out", "../outside/secret"),
    ("file-abs", "{tmp}/outside/secret"),
    ("sibling", "../ws-evil"),  # a sibling whose name shares the workspace's prefix
    ("sibling-file", "../ws-evil/secret"),
    ("there-and-back", "../ws/top.txt"),  # climbs above the root even though it comes back
    ("abs-inside", "{tmp}/ws/top.txt"),  # absolute targets are refused even when they point inside
    ("etc", "/etc/passwd"),
])
def test_symlinks_that_leave_are_refused(tree, root, resolver, link, target):
    os.symlink(target.format(tmp=tree), tree / "ws" / link)
    text = link if "file" in link or link in ("there-and-back", "abs-inside", "etc",
                                              "sibling-file") else f"{link}/secret"
    err = error(read, root, text, resolver)
    assert err.code.value == "outside_workspace", err
    assert repr(target.format(tmp=tree)) in err.message and repr(link) in err.message


def test_sibling_prefix_is_not_inside(tree, root, resolver):
    os.symlink("../ws-evil", tree / "ws" / "evil")
    for text in ("evil/secret", "../ws-evil/secret"):
        assert error(read, root, text, resolver).code.value == "outside_workspace"


def test_missing_and_not_a_directory(tree, root, resolver):
    err = error(read, root, "nope/x.txt", resolver)
    assert err.code.value == "not_found" and "'nope'" in err.message
    err = error(read, root, "d/nope.txt", resolver)
    assert err.code.value == "not_found" and err.message == "path 'd/nope.txt' does not exist"
    err = error(read, root, "top.txt/x", resolver)
    assert err.code.value == "not_a_directory" and "'top.txt'" in err.message
    os.symlink("missing-target", tree / "ws" / "dangling")
    assert error(read, root, "dangling", resolver).code.value == "not_found"


# -- file kinds: nothing but a regular file is read, and nothing blocks --------------------------------------


@pytest.mark.timeout(30)
def test_fifo_device_socket_directory_refused_at_once(tree, root, resolver):
    ws = tree / "ws"
    os.mkfifo(ws / "fifo")
    os.symlink("fifo", ws / "fifo-link")
    os.mkfifo(tree / "outside" / "fifo")
    os.symlink("../outside/fifo", ws / "fifo-out")
    os.symlink("/dev/zero", ws / "zero-abs")
    os.symlink("../" * 12 + "dev/zero", ws / "zero-rel")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(ws / "sock"))
    try:
        for text, kind in (("fifo", "FIFO"), ("fifo-link", "FIFO"), ("sock", "socket"), ("d", "directory")):
            err = error(read, root, text, resolver)
            assert err.code.value == "not_a_regular_file" and kind in err.message, (text, err)
        for text in ("fifo-out", "zero-abs", "zero-rel"):
            assert error(read, root, text, resolver).code.value == "outside_workspace", text
        try:
            os.mknod(ws / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
        except PermissionError:
            pytest.skip("mknod is not permitted here")
        os.symlink("zero", ws / "zero-link")
        for text in ("zero", "zero-link"):
            err = error(read, root, text, resolver)
            assert err.code.value == "not_a_regular_file" and "character device" in err.message
    finally:
        sock.close()


def test_sparse_2gib_file_read_at_high_offset(tree, root, resolver):
    path = tree / "ws" / "sparse.bin"
    size = 2 << 30
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek((1 << 30) + 10)
        f.write(b"MARK")
    start = 1 << 30
    window = read(root, "sparse.bin", resolver, lambda total: (start, start + 65536))
    assert window.total == size and window.start == start and len(window.data) == 65536
    assert window.data[10:14] == b"MARK" and window.data.count(0) == 65536 - 4
    tail = read(root, "sparse.bin", resolver, lambda total: (total - 3, total))
    assert tail.data == b"\0\0\0"


# -- writes ----------------------------------------------------------------------------------------------


def temps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(TEMP_PREFIX))


@pytest.mark.parametrize("use_link", [False, True], ids=["renameat2", "linkat"])
def test_create_and_replace(tree, root, resolver, use_link):
    ws = tree / "ws"
    out = write(root, "d/new.txt", b"hello", resolver, create=True, use_link=use_link)
    assert out.created and out.bytes_written == 5 and out.sha256 == hashlib.sha256(b"hello").hexdigest()
    assert (ws / "d" / "new.txt").read_bytes() == b"hello"
    assert stat.S_IMODE((ws / "d" / "new.txt").stat().st_mode) == 0o666 & ~_umask()
    err = error(write, root, "d/new.txt", b"again", resolver, create=True, use_link=use_link)
    assert err.code.value == "already_exists"
    assert (ws / "d" / "new.txt").read_bytes() == b"hello"
    out = write(root, "d/new.txt", b"replaced", resolver, create=False)
    assert not out.created and (ws / "d" / "new.txt").read_bytes() == b"replaced"
    err = error(write, root, "d/absent.txt", b"x", resolver, create=False)
    assert err.code.value == "not_found" and "'replace'" in err.message
    assert not (ws / "d" / "absent.txt").exists()
    assert temps(ws / "d") == []


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("use_link", [False, True], ids=["renameat2", "linkat"])
def test_racing_creates_exactly_one_wins(tree, resolver, use_link):
    ws = tree / "ws"
    for round_ in range(20):
        name = f"race-{round_}"
        barrier = threading.Barrier(6)
        outcomes: list = []

        def attempt(i: int, name: str = name, barrier: threading.Barrier = barrier, outcomes: list = outcomes) -> None:
            fd = fs.open_root(ws)
            try:
                barrier.wait()
                write(fd, name, f"writer {i}".encode(), resolver, create=True, use_link=use_link)
                outcomes.append(("ok", i))
            except ToolError as exc:
                outcomes.append((exc.code.value, i))
            finally:
                os.close(fd)

        threads = [threading.Thread(target=attempt, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        winners = [i for code, i in outcomes if code == "ok"]
        assert len(winners) == 1, outcomes
        assert sorted(code for code, _ in outcomes) == ["already_exists"] * 5 + ["ok"]
        assert (ws / name).read_text() == f"writer {winners[0]}"
    assert temps(ws) == []


def test_replace_keeps_permission_bits_and_owner(tree, root, resolver):
    target = tree / "ws" / "script.sh"
    target.write_text("old")
    os.chmod(target, 0o750)
    if os.geteuid() == 0:
        os.chown(target, 1234, 2345)
    write(root, "script.sh", b"new", resolver, create=False)
    st = target.stat()
    assert stat.S_IMODE(st.st_mode) == 0o750 and target.read_bytes() == b"new"
    if os.geteuid() == 0:
        assert (st.st_uid, st.st_gid) == (1234, 2345)
    os.chmod(target, 0o400)
    write(root, "script.sh", b"newer", resolver, create=False)
    assert stat.S_IMODE(target.stat().st_mode) == 0o400 and target.read_bytes() == b"newer"


def test_replace_through_inside_symlink_replaces_the_target(tree, root, resolver):
    ws = tree / "ws"
    os.symlink("d/f.txt", ws / "link")
    os.symlink("link", ws / "link2")
    write(root, "link2", b"via link", resolver, create=False)
    assert os.readlink(ws / "link") == "d/f.txt" and os.readlink(ws / "link2") == "link"
    assert (ws / "d" / "f.txt").read_bytes() == b"via link"
    os.symlink("d", ws / "dlink")
    assert error(write, root, "dlink", b"x", resolver, create=False).code.value == "not_a_regular_file"


def test_create_refuses_any_existing_entry_even_dangling_symlink(tree, root, resolver):
    ws = tree / "ws"
    os.symlink("nowhere", ws / "dangling")
    os.symlink("../outside/new-file", ws / "dangling-out")
    os.mkfifo(ws / "fifo")
    for text, kind in (("dangling", "symbolic link"), ("dangling-out", "symbolic link"), ("d", "directory"),
                       ("fifo", "FIFO"), ("top.txt", "regular file")):
        err = error(write, root, text, b"x", resolver, create=True)
        assert err.code.value == "already_exists" and kind in err.message, (text, err)
    assert not (ws / "nowhere").exists() and not (tree / "outside" / "new-file").exists()
    assert os.readlink(ws / "dangling") == "nowhere"


def test_replace_refuses_non_regular_destinations(tree, root, resolver):
    ws = tree / "ws"
    os.mkfifo(ws / "fifo")
    os.symlink("fifo", ws / "fifo-link")
    for text in ("fifo", "fifo-link", "d"):
        err = error(write, root, text, b"x", resolver, create=False)
        assert err.code.value == "not_a_regular_file", (text, err)
    assert stat.S_ISFIFO((ws / "fifo").lstat().st_mode)


def test_writes_that_would_leave_are_refused_and_nothing_lands_outside(tree, root, resolver):
    ws, outside = tree / "ws", tree / "outside"
    before = snapshot(outside), snapshot(tree / "ws-evil")
    os.symlink("../outside", ws / "out")  # a parent directory that is a symlink leading out
    os.symlink(str(outside), ws / "out-abs")
    os.symlink("../outside/secret", ws / "file-out")
    os.symlink("../ws-evil", ws / "evil")
    cases = [("out/new", True), ("out/secret", False), ("out-abs/new", True), ("out-abs/sub/new", True),
             ("file-out", False), ("evil/new", True), ("evil/secret", False)]
    for text, create in cases:
        err = error(write, root, text, b"PWNED", resolver, create=create)
        assert err.code.value == "outside_workspace", (text, err)
    assert (snapshot(outside), snapshot(tree / "ws-evil")) == before


def test_missing_parent_is_an_error_and_nothing_is_created(tree, root, resolver):
    ws = tree / "ws"
    err = error(write, root, "a/b/c.txt", b"x", resolver, create=True)
    assert err.code.value == "not_found" and "'a'" in err.message and "does not create directories" in err.message
    assert not (ws / "a").exists()
    err = error(write, root, "top.txt/c.txt", b"x", resolver, create=True)
    assert err.code.value == "not_a_directory"


def test_expected_sha256(tree, root, resolver):
    target = tree / "ws" / "doc.txt"
    target.write_bytes(b"v1")
    v1 = hashlib.sha256(b"v1").hexdigest()
    write(root, "doc.txt", b"v2", resolver, create=False, expected=v1)
    assert target.read_bytes() == b"v2"
    err = error(write, root, "doc.txt", b"v3", resolver, create=False, expected=v1)
    assert err.code.value == "stale"
    assert err.details["actual_sha256"] == hashlib.sha256(b"v2").hexdigest()
    assert hashlib.sha256(b"v2").hexdigest() in err.message
    assert target.read_bytes() == b"v2" and temps(tree / "ws") == []


def test_reserved_temp_names(tree, root, resolver):
    name = TEMP_PREFIX + "0123456789abcdef"
    err = error(write, root, f"d/{name}", b"x", resolver, create=True)
    assert err.code.value == "invalid_path" and "reserved" in err.message


def test_stale_temps_are_removed_but_live_ones_and_lookalikes_kept(tree, root, resolver):
    d = tree / "ws" / "d"
    stale = [d / f"{TEMP_PREFIX}{i:016x}" for i in range(3)]
    for p in stale:
        p.write_bytes(b"partial")
    live = d / f"{TEMP_PREFIX}{'f' * 16}"
    live.write_bytes(b"being written")
    lookalike = d / f"{TEMP_PREFIX}notes"
    lookalike.write_bytes(b"user file")
    os.symlink("f.txt", d / f"{TEMP_PREFIX}{'e' * 16}")  # a symlink named like a temp file: not ours
    holder = os.open(live, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # what a live writer holds
    try:
        out = write(root, "d/other.txt", b"x", resolver, create=True)
        assert sorted(out.removed_temps) == sorted(p.name for p in stale)
        assert not any(p.exists() for p in stale)
        assert live.read_bytes() == b"being written" and lookalike.exists()
        assert os.path.islink(d / f"{TEMP_PREFIX}{'e' * 16}")
    finally:
        os.close(holder)
    write(root, "d/other.txt", b"y", resolver, create=False)
    assert not live.exists()


def test_workspace_parent_is_never_touched(tree, root, resolver):
    parent = tree
    before = (sorted(os.listdir(parent)), os.stat(parent).st_mtime_ns)
    write(root, "top-new.txt", b"x" * 100, resolver, create=True)
    write(root, "top-new.txt", b"y", resolver, create=False)
    write(root, "top.txt", b"z", resolver, create=False, use_link=True)
    read(root, "top.txt", resolver)
    for text in ("../escape.txt", "d/../../escape.txt"):
        assert error(write, root, text, b"x", resolver, create=True).code.value == "outside_workspace"
    assert (sorted(os.listdir(parent)), os.stat(parent).st_mtime_ns) == before


def test_renameat2_exchange_helper(tree):
    ws = tree / "ws"
    fd = fs.open_root(ws)
    try:
        os.symlink("../outside", ws / "s")
        linux.renameat2(fd, "d", fd, "s", linux.RENAME_EXCHANGE)
        assert os.path.islink(ws / "d") and (ws / "s" / "f.txt").exists()
        with pytest.raises(FileExistsError):
            linux.renameat2(fd, "d", fd, "s", linux.RENAME_NOREPLACE)
    finally:
        os.close(fd)


# -- the whole-file hash, read in the same pass as the range ---------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_window_and_hash_come_from_one_pass(tree, root, resolver, monkeypatch, chunk):
    import random

    rng = random.Random(chunk)
    data = bytes(rng.randrange(256) for _ in range(3000))
    (tree / "ws" / "blob").write_bytes(data)
    monkeypatch.setattr(fs.read, "HASH_CHUNK", chunk)
    whole = hashlib.sha256(data).hexdigest()
    for _ in range(40):
        start = rng.randrange(len(data) + 1)
        end = rng.randrange(start, len(data) + 1)
        window = fs.read_window(root, parse_file_path("blob"), resolver,
                                lambda total, start=start, end=end: (start, end), hash_max_bytes=len(data))
        assert (window.data, window.start, window.total, window.sha256) == (data[start:end], start, len(data), whole)
    window = fs.read_window(root, parse_file_path("blob"), resolver, lambda total: (10, 20),
                            hash_max_bytes=len(data) - 1)
    assert window.data == data[10:20] and window.sha256 is None


def test_a_file_that_grows_past_the_bound_while_hashed_is_not_hashed(tree, root, resolver, monkeypatch):
    path = tree / "ws" / "growing"
    path.write_bytes(b"a" * 100)
    real_preadv = os.preadv

    def growing_preadv(fd, buffers, offset):  # another writer appends while the pass runs
        if offset == 0:
            with open(path, "ab") as f:
                f.write(b"b" * 100)
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(fs.read, "HASH_CHUNK", 64)
    monkeypatch.setattr(os, "preadv", growing_preadv)
    window = fs.read_window(root, parse_file_path("growing"), resolver, lambda total: (0, total), hash_max_bytes=150)
    assert window.sha256 is None and window.data == b"a" * 100 and window.total == 100


def test_expected_identity_is_checked_before_reading(tree, root, resolver):
    ws = tree / "ws"
    st = os.stat(ws / "top.txt")
    same = fs.FileId(st.st_dev, st.st_ino)
    assert fs.read_window(root, parse_file_path("top.txt"), resolver, lambda t: (0, t), expected=same).data == b"top"
    err = error(fs.read_window, root, parse_file_path("d/f.txt"), resolver, lambda t: (0, t), expected=same)
    assert err.code.value == "changed_since_approval" and "another file" in err.message


def test_resolution(tree, root):
    ws = tree / "ws"
    os.symlink("d/f.txt", ws / "file-link")
    os.symlink("d", ws / "dir-link")
    os.symlink("nowhere", ws / "dangling")
    d = fs.FileId.of(os.stat(ws / "d"))
    f = fs.FileId.of(os.stat(ws / "d" / "f.txt"))
    parse = parse_file_path
    assert fs.resolve(root, parse("file-link"), follow_final=True, must_exist=True) == \
        fs.Resolution("d/f.txt", d, f, "regular file")
    assert fs.resolve(root, parse("dir-link/f.txt"), follow_final=True, must_exist=True).path == "d/f.txt"
    link = fs.resolve(root, parse("file-link"), follow_final=False, must_exist=True)
    assert (link.path, link.kind) == ("file-link", "symbolic link")
    new = fs.resolve(root, parse("dir-link/new"), follow_final=False, must_exist=False)
    assert (new.path, new.directory, new.file, new.kind, new.name) == ("d/new", d, None, None, "new")
    assert fs.resolve(root, parse("dangling"), follow_final=True, must_exist=False).path == "nowhere"
    assert error(fs.resolve, root, parse("dangling"), follow_final=True, must_exist=True).code.value == "not_found"
    assert fs.FileId.parse(str(f)) == f
    for bad in ("", "1", "1:", ":1", "a:1", "1:-1", None, 7):
        assert fs.FileId.parse(bad) is None


def test_resolution_refuses_like_the_resolvers(tree, root):
    ws = tree / "ws"
    os.symlink("../outside", ws / "out")
    os.symlink(str(tree / "ws" / "top.txt"), ws / "abs")
    os.mkfifo(ws / "fifo")
    for text, code in (("out/secret", "outside_workspace"), ("abs", "outside_workspace"),
                       ("top.txt/x", "not_a_directory"), ("nope/x", "not_found")):
        assert error(fs.resolve, root, parse_file_path(text), follow_final=True, must_exist=False).code.value == code
    fifo = fs.resolve(root, parse_file_path("fifo"), follow_final=True, must_exist=True)  # O_PATH: never blocks
    assert fifo.kind == "FIFO"


def test_a_pinned_o_path_root_serves_every_operation(tree, resolver):
    """The session's pinned root is an O_PATH descriptor: reads, writes and resolution work beneath it."""
    root = os.open(tree / "ws", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        assert read(root, "d/f.txt", resolver).data == b"inside"
        write(root, "new.txt", b"one", resolver, create=True)
        write(root, "new.txt", b"two", resolver, create=False)
        write(root, "d/g.txt", b"g", resolver, create=True)
        assert (tree / "ws" / "new.txt").read_bytes() == b"two" and (tree / "ws" / "d" / "g.txt").read_bytes() == b"g"
        assert fs.resolve(root, parse_file_path("new.txt"), follow_final=True, must_exist=True).kind == "regular file"
    finally:
        os.close(root)

