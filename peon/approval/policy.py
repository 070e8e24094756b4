"""The approval policy: pure decisions about whether a validated call may run, and the shape of answers.

Promises:

* a call reaches a worker only after the session's hook returned a :class:`Decision` with
  ``allowed=True``; every decision says who made it (``by``) and under which rule, in words a user can
  find in their configuration;
* :meth:`ApprovalPolicy.evaluate` is a pure function of the resolved configuration, the
  :class:`ApprovalRequest` and the :class:`~peon.approval.rules.ShellFacts` the supervisor gathered for the
  :meth:`ApprovalPolicy.questions` it asked (no I/O, no clock): ``allow``, ``ask`` or ``deny`` and the
  rule that said so;
* a ``command_prefix`` rule is matched against every simple command of the shell command line
  (:mod:`peon.approval.shell`; the analysis the tool made of that very line when it has one, else the
  policy's own): ``deny`` and ``ask`` rules match if **any** of them matches, or if part of the
  line cannot be analysed; ``allow`` rules allow only when **every** one of them is matched by an
  allow rule and nothing in the line is dynamic, writes outside the workspace or carries arguments
  that make a program unsafe (:mod:`peon.approval.rules`);
* a line typed into a shell (``job_write``: the details' ``typed_command``) is a ``bash`` command: the
  deny and ask command rules, and every rule of the ``bash`` tool, judge it as they judge ``bash``'s
  ``command``; command allow rules and prefix grants never allow it — what the line runs also depends
  on the shell's state (its aliases, functions, directory), which Peon does not see;
* rules marked ``tighten_only`` (every rule from a project file) can make a decision stricter, never
  looser;
* :func:`parse_answer` turns whatever an approver sent into an :class:`Answer`; anything malformed is a
  denial, never an exception.

The I/O around this (facts, asking the approver, waiting, grants on disk, the audit log) lives in
:mod:`supervisor`.
"""

from __future__ import annotations

import functools
import json
import posixpath
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from peon.core.answers import (
    ANSWERS as ANSWERS, GRANT_SCOPES as GRANT_SCOPES, SCOPES as SCOPES, AnswerName as AnswerName, Scope as Scope,
)
from peon.core.paths import normalize_workspace_path
from peon.approval.rules import (
    NO_FACTS, Questions, ShellFacts, command_blockers, hides_commands, invocation_may_match, questions, rebased,
    segment_blockers,
)
from peon.approval.shell import Segment, ShellAnalysis, analyze
from peon.core.text import shorten
from peon.core.tool import RISK_NAMES, ToolRisk

# -- vocabulary ------------------------------------------------------------------------------------

Action = Literal["allow", "ask", "deny"]
POLICIES: tuple[Action, ...] = ("allow", "ask", "deny")
STRICTNESS: dict[str, int] = {name: rank for rank, name in enumerate(POLICIES)}  # allow < ask < deny
# The detail a write to an agent-control path carries (peon/tools/shared/target.py): such a call is asked at least.
AGENT_CONTROL = "agent_control"
DecidedBy = Literal["policy", "hook", "grant", "approver", "approver-error", "timeout", "no-approver", "cancelled"]
SANDBOXED_PROCESS = "process_sandboxed"  # the per-risk setting for process calls that run in the OS sandbox
MAX_REASON_CHARS = 500


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
    sandboxed: bool = False  # the call will run inside the OS sandbox

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["risk"] = self.risk.value
        return out


@dataclass(frozen=True)
class Decision:
    allowed: bool
    by: DecidedBy
    rule: str  # the rule that decided, in words a user can find in their configuration
    answer: AnswerName | None = None  # the approver's answer, when an approver decided
    scope: Scope | None = None  # the scope of an "allow for this session" answer


# -- matching inputs -------------------------------------------------------------------------------

# A configured prefix is a few plain words: letters, digits, blanks, quotes and -_./:=,+@%.
_SIMPLE_PUNCTUATION = frozenset("-_./:=,+@%'\" \t")


def command_words(command: str) -> list[str] | None:
    """The words of ``command`` if it is one plain simple command (used for configured prefixes)."""
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


def _base(word: str) -> str:
    return posixpath.basename(word) or word


def prefix_may_match(segment: Segment, prefix: Sequence[str]) -> bool:
    """For deny and ask rules: could this simple command be ``prefix ...``? Programs compare by name
    without directory, a word computed at run time could be anything, and options compare by meaning
    (:func:`peon.approval.rules.invocation_may_match`: ``rm -r -f`` is ``rm -rf``, ``git -C x push`` is
    ``git push``)."""
    return _literal_prefix(segment, prefix) or invocation_may_match(segment.words, prefix)


