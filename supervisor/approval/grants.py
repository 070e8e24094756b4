"""Session grants: what an approver allowed "for this session", and the file that keeps it.

Promises:

* a grant covers exactly what the approver was shown unless the approver chose a broader scope:
  ``call`` — the same tool, effective risk and canonical input (compared by SHA-256, so a grant never
  stores the input itself); ``prefix`` — every command line of that tool at that effective risk whose
  simple commands all start with the approver's words (decided by the policy on the analysed segments,
  exactly as a configured allow rule: :meth:`~peon.approval.policy.ApprovalPolicy.grant_prefixes`, so
  ``npm test; rm -rf x`` is asked again); ``tool`` — every call of that tool at that effective risk;
  ``risk`` — every call of that effective risk;
* grants live in ``grants.json`` in the session's state directory, written atomically (a temporary
  file in the same directory, flushed and fsynced, then renamed over the old one, then the directory
  fsynced), so a supervisor killed at any moment leaves either the old or the new set, and a
  supervisor restarted with the same state directory continues with the same grants;
* an unreadable or corrupt file is reported on stderr and treated as no grants (fail closed: the user
  is asked again), never as a crash or a hang: anything but a regular file at ``grants.json`` (a FIFO,
  a device, a directory, a symbolic link) is refused without being opened for reading
  (:mod:`peon.core.statefile`), a file over :data:`MAX_FILE_BYTES` is not read, and JSON nested too deeply
  to decode counts as corrupt.

Grants only answer calls the policy would *ask* about: a ``deny`` is never overridden by a grant.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from peon.approval.policy import GRANT_SCOPES, ApprovalRequest, PolicyRule, Scope, check_command_prefix
from peon.core.text import shorten
from peon.core.statefile import RefusedFile, check_json_depth, read_regular_file

FILE_NAME = "grants.json"
FORMAT_VERSION = 1
# A grant takes a few hundred bytes; a file this large is not one Peon wrote.
MAX_FILE_BYTES = 8 << 20
MAX_DEPTH = 64  # a grants file is three levels deep; more is not a file Peon wrote
MAX_SUMMARY_CHARS = 200


def input_digest(canonical_input: str) -> str:
    return hashlib.sha256(canonical_input.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Grant:
    scope: Scope
    tool: str
    risk: str
    input_sha256: str  # the granted call's canonical input; compared only for scope "call"
    summary: str  # what the approver saw, shortened, for people reading the file
    granted_at: float
    call_id: str
    reason: str = ""
    prefix: str = ""  # scope "prefix": the words every simple command starts with

    def matches(self, request: ApprovalRequest, digest: str | None = None) -> bool:
        """Whether the grant covers ``request`` by itself; a prefix grant never does (the policy decides
        it on the command's segments: :meth:`as_rule`)."""
        if request.risk.value != self.risk or self.scope == "prefix":
            return False
        if self.scope == "risk":
            return True
        if request.tool != self.tool:
            return False
        return self.scope == "tool" or (digest or input_digest(request.canonical_input)) == self.input_sha256

    def as_rule(self) -> PolicyRule:
        """A prefix grant as the allow rule the policy decides it with."""
        return PolicyRule("allow", self.tool, self.risk, self.prefix, name=self.describe())

    def describe(self) -> str:
        covered = {
            "call": f"this exact {self.tool} call",
            "prefix": f"every {self.tool} command line with {self.risk} risk whose every part starts with "
                      f"`{self.prefix}`",
            "tool": f"every {self.tool} call with {self.risk} risk",
            "risk": f"every call with {self.risk} risk",
        }[self.scope]
        return f"session grant (scope {self.scope!r}: {covered}) given for call {self.call_id}"


class GrantStore:
    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / FILE_NAME
        self.grants: list[Grant] = self._load()

    def find(self, request: ApprovalRequest) -> Grant | None:
        """The narrowest grant covering ``request``, if any."""
        digest = input_digest(request.canonical_input)
        matching = [g for g in self.grants if g.matches(request, digest)]
        matching.sort(key=lambda g: GRANT_SCOPES.index(g.scope))
        return matching[0] if matching else None

    def prefix_rules(self) -> list[PolicyRule]:
        """The session's prefix grants, as the allow rules the policy decides them with."""
        return [g.as_rule() for g in self.grants if g.scope == "prefix"]

    def add(self, request: ApprovalRequest, scope: Scope, reason: str = "", prefix: str = "") -> Grant:
        """Record a grant and persist it. The grant holds in memory even if the file cannot be written."""
        if scope not in GRANT_SCOPES:
            raise ValueError(f"unknown grant scope {scope!r}")
        if scope == "prefix":
            check_command_prefix(prefix)
        summary = shorten(request.summary, MAX_SUMMARY_CHARS)
        grant = Grant(scope, request.tool, request.risk.value, input_digest(request.canonical_input), summary,
                      time.time(), request.call_id, reason, prefix if scope == "prefix" else "")
        self.grants.append(grant)
        try:
            self._save()
        except OSError as exc:
            print(f"peon-supervisor: cannot save session grants to {self.path}: {exc}", file=sys.stderr)
        return grant

    def _load(self) -> list[Grant]:
        try:
            text = read_regular_file(self.path, max_bytes=MAX_FILE_BYTES, follow_symlinks=False)
            check_json_depth(text, MAX_DEPTH)
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError(f"expected a JSON object, got {type(data).__name__}")
            if data.get("version") != FORMAT_VERSION:
                raise ValueError(f"unsupported version {data.get('version')!r}")
            grants = [Grant(**entry) for entry in data["grants"]]
            if any(g.scope not in GRANT_SCOPES for g in grants):
                raise ValueError("unknown scope")
            for grant in grants:
                if grant.scope == "prefix":
                    check_command_prefix(grant.prefix)
            return grants
        except FileNotFoundError:
            return []
        except RecursionError:
            print(f"peon-supervisor: ignoring unreadable session grants in {self.path} (JSON nested too deeply); "
                  "calls will be asked about again", file=sys.stderr)
            return []
        except (OSError, RefusedFile, ValueError, TypeError, KeyError, AttributeError) as exc:
            print(f"peon-supervisor: ignoring unreadable session grants in {self.path} ({exc}); "
                  "calls will be asked about again", file=sys.stderr)
            return []

    def _save(self) -> None:
        data = json.dumps({"version": FORMAT_VERSION, "grants": [asdict(g) for g in self.grants]},
                          indent=1, ensure_ascii=False).encode("utf-8", "surrogatepass")
        write_atomically(self.path, data)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash at any point leaves the old or the new content."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
