"""The workspace file a ``read`` or ``write`` call targets: resolved and rated once in the supervisor,
insisted on in the worker.

Promises:

* :func:`resolve_target` resolves the typed path beneath the session's workspace root exactly as the
  worker will (:func:`peon.workers.fs.resolve`: symlinks that stay inside are followed, leaving is refused;
  for ``create`` the last component is never followed, and the directories typed in the path that do
  not exist are to be created — never one a symlink leads to) and rates the secret-like heuristic on the
  typed **and** the resolved path — either one matching makes the call secret-like. A call that cannot
  succeed (``not_found``, ``outside_workspace``, ``already_exists``...) fails here, before anyone is
  asked. A tool's ``prepare`` resolves each path once and rates and shows that one :class:`Target`, so
  the risk the policy rates is the risk of the path the approver is shown.
* a ``create`` or ``replace`` whose typed **or** resolved path is, or is beneath, an agent-control path
  (``sandbox.protected``, by default :data:`peon.core.agent_control.AGENT_CONTROL_PATHS`: anything in a
  repository's ``.git`` or a ``.git`` file, ``.claude``, ``.mcp.json``, ``.vscode``, ``.envrc``, instruction
  files such as ``AGENTS.md``...; the list the sandbox plan reads too, whatever ``sandbox.mode``) — or that creates a
  directory that is one, or holds one (a new ``.git``) — carries
  ``agent_control`` (the entry, :func:`peon.core.agent_control.entry_for`) in its details, and the approval
  policy asks about it at least (:data:`peon.approval.policy.AGENT_CONTROL`): every tool that writes
  through this module inherits that; :func:`rated_target` is that rating of a resolved path, the one
  rule ``rewind`` rates its paths by too (:mod:`peon.tools.shared.restore`);
* :meth:`Target.details` is what the approval request shows and what the worker receives as approved:
  ``path`` is the resolved workspace-relative path (what ``path_prefix`` approval rules match),
  ``typed_path`` the path as typed, only when it resolves elsewhere, ``file_id`` / ``directory_id``
  the device and inode of the file and of its directory at approval time, and for a create whose
  directories do not exist yet ``create_directories`` (each resolved path, outermost first; then
  ``directory_id`` is the directory they go in).
* :func:`approved_expectation` runs in the worker: it resolves the path again, compares the resolved
  path with the approved one, and returns the identities the object actually opened must have (and the
  directories it may make, beneath which approved directory). Any difference — or approved details that
  are missing or malformed — is ``changed_since_approval`` and nothing is read or written (fail closed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from peon.core.agent_control import created_entry, entry_for
from peon.core.errors import ErrorCode, ToolError
from peon.core.paths import WorkspacePath
from peon.approval.policy import AGENT_CONTROL
from peon.approval.secret_paths import SecretMatch, secret_match
from peon.core.tool import SessionView
from peon.workers import fs

Access = Literal["read", "create", "replace"]
CREATE_DIRECTORIES = "create_directories"  # the approved details' directories a create makes


@dataclass(frozen=True)
class Target:
    typed: WorkspacePath
    resolution: fs.Resolution
    secret: SecretMatch | None  # from the typed path, else from the resolved one
    secret_on_resolved_only: bool
    agent_control: str | None = None  # the sandbox.protected entry a write targets (typed or resolved path)
    control_created: str | None = None  # the directory to create that is or holds that entry, if that is why

    @property
    def redirected(self) -> bool:
        """The path resolves somewhere else than it says (through a symlink)."""
        return self.resolution.path != self.typed.normalized

    def where(self) -> str:
        """A clause naming the resolved path when it differs, for risk reasons."""
        return f"{self.typed.text!r} resolves to {self.resolution.path!r}" if self.redirected else ""

    def secret_reason(self) -> str | None:
        if self.secret is None:
            return None
        reason = self.secret.reason()
        return f"{reason}; {self.where()}" if self.secret_on_resolved_only else reason

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.resolution.path}
        if self.redirected:
            out["typed_path"] = self.typed.text
        if self.resolution.file is not None:
            out["file_id"] = str(self.resolution.file)
        out["directory_id"] = str(self.resolution.directory)
        if self.resolution.missing:
            out[CREATE_DIRECTORIES] = self.resolution.created_directories
        if self.agent_control is not None:
            out[AGENT_CONTROL] = self.agent_control
        return out

    def agent_control_reason(self) -> str | None:
        if self.agent_control is None:
            return None
        where = (f"it creates the directory {self.control_created!r}, which is or holds" if self.control_created
                 else "it writes beneath")
        return (f"{where} the agent-control path {self.agent_control!r} (sandbox.protected), which steers "
                "later agents, git, the editor, the shell or CI")


def risk_note(target: Target) -> str:
    """What the risk reason of a call that writes ``target`` (``write``, ``edit``, ``apply_patch``) says
    about it: where it resolves, why it is secret-like, and why it steers other agents (a target on the
    agent-control list)."""
    secret = target.secret_reason()  # names the resolved path itself when only that one matched
    note = secret if target.secret_on_resolved_only else "; ".join(filter(None, (target.where(), secret)))
    return "; ".join(filter(None, (note, target.agent_control_reason())))


def resolve_for(root: int, typed: WorkspacePath, access: Access) -> fs.Resolution:
    """``typed`` resolved beneath ``root`` as ``access`` needs it: the one resolution the supervisor
    approves and the worker insists on (a create names the directories it would make)."""
    return fs.resolve(root, typed, follow_final=access != "create", must_exist=access == "read",
                      create_parents=access == "create")


def resolve_target(typed: WorkspacePath, access: Access, session: SessionView) -> Target:
    """The target of a call that asks ``access`` to ``typed`` (resolved in the supervisor, once per call
    and path: see the module's promises)."""
    with fs.workspace_root(session) as root:
        resolution = resolve_for(root, typed, access)
    problem = (fs.read_target_error(typed, resolution.kind) if access == "read"
               else fs.target_error(typed, access == "create", resolution.kind))
    if problem is not None:
        raise problem
    return rated_target(typed, resolution, session.env, None if access == "read" else session.config.sandbox.protected)


def rated_target(typed: WorkspacePath, resolution: fs.Resolution, env: Mapping[str, str],
                 protected: Iterable[str] | None) -> Target:
    """``typed``, resolved as ``resolution``, rated: secret-like on its typed or resolved path, and — for a
    write (``protected``: the agent-control entries; None for a read) — agent-control on either path or
    on a directory it creates. The one rule of every tool that writes a workspace path (``write``,
    ``edit``, ``apply_patch``, ``rewind``)."""
    typed_match = secret_match(typed.parts, env)
    resolved_parts = tuple(resolution.path.split("/"))
    resolved_match = (typed_match if resolved_parts == typed.parts  # not redirected: the same answer
                      else secret_match(resolved_parts, env))
    control = created = None
    if protected is not None:
        entries = tuple(protected)
        control = entry_for(typed.parts, entries) or entry_for(resolved_parts, entries)
        if control is None and resolution.missing:
            control, created = created_entry(resolution.created_directories, entries) or (None, None)
    return Target(typed, resolution, typed_match or resolved_match, typed_match is None and resolved_match is not None,
                  control, created)


def approved_expectation(approved: Mapping[str, Any], typed: WorkspacePath, access: Access,
                         root: int) -> fs.Expected:
    """In the worker: what the call may open, or ``changed_since_approval`` (see the module's promises)."""
    path, directory = approved.get("path"), fs.FileId.parse(approved.get("directory_id"))
    file = fs.FileId.parse(approved.get("file_id"))
    file_ok = "file_id" not in approved if access == "create" else file is not None
    if not isinstance(path, str) or directory is None or not file_ok:
        raise ToolError(ErrorCode.CHANGED_SINCE_APPROVAL,
                        f"path {typed.shown}: the call does not carry the approved resolution of its path "
                        "(path, file_id, directory_id); nothing was done", {"rule": "approved_details"})
    resolution = resolve_for(root, typed, access)
    if resolution.path != path:
        raise fs.changed_since_approval(typed, f"it was approved as {path!r} but now resolves to {resolution.path!r}")
    if CREATE_DIRECTORIES in approved:
        return _expected_with_directories(approved[CREATE_DIRECTORIES], typed, path, directory, resolution)
    if resolution.missing:
        raise fs.changed_since_approval(typed, f"its directory {'/'.join(path.split('/')[:-1])!r} no longer exists")
    expected = fs.Expected(directory, resolution.name, file)
    if resolution.directory != directory or resolution.file != file:
        raise fs.changed_since_approval(
            typed, f"{path!r} is now another file (approved {file or 'nothing'} in directory {directory}, "
                   f"found {resolution.file or 'nothing'} in directory {resolution.directory})")
    return expected


def _expected_with_directories(approved: Any, typed: WorkspacePath, path: str, directory: fs.FileId,
                               resolution: fs.Resolution) -> fs.Expected:
    """In the worker, for a create approved with directories to make: they must be exactly the directories
    between the approved one and the file (each a name typed in the path), and none may be missing now that
    was not then; one another writer made meanwhile is entered, beneath the approved directory
    (:mod:`peon.workers.fs.parents`)."""
    parts = path.split("/")
    if (not isinstance(approved, list) or not approved or len(approved) >= len(parts)
            or approved != ["/".join(parts[:end]) for end in range(len(parts) - len(approved), len(parts))]
            or tuple(parts[-1 - len(approved):-1]) != typed.parts[-1 - len(approved):-1]):
        raise ToolError(ErrorCode.CHANGED_SINCE_APPROVAL,
                        f"path {typed.shown}: the call does not carry the approved directories to create "
                        f"({CREATE_DIRECTORIES}); nothing was done", {"rule": "approved_details"})
    names = tuple(parts[-1 - len(approved):-1])
    if len(resolution.missing) > len(names) or names[len(names) - len(resolution.missing):] != resolution.missing:
        raise fs.changed_since_approval(typed, f"{len(resolution.missing)} of its directories are missing now, "
                                        f"where {len(names)} were to be created")
    if resolution.missing == names and resolution.directory != directory:
        raise fs.changed_since_approval(typed, "the directory its new directories go in is another one now")
    return fs.Expected(directory, resolution.name, None, names, "/".join(parts[:-1 - len(names)]))