def _literal_prefix(segment: Segment, prefix: Sequence[str]) -> bool:
    words = segment.words
    if len(words) < len(prefix):
        return False
    for index, (word, wanted) in enumerate(zip(words, prefix, strict=False)):
        if word is None:
            continue
        if index == 0 and _base(word) == _base(wanted):
            continue
        if word != wanted:
            return False
    return True


def prefix_matches_exactly(segment: Segment, prefix: Sequence[str], facts: ShellFacts) -> bool:
    """For allow rules: is this simple command certainly ``prefix ...``? ``/usr/bin/touch`` is
    ``touch`` only when it is the file the session's PATH finds."""
    words = segment.words
    if len(words) < len(prefix) or any(w is None for w in words[: len(prefix)]):
        return False
    first = words[0]
    assert first is not None
    if first != prefix[0]:
        if "/" in prefix[0] or not first.startswith("/") or _base(first) != prefix[0]:
            return False
        if not facts.same_program.get(first, False):
            return False
    return tuple(words[1: len(prefix)]) == tuple(prefix[1:])


# -- the policy ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    action: Action
    rule: str
    granted: bool = False  # allowed by a session's prefix grant where the configuration asks


@dataclass(frozen=True)
class PolicyRule:
    """One configured rule with where it came from. ``None`` matchers match anything."""

    decision: Action
    tool: str | None = None
    risk: str | None = None
    command_prefix: str | None = None
    path_prefix: str | None = None
    tighten_only: bool = False
    name: str = "approval.rules"  # how to find it: "approval.rules[2] in /path/config.toml"

    def matches_call(self, request: ApprovalRequest, args: Mapping[str, Any]) -> bool:
        """Every matcher but ``command_prefix``. A ``bash`` rule also judges a line typed into a shell
        (a request carrying ``typed_command``, :mod:`peon.approval.typed_input`): it is a bash command."""
        if self.tool is not None and self.tool != request.tool and not (self.tool == "bash" and _typed(request)):
            return False
        if self.risk is not None and self.risk != request.risk.value:
            return False
        if self.path_prefix is not None:
            path = _request_path(request, args)
            if path is None or not path_under(path, check_path_prefix(self.path_prefix)):
                return False
        return True

    def describe(self) -> str:
        matchers = [f"{key} = {json.dumps(value)}" for key, value in (
            ("tool", self.tool), ("risk", self.risk), ("command_prefix", self.command_prefix),
            ("path_prefix", self.path_prefix)) if value is not None]
        return f"{self.name} ({', '.join(matchers)}) says {self.decision!r}"


def _request_path(request: ApprovalRequest, args: Mapping[str, Any]) -> str | None:
    """The path a call works on: the resolved one the tool put in its details, else the typed one."""
    resolved = request.details.get("path") if isinstance(request.details, Mapping) else None
    path = resolved if isinstance(resolved, str) else args.get("path")
    return path if isinstance(path, str) else None


def _typed(request: ApprovalRequest) -> bool:
    """Whether ``request`` runs a line typed into a shell (``job_write``'s ``typed_command``)."""
    return isinstance(request.details, Mapping) and isinstance(request.details.get("typed_command"), str)


def _command_of(args: Mapping[str, Any], request: ApprovalRequest | None = None) -> str | None:
    """The command line a call runs: its input's ``command``, or what a write makes a shell run (the
    details' ``typed_command``, :mod:`peon.approval.typed_input`)."""
    command = args.get("command")
    if command is None and request is not None and isinstance(request.details, Mapping):
        command = request.details.get("typed_command")
    return command if isinstance(command, str) else None


