"""The agent-control paths as the sandbox guards them: which paths beneath each writable directory, which
directories hold them, and what a command may leave there. Pure decisions: paths and file contents come
in as arguments, nothing is read here.

Promises:

* :func:`candidates` names every path the sandbox guards beneath a writable directory: each entry of the
  agent-control list (``sandbox.protected``, read from the plan: this module keeps no list of its own),
  and, when the list names anything of ``.git``, the repository's directory itself and every path through
  which git runs code or is led elsewhere (:data:`GIT_GUARDED`: ``config``, ``hooks``, ``commondir``,
  ``info/``, ``config.worktree``, ``objects/info/alternates``, ``worktrees/``), the same for each
  submodule's directory beneath ``.git/modules`` (all of ``modules/`` when there are too many to walk);
* :func:`containers` names the directories that hold guarded paths inside a writable directory — each of
  them made a mount point of itself for the call, so that renaming, removing or replacing one fails
  (``EBUSY``) and the read-only guarded paths stay where git and the agents look for them;
* :func:`inert` says whether something a command left at a guarded path runs nothing and leads nowhere,
  so it may stay: a repository's own directory, a ``config`` every key of which is on
  :data:`INERT_GIT_KEYS` (what ``git init``, ``clone``, ``remote add``, ``submodule`` and
  ``branch --track`` write, and a user's name), ``hooks`` holding only git's ``*.sample`` templates,
  ``info`` holding only ``exclude``. Anything else is not inert; so is anything this module cannot read
  exactly as git would (:func:`git_config_keys` fails closed on every construct beyond the plain
  ``[section "subsection"]`` / ``key = value`` lines git itself writes).

Runs in the worker, for each sandboxed command (:mod:`peon.workers.sandbox.ledger`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

GIT_DIR = ".git"
# Beneath a repository's directory: what makes git run code (config: core.fsmonitor, core.hooksPath,
# core.pager, aliases, filters...; hooks) or read another directory in its place (commondir, gitdir files
# in worktrees/, config.worktree, alternates, attributes in info/).
GIT_GUARDED = ("config", "hooks", "commondir", "info", "config.worktree", "objects/info/alternates", "worktrees")
GIT_MODULES = "modules"
MAX_MODULE_DIRS = 256  # submodule directories walked beneath .git/modules; beyond, all of modules/ is guarded
MAX_MODULE_DEPTH = 8  # components of a submodule's name ("libs/a/b")

# Keys of a repository's config that run nothing and point git at nothing but a remote's URL or a branch:
# a "*" stands for any subsection. What git writes for init, clone, remote add, fetch refspecs, branch
# --track, submodule add/update (core.worktree of a submodule's directory), and a commit's author.
INERT_GIT_KEYS = (
    "core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates", "core.ignorecase",
    "core.precomposeunicode", "core.symlinks", "core.worktree", "extensions.objectformat",
    "remote.*.url", "remote.*.pushurl", "remote.*.fetch", "branch.*.remote", "branch.*.merge", "branch.*.rebase",
    "submodule.*.url", "submodule.*.active", "user.name", "user.email",
)
MAX_GIT_CONFIG_BYTES = 64 << 10

_SECTION = re.compile(r'\[([A-Za-z0-9-]+)(?:[ \t]+"([^"\\\n]*)")?\][ \t]*(?:[#;].*)?')
_KEY = re.compile(r"([A-Za-z][A-Za-z0-9-]*)[ \t]*(?:=(.*))?")


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def names_git(protected: Iterable[str]) -> bool:
    """Whether the agent-control list names the repository's directory or anything in it."""
    return any(entry == GIT_DIR or entry.startswith(GIT_DIR + "/") for entry in protected)


def git_guarded(gitdir: str) -> list[str]:
    """The guarded paths of one repository directory (absolute ``gitdir``), the directory first."""
    return [gitdir, *(f"{gitdir}/{name}" for name in GIT_GUARDED)]


