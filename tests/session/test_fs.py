"""peon.workers.fs in a private mount namespace of its own (``unshare``): the magic links of a procfs are
refused, and OS errors — a full tmpfs, a read-only mount — are stable codes that leave no temporary file.
The rest of peon.workers.fs is tests/unit/test_workers_fs.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from peon.workers import fs

ROOT = Path(__file__).resolve().parent.parent.parent


# -- magic links (procfs mounted inside the workspace, in a private mount namespace) ------------------------

MAGIC_SCRIPT = textwrap.dedent("""
    import json, os, subprocess, sys
    sys.path.insert(0, sys.argv[2])
    from peon.core.errors import ToolError
    from peon.core.paths import parse_file_path
    from peon.workers import fs
    ws = sys.argv[1]
    os.mkdir(os.path.join(ws, "proc"))
    subprocess.run(["mount", "-t", "proc", "proc", os.path.join(ws, "proc")], check=True)
    os.symlink("proc/self/root", os.path.join(ws, "via-link"))
    root = fs.open_root(ws)
    out = {}
    for resolver in (fs.Resolver.OPENAT2, fs.Resolver.WALK):
        for text in ("proc/self/root/etc/passwd", "proc/self/cwd/x", "proc/thread-self/root/etc/hostname",
                     "via-link/etc/passwd", "proc/self/fd/0", "proc/self/exe"):
            try:
                fd = fs.open_beneath(root, parse_file_path(text), os.O_RDONLY | os.O_NONBLOCK, resolver)
                out[f"{resolver.value} {text}"] = "opened"
                os.close(fd)
            except ToolError as exc:
                out[f"{resolver.value} {text}"] = [exc.code.value, exc.message]
    print(json.dumps(out))
""")


def in_private_mount_namespace(script: str, tree, what: str) -> object:
    """Run ``script`` (with the workspace and the repository root as arguments) where it may mount
    ``what``; skip when this machine does not allow it. Returns the JSON the script printed."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip(f"needs root and unshare(1) to mount {what} in a private namespace")
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, "-c", script, str(tree / "ws"), str(ROOT)],
        capture_output=True, text=True, timeout=50,
    )
    if proc.returncode != 0 and "mount" in proc.stderr:
        pytest.skip(f"cannot mount {what} here: {proc.stderr.strip()[-200:]}")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.timeout(60)
def test_magic_links_are_refused(tree):
    if not fs.openat2_available():
        pytest.skip("openat2 is not available on this kernel")
    results = in_private_mount_namespace(MAGIC_SCRIPT, tree, "a procfs")
    assert len(results) == 12
    for key, outcome in results.items():
        assert outcome != "opened", key
        code, message = outcome
        assert code == "outside_workspace", (key, outcome)
        if key.startswith("walk"):
            assert "magic link" in message, (key, message)


OS_ERROR_SCRIPT = textwrap.dedent("""
    import json, os, subprocess, sys
    sys.path.insert(0, sys.argv[2])
    from peon.core.errors import ToolError
    from peon.core.paths import parse_file_path
    from peon.workers import fs
    ws = sys.argv[1]
    small = os.path.join(ws, "small")
    os.mkdir(small)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", small], check=True)
    root = fs.open_root(ws)
    out = {}
    def attempt(key, text, data, create):
        try:
            fs.write_file(root, parse_file_path(text), data, create=create, expected_sha256=None,
                          resolver=fs.Resolver.WALK)
            out[key] = "ok"
        except ToolError as exc:
            out[key] = [exc.code.value, exc.message, sorted(os.listdir(small))]
    attempt("fits", "small/a", b"x" * 1000, True)
    attempt("no space", "small/b", b"x" * (1 << 20), True)
    subprocess.run(["mount", "-o", "remount,ro", small], check=True)
    attempt("read-only", "small/a", b"y", False)
    print(json.dumps(out))
""")


@pytest.mark.timeout(60)
def test_os_errors_are_stable_codes_and_leave_no_temp_files(tree):
    out = in_private_mount_namespace(OS_ERROR_SCRIPT, tree, "a small tmpfs")
    assert out["fits"] == "ok"
    code, message, listing = out["no space"]
    assert code == "io_error" and "No space left on device" in message and "'small/b'" in message
    assert listing == ["a"]  # the partial temporary file was removed
    code, message, listing = out["read-only"]
    assert code == "io_error" and "Read-only file system" in message and listing == ["a"]