class ApprovalPolicy:
    """allow / ask / deny for a request, from the per-risk table and the rules.

    Order: the per-risk policy applies (``process_sandboxed`` for process calls that run in the OS
    sandbox, when set) unless rules from trusted layers (defaults, user, overrides) match, in which
    case the strictest matching trusted rule replaces it. Then every matching ``tighten_only`` rule
    (project rules, and a project's per-risk settings) can only make the result stricter. Ties keep
    the earlier rule.
    """

    def __init__(self, per_risk: Mapping[str, Action], rules: Sequence[PolicyRule] = (),
                 risk_sources: Mapping[str, str] | None = None):
        self.per_risk = dict(per_risk)
        self.rules = tuple(rules)
        self.risk_sources = dict(risk_sources or {})
        self._allow_command_rules = [r for r in self.rules if r.command_prefix is not None
                                     and r.decision == "allow" and not r.tighten_only]
        self.prefix_grants: tuple[PolicyRule, ...] = ()  # the session's "allow commands starting with …"

    def grant_prefixes(self, grants: Iterable[PolicyRule]) -> None:
        """Set the session's prefix grants: allow rules that answer only what the configuration asks
        (see :meth:`evaluate`); each is a ``command_prefix`` allow rule for one tool at one risk."""
        self.prefix_grants = tuple(g for g in grants if g.command_prefix is not None and g.decision == "allow"
                                   and g.tool is not None and g.risk is not None)

    @classmethod
    def from_config(cls, approval: Any, rule_sources: Sequence[str] = (),
                    risk_sources: Mapping[str, str] | None = None) -> ApprovalPolicy:
        """From a resolved ``[approval]`` section (:class:`peon.client.config.Approval` or its plain view)."""
        rules = []
        for index, rule in enumerate(approval.rules):
            where = rule_sources[index] if index < len(rule_sources) else f"approval.rules[{index}]"
            risk = rule.risk.value if rule.risk is not None else None
            rules.append(PolicyRule(rule.decision, rule.tool, risk, rule.command_prefix, rule.path_prefix,
                                    rule.tighten_only, where))
        per_risk = {risk: getattr(approval, risk) for risk in RISK_NAMES}
        sandboxed = approval.process_sandboxed
        if sandboxed is not None:
            per_risk[SANDBOXED_PROCESS] = sandboxed
        return cls(per_risk, rules, risk_sources)

    @classmethod
    def from_loaded(cls, loaded: Any) -> ApprovalPolicy:
        """From a :class:`peon.client.config.LoadedConfig`, naming the layer each rule and setting came from."""
        sources = {name: loaded.source_of(f"approval.{name}") or "defaults"
                   for name in (*RISK_NAMES, SANDBOXED_PROCESS)}
        return cls.from_config(loaded.config.approval, loaded.rule_sources, sources)

    # -- the questions that need the file system ---------------------------------------------------

    def questions(self, request: ApprovalRequest, analysis: ShellAnalysis | None = None) -> Questions:
        """Facts :meth:`evaluate` needs before an allow rule may allow this call (none for most calls).
        ``analysis``: the tool's analysis of the call's ``command``, if it made one (see :func:`analysis_of`)."""
        args = _input_fields(request.canonical_input)
        command = _command_of(args, request)
        if command is None or _typed(request) or not any(r.matches_call(request, args)
                                                         for r in (*self._allow_command_rules, *self.prefix_grants)):
            return Questions()
        asked = questions(rebased(analysis_of(command, analysis), _call_directory(request)))
        readable = sandbox_readable(request)
        return asked if readable is None else replace(asked, readable=readable)

    # -- evaluation ---------------------------------------------------------------------------------

    def evaluate(self, request: ApprovalRequest, facts: ShellFacts = NO_FACTS,
                 analysis: ShellAnalysis | None = None) -> Verdict:
        """The verdict on ``request`` given the ``facts`` its :meth:`questions` asked for. ``analysis``: the
        tool's analysis of the call's ``command``, if it made one (see :func:`analysis_of`)."""
        args = _input_fields(request.canonical_input)
        action, rule = self._per_risk(request)
        command = _command_of(args, request)
        if command is None or not any(r.command_prefix is not None for r in (*self.rules, *self.prefix_grants)):
            analysis = None
        else:
            analysis = analysis_of(command, analysis)
        matched: list[tuple[Action, str]] = []  # (decision, description) of matching trusted rules, in order
        for candidate in self.rules:
            if candidate.tighten_only or not candidate.matches_call(request, args):
                continue
            if candidate.command_prefix is None:
                matched.append((candidate.decision, candidate.describe()))
            elif candidate.decision != "allow" and _any_segment(candidate, analysis):
                matched.append((candidate.decision, candidate.describe() + _opaque_note(candidate, analysis)))
        note = ""
        if analysis is not None and not _typed(request):  # a shell's state (aliases, functions, cwd) is unseen
            covered, note = self._covered_by_allow_rules(request, args, rebased(analysis, _call_directory(request)),
                                                         facts, self._allow_command_rules)
            if covered is not None:
                matched.append(("allow", covered))
        if matched:
            chosen = matched[0]
            for candidate_match in matched[1:]:
                if STRICTNESS[candidate_match[0]] > STRICTNESS[chosen[0]]:
                    chosen = candidate_match
            action, rule = chosen
        for floor in self.rules:
            if not floor.tighten_only or STRICTNESS[floor.decision] <= STRICTNESS[action]:
                continue
            if not floor.matches_call(request, args):
                continue
            if floor.command_prefix is None or _any_segment(floor, analysis):
                action, rule = floor.decision, floor.describe() + _opaque_note(floor, analysis)
                matched.append((floor.decision, rule))
        if not matched and note:  # the per-risk value decided: say why the allow rules did not
            rule = f"{rule} ({note})"
        granted = False
        if action == "ask" and analysis is not None and self.prefix_grants:
            # A prefix grant answers what is asked, decided on the segments exactly as allow rules are:
            # every simple command must start with a granted (or configured) prefix.
            covered, _ = self._covered_by_allow_rules(request, args, rebased(analysis, _call_directory(request)),
                                                      facts, (*self._allow_command_rules, *self.prefix_grants))
            if covered is not None:
                action, rule, granted = "allow", f"{covered}; the configuration asks: {rule}", True
        control = request.details.get(AGENT_CONTROL) if isinstance(request.details, Mapping) else None
        if isinstance(control, str) and STRICTNESS[action] < STRICTNESS["ask"]:
            action, rule = "ask", (f"a write beneath the agent-control path {control!r} (sandbox.protected) is "
                                   f"asked at least; {rule} would allow it")
            granted = False
        return Verdict(action, rule, granted)

    def _per_risk(self, request: ApprovalRequest) -> tuple[Action, str]:
        risk = request.risk.value
        key = risk
        if request.sandboxed and risk == ToolRisk.PROCESS.value and SANDBOXED_PROCESS in self.per_risk:
            key = SANDBOXED_PROCESS
        action = self.per_risk[key]
        source = self.risk_sources.get(key)
        return action, f"approval.{key} = {json.dumps(action)}" + (f" in {source}" if source else "")

    def _covered_by_allow_rules(self, request: ApprovalRequest, args: Mapping[str, Any], analysis: ShellAnalysis,
                                facts: ShellFacts, rules: Sequence[PolicyRule]) -> tuple[str | None, str]:
        """When every simple command is allowed by one of the allow ``rules`` and nothing else stands in
        the way: the description of the rules that allow it. Else None and why not (empty when no allow
        rule for commands applies to this call at all)."""
        candidates = [r for r in rules if r.matches_call(request, args)]
        if not candidates:
            return None, ""
        blockers = command_blockers(analysis, facts)
        if blockers:
            return None, "not allowed by command rules: " + "; ".join(blockers)
        used: list[str] = []
        for segment in analysis.segments:
            rule = next((r for r in candidates if r.command_prefix is not None
                         and prefix_matches_exactly(segment, _prefix_words(r.command_prefix), facts)), None)
            if rule is None:
                return None, f"no allow rule covers {_show_segment(segment)}"
            reasons = segment_blockers(segment, facts)
            if reasons:
                return None, f"{_show_segment(segment)} is not allowed by command rules: " + "; ".join(reasons)
            if rule.describe() not in used:
                used.append(rule.describe())
        parts = ", ".join(_show_segment(s) for s in analysis.segments)
        return f"{' and '.join(used)} (every part allowed: {parts})", ""