def candidates(root: str, protected: Sequence[str], modules: Iterable[str] = (),
               all_modules: bool = False) -> list[str]:
    """The guarded paths beneath ``root`` (absolute, not resolved), in order, without repeats: the list's
    entries, then the repository's (when the list names ``.git``) and those of each submodule directory in
    ``modules`` (absolute paths of the directories holding a ``HEAD`` found beneath ``.git/modules``). With
    ``all_modules`` (the walk found more than :data:`MAX_MODULE_DIRS`), ``.git/modules`` is guarded whole."""
    base = root.rstrip("/")
    out = [f"{base}/{entry}" for entry in protected]
    if names_git(protected):
        out += git_guarded(f"{base}/{GIT_DIR}")
        if all_modules:
            out.append(f"{base}/{GIT_DIR}/{GIT_MODULES}")
        for module in modules:
            out += git_guarded(module)
    return list(dict.fromkeys(out))


def containers(guarded: Iterable[str], roots: Iterable[str]) -> list[str]:
    """The directories strictly between the innermost writable root holding each guarded path (existing and
    resolved) and the path, shallowest first; none that is guarded itself or lies beneath a guarded path
    (read-only already: a writable bind there would lift that)."""
    paths = list(dict.fromkeys(guarded))
    root_list = sorted(set(roots), key=len, reverse=True)
    out: list[str] = []
    for path in paths:
        root = next((r for r in root_list if inside(path, r) and path != r), None)
        if root is None:
            continue
        parent = path.rsplit("/", 1)[0]
        while parent != root.rstrip("/") and inside(parent, root):
            if not any(inside(parent, g) for g in paths) and parent not in out:
                out.append(parent)
            parent = parent.rsplit("/", 1)[0]
    return sorted(out, key=lambda p: (p.count("/"), p))


# -- what may stay ---------------------------------------------------------------------------------


def git_config_keys(data: bytes) -> list[str] | None:
    """The keys set by a git config file, each ``section[.subsection].name`` with section and name in lower
    case as git compares them; None for anything but the plain lines git itself writes: a quoted value, a
    backslash anywhere (a continuation line would change where lines end), a key after a section header on
    its line, an old-style ``[section.sub]`` header, a byte-order mark, a NUL, text that is not UTF-8 or a
    file over :data:`MAX_GIT_CONFIG_BYTES`. A None is never inert."""
    if len(data) > MAX_GIT_CONFIG_BYTES or b"\0" in data or b"\\" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    keys: list[str] = []
    section: str | None = None
    for raw in text.split("\n"):
        line = raw.strip(" \t")
        if not line or line[0] in "#;":
            continue
        if line[0] == "[":
            header = _SECTION.fullmatch(line)
            if header is None:
                return None
            name, sub = header.group(1).lower(), header.group(2)
            section = name if sub is None else f"{name}.{sub}"
            continue
        entry = _KEY.fullmatch(line)
        if entry is None or section is None or '"' in (entry.group(2) or ""):
            return None
        keys.append(f"{section}.{entry.group(1).lower()}")
    return keys


def _inert_key(key: str) -> bool:
    section, _, name = key.partition(".")
    sub, _, leaf = name.rpartition(".")
    pattern = f"{section}.*.{leaf}" if sub else key
    return pattern in INERT_GIT_KEYS


def git_config_inert(data: bytes) -> bool:
    keys = git_config_keys(data)
    return keys is not None and all(_inert_key(key) for key in keys)


def inert(path: str, gitdirs: Iterable[str], kind: str, entries: Sequence[tuple[str, str]] = (),
          content: bytes | None = None) -> bool:
    """Whether what a command left at the guarded ``path`` may stay. ``kind`` is what is there
    (``"dir"``, ``"file"``, ``"link"``, ``"other"``), ``entries`` a directory's (name, kind) pairs, ``content``
    a file's bytes (read only where it decides: a repository's config). ``gitdirs``: the repository
    directories guarded beneath the same root."""
    for gitdir in sorted(gitdirs, key=len, reverse=True):  # a submodule's directory lies within the repository's
        if path == gitdir:
            return kind == "dir"
        if not inside(path, gitdir):
            continue
        name = path[len(gitdir) + 1:]
        if name == "config":
            return kind == "file" and content is not None and git_config_inert(content)
        if name == "hooks":
            return kind == "dir" and all(k == "file" and n.endswith(".sample") for n, k in entries)
        if name.startswith("hooks/"):
            return kind == "file" and "/" not in name[6:] and name.endswith(".sample")
        if name == "info":
            return kind == "dir" and all(k == "file" and n == "exclude" for n, k in entries)
        if name == "info/exclude":
            return kind == "file"
        return False
    return False
