"""The approval policy: pure decisions about whether a validated call may run, and the shape of answers.

Promises:

* a call reaches a worker only after the session's hook returned a :class:`Decision` with
  ``allowed=True``; every decision says who made it (``by``) and under which rule, in words a user can
  find in their configuration;
* :meth:`ApprovalPolicy.evaluate` is a pure function of the resolved configuration and the
  :class:`ApprovalRequest` (no I/O, no clock): ``allow``, ``ask`` or ``deny`` and the rule that said so;
* a ``command_prefix`` rule matches only a *simple command* (see :func:`command_words`), so no rule
  can be satisfied by a command that chains, substitutes, redirects or globs its way past the prefix;
* rules marked ``tighten_only`` (every rule from a project file) can make a decision stricter, never
  looser;
* :func:`parse_answer` turns whatever an approver sent into an :class:`Answer`; anything malformed is a
  denial, never an exception.

The I/O around this (asking the approver, waiting, grants on disk) lives in :mod:`supervisor.gate`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import posixpath
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Protocol, Sequence

from peon.tool import ToolRisk

# -- vocabulary ------------------------------------------------------------------------------------

POLICIES = ("allow", "ask", "deny")
STRICTNESS = {name: rank for rank, name in enumerate(POLICIES)}  # allow < ask < deny
SCOPES = ("call", "tool", "risk")  # what "allow for this session" may cover, narrowest first
ANSWERS = ("allow_once", "allow_session", "deny")
MAX_REASON_CHARS = 500


def strictest(first: str, second: str) -> str:
    return first if STRICTNESS[first] >= STRICTNESS[second] else second


@dataclass(frozen=True)
class ApprovalRequest:
    """Exactly what an approver is shown; a session grant is keyed on it."""

    call_id: str
    tool: str
    risk: ToolRisk
    risk_reason: str
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    canonical_input: str = ""  # the canonical JSON of the input that will be executed

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["risk"] = self.risk.value
        return out


@dataclass(frozen=True)
class Decision:
    allowed: bool
    by: str  # "policy", "grant", "approver", "approver-error", "timeout", "no-approver", "cancelled"
    rule: str  # the rule that decided, in words a user can find in their configuration
    answer: str | None = None  # the approver's answer, when an approver decided
    scope: str | None = None  # the scope of an "allow for this session" answer


class ApprovalHook(Protocol):
    async def decide(self, request: ApprovalRequest, cancelled: asyncio.Event) -> Decision: ...


# -- matching inputs -------------------------------------------------------------------------------

# A simple command is made only of these characters: words, quotes and a few punctuation marks that
# bash gives no meaning to. Everything else (; & | < > ( ) $ ` \ { } * ? [ ] ~ # ! and control
# characters, newlines included) can chain, substitute, redirect, expand or comment, so a command
# containing any of them matches no prefix — it is asked about instead.
_SIMPLE_PUNCTUATION = frozenset("-_./:=,+@%'\" \t")


def command_words(command: str) -> list[str] | None:
    """The words of ``command`` if it is a simple command, else ``None``.

    A simple command uses only letters, digits, blanks, quotes and ``-_./:=,+@%``, and its quotes are
    balanced. For such a string bash's word splitting and quote removal give exactly the words
    :func:`shlex.split` gives, and bash runs exactly one command with them.
    """
    if not command or any(not (ch.isalnum() or ch in _SIMPLE_PUNCTUATION) for ch in command):
        return None
    try:
        words = shlex.split(command, comments=False, posix=True)
    except ValueError:  # unbalanced quotes
        return None
    return words or None


def check_command_prefix(prefix: str) -> list[str]:
    """The words of a configured ``command_prefix``; ``ValueError`` saying why it cannot be one."""
    words = command_words(prefix)
    if words is None:
        raise ValueError(
            "must be a simple command: words of letters, digits and -_./:=,+@% (quotes allowed), "
            "without ; & | < > ( ) $ ` \\ { } * ? [ ] ~ # ! or newlines"
        )
    return words


@functools.lru_cache(maxsize=256)
def _prefix_words(prefix: str) -> tuple[str, ...]:
    return tuple(check_command_prefix(prefix))


@functools.lru_cache(maxsize=16)  # one call is matched against many rules; split its command once
def _command_words_cached(command: str) -> tuple[str, ...] | None:
    words = command_words(command)
    return None if words is None else tuple(words)


def normalize_workspace_path(path: str) -> str | None:
    """A workspace-relative path in normal form (``a/b``, or ``.`` for the root), or ``None`` if the
    path is absolute, empty, contains NUL or leaves the workspace lexically."""
    if not path or "\0" in path or path.startswith("/"):
        return None
    normal = posixpath.normpath(path)
    if normal == ".." or normal.startswith("../"):
        return None
    return normal


def check_path_prefix(prefix: str) -> str:
    normal = normalize_workspace_path(prefix)
    if normal is None:
        raise ValueError("must be a workspace-relative path that stays inside the workspace")
    return normal


def path_under(path: str, prefix: str) -> bool:
    """Whether workspace path ``path`` is ``prefix`` or inside it, compared by whole components."""
    normal = normalize_workspace_path(path)
    if normal is None:
        return False
    return prefix == "." or normal == prefix or normal.startswith(prefix + "/")


# -- the policy ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    action: str  # "allow", "ask" or "deny"
    rule: str


@dataclass(frozen=True)
class PolicyRule:
    """One configured rule with where it came from. ``None`` matchers match anything."""

    decision: str
    tool: str | None = None
    risk: str | None = None
    command_prefix: str | None = None
    path_prefix: str | None = None
    tighten_only: bool = False
    name: str = "approval.rules"  # how to find it: "approval.rules[2] in /path/config.toml"

    def matches(self, request: ApprovalRequest, args: Mapping[str, Any]) -> bool:
        if self.tool is not None and self.tool != request.tool:
            return False
        if self.risk is not None and self.risk != request.risk.value:
            return False
        if self.command_prefix is not None:
            command = args.get("command")
            words = _command_words_cached(command) if isinstance(command, str) else None
            wanted = _prefix_words(self.command_prefix)
            if words is None or words[: len(wanted)] != wanted:
                return False
        if self.path_prefix is not None:
            path = args.get("path")
            if not isinstance(path, str) or not path_under(path, check_path_prefix(self.path_prefix)):
                return False
        return True

    def describe(self) -> str:
        matchers = [f"{key} = {json.dumps(value)}" for key, value in (
            ("tool", self.tool), ("risk", self.risk), ("command_prefix", self.command_prefix),
            ("path_prefix", self.path_prefix)) if value is not None]
        return f"{self.name} ({', '.join(matchers)}) says {self.decision!r}"


class ApprovalPolicy:
    """allow / ask / deny for a request, from the per-risk table and the rules.

    Order: the per-risk policy applies unless rules from trusted layers (defaults, user, overrides)
    match, in which case the strictest matching trusted rule replaces it. Then every matching
    ``tighten_only`` rule (project rules, and a project's per-risk settings) can only make the
    result stricter. Ties keep the earlier rule.
    """

    def __init__(self, per_risk: Mapping[str, str], rules: Sequence[PolicyRule] = (),
                 risk_sources: Mapping[str, str] | None = None):
        self.per_risk = dict(per_risk)
        self.rules = tuple(rules)
        self.risk_sources = dict(risk_sources or {})

    @classmethod
    def from_config(cls, approval: Any, rule_sources: Sequence[str] = (),
                    risk_sources: Mapping[str, str] | None = None) -> "ApprovalPolicy":
        """From a resolved ``[approval]`` section (:class:`peon.config.Approval`)."""
        rules = []
        for index, rule in enumerate(approval.rules):
            where = rule_sources[index] if index < len(rule_sources) else f"approval.rules[{index}]"
            rules.append(PolicyRule(rule.decision, rule.tool, rule.risk, rule.command_prefix, rule.path_prefix,
                                    rule.tighten_only, where))
        per_risk = {risk.value: getattr(approval, risk.value) for risk in ToolRisk}
        return cls(per_risk, rules, risk_sources)

    @classmethod
    def from_loaded(cls, loaded: Any) -> "ApprovalPolicy":
        """From a :class:`peon.config.LoadedConfig`, naming the layer each rule and setting came from."""
        sources = {risk.value: loaded.source_of(f"approval.{risk.value}") or "defaults" for risk in ToolRisk}
        return cls.from_config(loaded.config.approval, loaded.rule_sources, sources)

    def evaluate(self, request: ApprovalRequest) -> Verdict:
        args = _input_fields(request.canonical_input)
        risk = request.risk.value
        action = self.per_risk[risk]
        source = self.risk_sources.get(risk)
        rule = f"approval.{risk} = {json.dumps(action)}" + (f" in {source}" if source else "")
        trusted = [r for r in self.rules if not r.tighten_only and r.matches(request, args)]
        if trusted:
            chosen = trusted[0]
            for candidate in trusted[1:]:
                if STRICTNESS[candidate.decision] > STRICTNESS[chosen.decision]:
                    chosen = candidate
            action, rule = chosen.decision, chosen.describe()
        for floor in self.rules:
            if floor.tighten_only and STRICTNESS[floor.decision] > STRICTNESS[action] and floor.matches(request, args):
                action, rule = floor.decision, floor.describe()
        return Verdict(action, rule)


def _input_fields(canonical_input: str) -> Mapping[str, Any]:
    try:
        value = json.loads(canonical_input) if canonical_input else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# -- answers ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    decision: str  # one of ANSWERS
    scope: str = "call"
    reason: str = ""
    approver_error: bool = False  # the approver failed (raised, returned nonsense) rather than chose


def parse_answer(message: Mapping[str, Any], scopes: Iterable[str] = SCOPES) -> Answer:
    """An approver's answer as sent on the wire; anything malformed is a denial saying what was wrong."""
    reason = message.get("reason")
    reason = "" if reason is None else str(reason)
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 3] + "..."
    failed = bool(message.get("approver_error"))
    decision = message.get("decision")
    if decision not in ANSWERS:
        return Answer("deny", reason=f"the approver's answer {decision!r} is not one of {', '.join(ANSWERS)}",
                      approver_error=True)
    if decision != "allow_session":
        return Answer(decision, reason=reason, approver_error=failed)
    scope = message.get("scope") or "call"
    offered = tuple(scopes)
    if scope not in offered:
        return Answer("deny", reason=f"the approver's scope {scope!r} is not one of {', '.join(offered)}",
                      approver_error=True)
    return Answer(decision, scope=scope, reason=reason, approver_error=failed)