def analysis_of(command: str, carried: object = None) -> ShellAnalysis:
    """The analysis of ``command``: ``carried`` when it is one of exactly that line (what the tool's
    ``prepare`` made of it: the line is parsed once per call), else a new one."""
    if isinstance(carried, ShellAnalysis) and carried.command == command:
        return carried
    return analyze(command)


def _call_directory(request: ApprovalRequest) -> str:
    """The workspace-relative directory the call's command starts in (its resolved ``cwd``)."""
    where = request.details.get("cwd_path") if isinstance(request.details, Mapping) else None
    return where if isinstance(where, str) and where else "."


def sandbox_readable(request: ApprovalRequest) -> tuple[str, ...] | None:
    """The paths a sandboxed call's command may read (its plan's readable and writable paths, as the
    approval details show them); None when it runs unsandboxed. A plan that cannot be read gives ()."""
    sandbox = request.details.get("sandbox") if isinstance(request.details, Mapping) else None
    if not request.sandboxed or not isinstance(sandbox, Mapping) or not sandbox.get("active"):
        return None
    paths = [*(sandbox.get("readable") or ()), *(sandbox.get("writable") or ())]
    return tuple(p for p in paths if isinstance(p, str) and p.startswith("/"))


def _show_segment(segment: Segment) -> str:
    text = " ".join(segment.as_written(i) if w is None else (shlex.quote(w) if w else "''")
                    for i, w in enumerate(segment.words))
    return f"`{text[:200]}`"


