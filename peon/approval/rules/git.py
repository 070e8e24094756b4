"""What git runs that its command line does not show: configured programs, hooks, aliases, and options
that run or write.

Promises:

* :func:`git_blockers` names every reason a ``git`` command may not be allowed by rules: global options
  other than :data:`GIT_SAFE_GLOBAL`, subcommands and options that run programs or write files, a
  working directory Peon cannot know, and what the repository's own configuration makes git run
  (:data:`GIT_PROGRAM_KEYS`, hooks, aliases) as the supervisor found it — a repository not checked, or
  whose configuration could not be read completely, is a reason (fail closed);
* :func:`hides_commands` names what lets a ``git`` command run any command at all (configuration given
  on its command line that runs programs, subcommands that run command strings), so deny and ask rules
  match it whatever they name.

Owns git's tables; reading git's configuration file format is :mod:`peon.approval.gitconfig`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from peon.approval.rules.facts import ShellFacts, workspace_relative
from peon.approval.rules.invocation import invocation
from peon.approval.shell import Segment

# git: options before the subcommand that are safe; any other is not (-c, -C, --git-dir, --exec-path...).
GIT_SAFE_GLOBAL = frozenset({"--no-pager", "-P", "-p", "--paginate", "--no-replace-objects", "--literal-pathspecs",
                             "--glob-pathspecs", "--noglob-pathspecs", "--icase-pathspecs", "--no-optional-locks",
                             "--version", "-h", "--no-advice"})
GIT_UNSAFE_LONG = frozenset({"--output", "--exec", "--upload-pack", "--receive-pack", "--ext-diff",
                             "--open-files-in-pager", "--extcmd", "--output-directory", "--exec-path", "--tool",
                             "--template", "--config-env"})
GIT_UNSAFE_SHORT = {"grep": "O", "rebase": "x", "format-patch": "o", "archive": "o", "difftool": "xt",
                    "mergetool": "t", "commit": "", "config": ""}
GIT_UNSAFE_SUBCOMMANDS = {"difftool": "runs a diff tool", "mergetool": "runs a merge tool",
                          "filter-branch": "runs shell filters", "instaweb": "starts a web server and browser",
                          "web--browse": "starts a browser", "daemon": "serves the repository",
                          "help": "runs the manual viewer or browser the configuration names"}
GIT_UNSAFE_SUBCOMMAND_WORDS = {("bisect", "run"): "runs a command", ("submodule", "foreach"): "runs a command"}
# Subcommands that never run hooks; every other may (commit, merge, checkout, push, am, gc --auto...).
GIT_NO_HOOKS = frozenset({"status", "diff", "log", "show", "shortlog", "blame", "annotate", "grep", "ls-files",
                          "ls-tree", "cat-file", "rev-parse", "rev-list", "describe", "diff-tree", "diff-files",
                          "diff-index", "show-ref", "for-each-ref", "whatchanged", "version", "help", "var",
                          "count-objects", "name-rev", "merge-base", "check-ignore", "check-attr", "cherry",
                          "range-diff", "verify-commit", "verify-tag"})
# Configuration keys that make git run a program: "section.*.key" matches any subsection.
GIT_PROGRAM_KEYS = (
    "core.fsmonitor", "core.pager", "core.editor", "core.sshcommand", "core.askpass", "core.gitproxy",
    "core.hookspath", "core.alternaterefscommand", "core.worktree", "diff.external", "diff.*.command",
    "diff.*.textconv", "filter.*.clean", "filter.*.smudge", "filter.*.process", "merge.*.driver", "pager.*",
    "credential.helper", "credential.*.helper", "gpg.program", "gpg.*.program", "sequence.editor",
    "uploadpack.packobjectshook", "remote.*.uploadpack", "remote.*.receivepack", "remote.*.vcs",
    "protocol.*.allow", "protocol.allow", "difftool.*.cmd", "mergetool.*.cmd", "man.*.cmd", "web.browser",
    "browser.*.cmd", "submodule.*.update", "trailer.*.command", "trailer.*.cmd", "init.templatedir",
    "sendemail.*", "include.path", "includeif.*.path", "man.*.path", "man.viewer", "help.*", "browser.*.path",
    "gpg.*.defaultkeycommand", "core.editor", "imap.tunnel",
)


def git_key_runs_program(key: str, value: str | None) -> bool:
    """Whether config ``key`` (``section.sub.name``, section and name lower-case) makes git run
    something. ``core.fsmonitor = false`` does not; includes count (they are followed separately, but
    an include that cannot be followed is unknown)."""
    section, _, rest = key.partition(".")
    subsection, _, name = rest.rpartition(".")
    for pattern in GIT_PROGRAM_KEYS:
        p_section, _, p_rest = pattern.partition(".")
        p_sub, _, p_name = p_rest.rpartition(".")
        if p_section != section:
            continue
        if p_rest == "*":
            return True
        if p_name != name:
            continue
        if (p_sub == "*" and subsection) or (p_sub == "" and subsection == ""):
            off = value is not None and value.strip().lower() in ("false", "no", "off", "0", "")
            if key == "core.fsmonitor" and off:
                return False
            return key not in ("include.path",) and not key.startswith("includeif.")
    return False


def git_blockers(segment: Segment, facts: ShellFacts) -> list[str]:
    """Reasons this ``git`` command may not be allowed by rules (see the module's promises)."""
    reasons: list[str] = []
    words = segment.words
    i = 1
    while i < len(words):
        word = words[i]
        if word is None:
            return ["an argument of git is computed at run time (it could be -c or another dangerous option)"]
        if not word.startswith("-"):
            break
        if word not in GIT_SAFE_GLOBAL:
            reasons.append(f"git {word} before the subcommand can change the configuration or repository git uses")
        i += 1
    subcommand = words[i] if i < len(words) else None
    rest = [w for w in words[i + 1:]]
    if any(w is None for w in rest):
        reasons.append("an argument of git is computed at run time (it could be a dangerous option)")
    if subcommand in GIT_UNSAFE_SUBCOMMANDS:
        reasons.append(f"git {subcommand} {GIT_UNSAFE_SUBCOMMANDS[subcommand]}")
    if subcommand is not None and rest and rest[0] is not None and (subcommand, rest[0]) in GIT_UNSAFE_SUBCOMMAND_WORDS:
        reasons.append(f"git {subcommand} {rest[0]} {GIT_UNSAFE_SUBCOMMAND_WORDS[(subcommand, rest[0])]}")
    short = GIT_UNSAFE_SHORT.get(subcommand or "", "")
    for word in [w for w in words[1:i] if w is not None]:
        if len(word) >= 4 and "--help".startswith(word):
            reasons.append("git --help runs the manual viewer or browser the configuration names")
    for word in rest:
        if word is None or word == "--":
            if word == "--":
                break
            continue
        if word.startswith("--") and len(word) >= 4 and "--help".startswith(word.partition("=")[0]):
            reasons.append(f"git {subcommand} --help runs the manual viewer or browser the configuration names")
        elif word.startswith("--"):
            name = word.partition("=")[0]
            if any(option.startswith(name) and len(name) >= 4 for option in GIT_UNSAFE_LONG) and \
                    not name.startswith("--output-indicator"):
                reasons.append(f"git {subcommand} {word} writes files or runs programs")
        elif word.startswith("-") and short and any(letter in short for letter in word[1:]):
            reasons.append(f"git {subcommand} {word} writes files or runs programs")
    cwds = segment.cwds
    if None in cwds:
        reasons.append("git runs in a directory Peon cannot know (after cd), so its configuration is unknown")
    for cwd in cwds:
        if cwd is None:
            continue
        if workspace_relative(".", cwd) is None:
            reasons.append(f"git runs in {cwd}, outside the workspace")
            continue
        found = facts.git.get(workspace_relative(".", cwd) or ".")
        if found is None:
            reasons.append("the repository's configuration was not checked")
        elif found.problem:
            reasons.append(f"the repository's configuration cannot be checked ({found.problem})")
        else:
            for key in found.program_keys:
                reasons.append(f"the repository configures a program git may run ({key}), and the agent can "
                               "change that configuration")
            if subcommand is not None and subcommand.lower() in found.aliases:
                reasons.append(f"git {subcommand} is an alias defined by the repository")
            if found.hooks and (subcommand is None or subcommand not in GIT_NO_HOOKS):
                reasons.append(f"git {subcommand} may run the repository's hooks ({', '.join(found.hooks)}), which "
                               "the agent can change")
    return list(dict.fromkeys(reasons))


def hides_commands(segment_words: Sequence[str | None]) -> str | None:
    """Why this simple command may run any command at all (git configuration given on the command line
    that runs programs, git subcommands that run command strings); None if it does not."""
    seen = invocation(segment_words)
    if seen.program != "git":
        return None
    words = list(segment_words[1:])
    for index, word in enumerate(words):
        if word is None or not word.startswith("-"):
            break
        if word in ("-c", "--config-env") or word.startswith("--config-env="):
            setting = word.partition("=")[2] if "=" in word else (words[index + 1] if index + 1 < len(words) else None)
            if setting is None:
                return f"git {word} sets configuration computed at run time"
            key, _, value = setting.partition("=")
            if key.lower().startswith("alias.") or git_key_runs_program(key.lower(), value):
                return f"git {word} {setting or '?'} sets configuration that runs programs"
        if word.startswith("--exec-path"):
            return "git --exec-path runs git commands from another directory"
    sub = seen.subcommand
    operands = seen.operands
    if sub == "config" and any(w is None or w.lower().startswith("alias.") or git_key_runs_program(w.lower(), "x")
                               for w in operands[:2]):
        return "git config sets configuration that runs programs"
    if sub in ("filter-branch",) or (sub == "submodule" and "foreach" in operands) or \
            (sub == "bisect" and "run" in operands) or (sub == "rebase" and any(
                isinstance(o, tuple) and o[0] == "exec" for o in seen.options)):
        return f"git {sub} runs command strings"
    return None