def _any_segment(rule: PolicyRule, analysis: ShellAnalysis | None) -> bool:
    """Deny and ask: any simple command matches, and so does anything Peon cannot see (fail closed)."""
    if analysis is None or rule.command_prefix is None:
        return False
    if analysis.opaque or _hidden_commands(analysis):
        return True
    prefix = _prefix_words(rule.command_prefix)
    return any(prefix_may_match(segment, prefix) for segment in analysis.segments)


def _hidden_commands(analysis: ShellAnalysis) -> str | None:
    """The first reason a simple command may run any command at all (``git -c alias.x=!...``)."""
    return next((reason for reason in map(hides_commands, (s.words for s in analysis.segments)) if reason), None)


def _opaque_note(rule: PolicyRule, analysis: ShellAnalysis | None) -> str:
    if rule.command_prefix is None or analysis is None:
        return ""
    hidden = analysis.opaque[0] if analysis.opaque else _hidden_commands(analysis)
    if hidden is None:
        return ""
    prefix = _prefix_words(rule.command_prefix)
    if any(prefix_may_match(segment, prefix) for segment in analysis.segments):
        return ""
    return f" (applied because Peon cannot see what the command runs: {hidden})"


def _input_fields(canonical_input: str) -> Mapping[str, Any]:
    try:
        value = json.loads(canonical_input) if canonical_input else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# -- answers ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    decision: AnswerName
    scope: Scope = "call"
    reason: str = ""
    approver_error: bool = False  # the approver failed (raised, returned nonsense) rather than chose
    prefix: str = ""  # scope "prefix": the words every simple command must start with
    save: bool = False  # scope "prefix": also save it as an allow rule in the user's configuration


def offered_scopes(request: ApprovalRequest) -> tuple[Scope, ...]:
    """The scopes an approver may answer ``request`` with: ``prefix`` only for a call with a command."""
    if _command_of(_input_fields(request.canonical_input)) is None:
        return SCOPES
    return GRANT_SCOPES


def prefix_rule(request: ApprovalRequest, prefix: str, name: str) -> PolicyRule:
    """The allow rule a prefix answer to ``request`` stands for: its tool, at its risk, ``prefix ...``."""
    return PolicyRule("allow", request.tool, request.risk.value, prefix, name=name)


def parse_answer(message: Mapping[str, Any], scopes: Iterable[str] = GRANT_SCOPES) -> Answer:
    """An approver's answer as sent on the wire; anything malformed is a denial saying what was wrong."""
    reason = message.get("reason")
    reason = "" if reason is None else str(reason)
    reason = shorten(reason, MAX_REASON_CHARS)
    failed = bool(message.get("approver_error"))
    decision = message.get("decision")
    if decision == "allow_once" or decision == "deny":
        return Answer(decision, reason=reason, approver_error=failed)
    if decision != "allow_session":
        return Answer("deny", reason=f"the approver's answer {decision!r} is not one of {', '.join(ANSWERS)}",
                      approver_error=True)
    scope = message.get("scope") or "call"
    offered = [s for s in GRANT_SCOPES if s in tuple(scopes)]
    if scope not in offered:
        return Answer("deny", reason=f"the approver's scope {scope!r} is not one of {', '.join(scopes)}",
                      approver_error=True)
    if scope != "prefix":
        return Answer("allow_session", scope=offered[offered.index(scope)], reason=reason, approver_error=failed)
    prefix = message.get("prefix")
    try:
        if not isinstance(prefix, str):
            raise ValueError("is missing")
        check_command_prefix(prefix)
    except ValueError as exc:
        return Answer("deny", reason=f"the approver's prefix {shorten(repr(prefix), 200)} {exc}", approver_error=True)
    return Answer("allow_session", scope="prefix", reason=reason, approver_error=failed,
                  prefix=" ".join(shlex.quote(w) for w in check_command_prefix(prefix)),
                  save=message.get("save") is True)
