"""A simple command read the way its program reads it, for deny and ask rules.

Promise: :func:`invocation_may_match` says whether a simple command could be what a rule's prefix
names, however its options are spelled: clustered short options are split, long options and their
unambiguous abbreviations map to canonical names (:data:`PROGRAM_OPTIONS`), options compare as sets,
the prefix's operands must occur in order, git is compared on its subcommand after its global options,
and a git subcommand git does not ship (an alias, a ``git-NAME`` program), plumbing with the same effect
(:data:`GIT_SAME_EFFECT`) or a word computed at run time matches (fail closed). Owns the option tables.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Options:
    """One program's option spellings: each short letter and long name maps to a canonical name;
    ``with_value`` lists canonical names that take a value (attached or the next word); ``implies``
    adds the options one option stands for (``cp -a`` is ``-dR --preserve=all``)."""

    short: Mapping[str, str] = field(default_factory=dict)
    long: Mapping[str, str] = field(default_factory=dict)
    with_value: frozenset[str] = frozenset()
    implies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    operand_values: frozenset[str] = frozenset()  # options whose value is also an operand (curl --url)
    shorthand: bool = False  # an implying option is only a short way to write what it implies (-D)


def _options(short: str = "", long: str = "", values: str = "", implies: Mapping[str, tuple[str, ...]] | None = None,
             operand_values: str = "", shorthand: bool = False) -> Options:
    """Compact tables: ``short`` is "r=recursive R=recursive"; ``long`` is "recursive force"
    (canonical itself) or "dir=directory"; ``values`` are canonical names that take a value."""
    shorts = dict(item.split("=", 1) for item in short.split())
    longs = {}
    for item in long.split():
        name, _, canonical = item.rpartition("=") if item.count("=") == 2 else item.partition("=")
        longs[name] = canonical or name
    return Options(shorts, longs, frozenset(values.split()), dict(implies or {}), frozenset(operand_values.split()),
                   shorthand)


# The programs deny rules usually name. Any other program's options are compared as written, with
# clustered short flags split (-rf = -fr = -r -f).
PROGRAM_OPTIONS: dict[str, Options] = {
    "rm": _options("r=recursive R=recursive f=force i=interactive I=interactive-once d=dir v=verbose",
                   "recursive force interactive dir verbose one-file-system no-preserve-root preserve-root "
                   "interactive=never=force"),
    "cp": _options("r=recursive R=recursive a=archive f=force i=interactive n=no-clobber t=target-directory "
                   "S=suffix u=update v=verbose l=link s=symbolic-link T=no-target-directory",
                   "recursive archive force interactive no-clobber target-directory suffix update verbose link "
                   "symbolic-link no-target-directory", "target-directory suffix",
                   implies={"archive": ("recursive",)}),
    "mv": _options("f=force i=interactive n=no-clobber t=target-directory S=suffix u=update v=verbose "
                   "T=no-target-directory", "force interactive no-clobber target-directory suffix update verbose "
                   "no-target-directory", "target-directory suffix"),
    "chmod": _options("R=recursive v=verbose c=changes f=silent", "recursive verbose changes silent quiet=silent "
                      "reference", "reference"),
    "chown": _options("R=recursive v=verbose c=changes f=silent h=no-dereference", "recursive verbose changes "
                      "silent quiet=silent reference from no-dereference", "reference from"),
    "shred": _options("f=force n=iterations s=size u=remove v=verbose x=exact z=zero",
                      "force iterations size remove verbose exact zero random-source", "iterations size random-source"),
    "curl": _options(
        "X=request d=data H=header o=output O=remote-name u=user A=user-agent T=upload-file F=form b=cookie "
        "c=cookie-jar m=max-time x=proxy e=referer L=location s=silent S=show-error f=fail k=insecure v=verbose "
        "I=head G=get i=include K=config D=dump-header E=cert r=range w=write-out C=continue-at y=speed-time "
        "Y=speed-limit z=time-cond t=telnet-option P=ftp-port Q=quote U=proxy-user",
        "request data data-raw data-binary data-urlencode data-ascii json header output remote-name user "
        "user-agent upload-file form form-string cookie cookie-jar max-time proxy referer location silent "
        "show-error fail insecure verbose head get include config dump-header cert range write-out continue-at "
        "speed-time speed-limit time-cond telnet-option ftp-port quote proxy-user url connect-to resolve "
        "output-dir unix-socket abstract-unix-socket",
        "request data data-raw data-binary data-urlencode data-ascii json header output user user-agent "
        "upload-file form form-string cookie cookie-jar max-time proxy referer config dump-header cert range "
        "write-out continue-at speed-time speed-limit time-cond telnet-option ftp-port quote proxy-user url "
        "connect-to resolve output-dir unix-socket abstract-unix-socket", operand_values="url"),
    "wget": _options(
        "O=output-document o=output-file a=append-output P=directory-prefix U=user-agent q=quiet c=continue "
        "r=recursive N=timestamping i=input-file e=execute t=tries T=timeout w=wait Q=quota l=level "
        "A=accept R=reject D=domains I=include-directories X=exclude-directories B=base",
        "output-document output-file append-output directory-prefix user-agent quiet continue recursive "
        "timestamping input-file execute tries timeout wait quota level accept reject domains "
        "include-directories exclude-directories base post-data post-file body-data method header user "
        "password", "output-document output-file append-output directory-prefix user-agent input-file execute "
        "tries timeout wait quota level accept reject domains include-directories exclude-directories base "
        "post-data post-file body-data method header user password"),
}
# git subcommands: their own options (git accepts unambiguous abbreviations of long options).
GIT_SUBCOMMAND_OPTIONS: dict[str, Options] = {
    "push": _options("f=force u=set-upstream d=delete n=dry-run o=push-option q=quiet v=verbose",
                     "force force-with-lease force-if-includes set-upstream delete dry-run push-option repo "
                     "receive-pack exec=receive-pack quiet verbose all branches mirror tags follow-tags atomic "
                     "prune no-verify verify signed porcelain progress thin no-thin recurse-submodules",
                     "push-option repo receive-pack"),
    "reset": _options("q=quiet N=intent-to-add", "hard soft mixed merge keep quiet recurse-submodules "
                      "pathspec-from-file", "pathspec-from-file"),
    "clean": _options("f=force d=directories x=ignored-too X=only-ignored n=dry-run e=exclude i=interactive "
                      "q=quiet", "force dry-run exclude interactive quiet", "exclude"),
    "checkout": _options("f=force b=new-branch B=force-new-branch q=quiet m=merge p=patch",
                         "force quiet merge patch orphan detach track", "new-branch force-new-branch orphan"),
    "branch": _options("d=delete D=force-delete f=force m=move M=force-move c=copy C=force-copy",
                       "delete force move copy", implies={"force-delete": ("delete", "force"),
                                                          "force-move": ("move", "force"),
                                                          "force-copy": ("copy", "force")}, shorthand=True),
    "commit": _options("a=all m=message F=file n=no-verify C=reuse-message c=reedit-message q=quiet v=verbose "
                       "s=signoff e=edit", "all message file no-verify amend reuse-message reedit-message quiet "
                       "verbose signoff edit no-edit", "message file reuse-message reedit-message"),
    "tag": _options("d=delete f=force a=annotate s=sign m=message F=file", "delete force annotate sign message file",
                    "message file"),
    "rebase": _options("i=interactive x=exec f=force-rebase", "interactive exec force-rebase onto root",
                       "exec onto"),
    "stash": _options(),
}
# Global options git reads before the subcommand, and which take a value.
GIT_GLOBAL_WITH_VALUE = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix",
                                   "--config-env", "--attr-source", "--list-cmds"})
# git's own commands (built in, or shipped in its exec path). Any other subcommand is an alias the
# repository or the environment may define, or a git-NAME program: it may do what any git command does.
_GIT_COMMAND_NAMES = """
add am annotate apply archive bisect blame branch bugreport bundle cat-file check-attr check-ignore check-mailmap
check-ref-format checkout checkout-index cherry cherry-pick clean clone column commit commit-graph commit-tree
config count-objects credential credential-cache credential-store daemon describe diagnose diff diff-files
diff-index diff-tree difftool fast-export fast-import fetch fetch-pack filter-branch fmt-merge-msg for-each-ref
for-each-repo format-patch fsck fsck-objects gc get-tar-commit-id grep hash-object help hook http-backend http-fetch
http-push imap-send index-pack init init-db instaweb interpret-trailers log ls-files ls-remote ls-tree mailinfo
mailsplit maintenance merge merge-base merge-file merge-index merge-octopus merge-one-file merge-ours merge-recursive
merge-recursive-ours merge-recursive-theirs merge-resolve merge-subtree merge-tree mergetool mktag mktree
multi-pack-index mv name-rev notes pack-objects pack-redundant pack-refs patch-id pickaxe prune prune-packed pull
push quiltimport range-diff read-tree rebase receive-pack reflog remote remote-ext remote-fd remote-ftp remote-ftps
remote-http remote-https repack replace request-pull rerere reset restore rev-list rev-parse revert rm send-pack
shell shortlog show show-branch show-index show-ref sparse-checkout stage stash status stripspace submodule subtree
switch symbolic-ref tag unpack-file unpack-objects update-index update-ref update-server-info upload-archive
upload-pack var verify-commit verify-pack verify-tag version whatchanged worktree write-tree
"""
GIT_COMMANDS = frozenset(_GIT_COMMAND_NAMES.split())
# Plumbing (and porcelain) that does what a subcommand a rule names does: a rule naming the key matches
# these whatever their options.
GIT_SAME_EFFECT: dict[str, frozenset[str]] = {
    "push": frozenset({"send-pack", "http-push", "subtree", "remote-ext", "remote-fd", "remote-http",
                       "remote-https", "remote-ftp", "remote-ftps", "svn", "p4"}),
    "fetch": frozenset({"fetch-pack", "http-fetch", "remote-ext", "remote-fd", "remote-http", "remote-https",
                        "remote-ftp", "remote-ftps", "pull"}),
    "commit": frozenset({"commit-tree", "update-ref"}),
    "reset": frozenset({"read-tree", "update-ref", "checkout-index", "restore"}),
    "checkout": frozenset({"read-tree", "checkout-index", "switch", "restore"}),
    "branch": frozenset({"update-ref", "symbolic-ref"}),
    "tag": frozenset({"mktag", "update-ref"}),
    "clean": frozenset(),
    "rm": frozenset({"update-index"}),
    "merge": frozenset({"merge-recursive", "merge-ort", "merge-resolve", "merge-octopus", "merge-subtree",
                        "merge-tree", "read-tree", "update-ref", "pull"}),
}


@dataclass(frozen=True)
class Invocation:
    """A simple command as deny and ask rules compare it."""

    program: str | None  # base name; None when computed at run time
    subcommand: str | None = None  # git's, after its global options; "": none; None: computed at run time
    options: frozenset[str | tuple[str, str]] = frozenset()  # canonical names, (name, value) with values
    operands: tuple[str | None, ...] = ()
    unknown_options: bool = False  # a word computed at run time may be any option


def _canonical_long(name: str, table: Options | None) -> list[str]:
    """``--rec`` is ``--recursive`` when that is the only long option it starts; ambiguous: all of them."""
    if table is None:
        return [name]
    if name in table.long:
        return [table.long[name]]
    found = sorted({canonical for long, canonical in table.long.items() if long.startswith(name) and "=" not in long})
    return found or [name]


def invocation(words: Sequence[str | None]) -> Invocation:
    """``words`` (program first) read the way the program reads them: clustered short options split,
    long options and abbreviations mapped to canonical names, options anywhere before ``--``."""
    return _invocation(tuple(words))


@functools.lru_cache(maxsize=2048)  # each simple command is compared with every deny and ask rule
def _invocation(words: tuple[str | None, ...]) -> Invocation:
    first = words[0] if words else None
    program = None if first is None else (posixpath.basename(first) or first)
    rest = list(words[1:])
    subcommand = None
    if program is not None and program.startswith("git-") and program[4:] in GIT_COMMANDS:
        program, rest = "git", [program[4:], *rest]  # git's exec path holds git-push, git-send-pack...
    table = PROGRAM_OPTIONS.get(program or "")
    if program == "git":
        i = 0
        while i < len(rest):
            word = rest[i]
            if word is None or not word.startswith("-"):
                break
            i += 2 if word in GIT_GLOBAL_WITH_VALUE else 1
        subcommand = rest[i] if i < len(rest) else ""  # "": none (git --version); None: computed
        if subcommand is None:
            return Invocation(program, None, frozenset(), tuple(rest[i + 1:]), True)
        rest = rest[i + 1:]
        table = GIT_SUBCOMMAND_OPTIONS.get(subcommand or "")
    options: set[str | tuple[str, str]] = set()
    operands: list[str | None] = []
    unknown = False
    i = 0
    while i < len(rest):
        word = rest[i]
        i += 1
        if word is None:
            unknown = True
            operands.append(None)
            continue
        if word == "--":
            operands.extend(rest[i:])
            break
        if word.startswith("--"):
            name, equals, value = word[2:].partition("=")
            if table is not None and f"{name}={value}" in table.long:  # rm --interactive=never is --force
                options.add(table.long[f"{name}={value}"])
                continue
            for canonical in _canonical_long(name, table):
                if table is not None and canonical in table.with_value:
                    if not equals:
                        value = _next_value(rest, i)
                        i += 1
                    options.add((canonical, value))
                    if canonical in table.operand_values:
                        operands.append(value)
                else:
                    options.add(canonical)
                options.update(table.implies.get(canonical, ()) if table is not None else ())
            continue
        if word.startswith("-") and len(word) > 1:
            letters = word[1:]
            for index, letter in enumerate(letters):
                canonical = table.short.get(letter, f"-{letter}") if table is not None else f"-{letter}"
                options.update(table.implies.get(canonical, ()) if table is not None else ())
                if table is not None and canonical in table.with_value:
                    value = letters[index + 1:]
                    if not value:
                        value = _next_value(rest, i)
                        i += 1
                    options.add((canonical, value))
                    break
                options.add(canonical)
            continue
        operands.append(word)
    if table is not None and table.shorthand:
        options -= set(table.implies)
    return Invocation(program, subcommand, frozenset(options), tuple(operands), unknown)


def _next_value(words: Sequence[str | None], index: int) -> str:
    word = words[index] if index < len(words) else None
    return "" if word is None else word


def _operands_in_order(wanted: Sequence[str | None], found: Sequence[str | None]) -> bool:
    position = 0
    for word in found:
        if position < len(wanted) and (word is None or word == wanted[position]):
            position += 1
    return position == len(wanted)


def invocation_may_match(segment_words: Sequence[str | None], prefix_words: Sequence[str]) -> bool:
    """For deny and ask rules: could this simple command be what the prefix names, however its options
    are spelled? Options compare as sets (order and clustering do not matter), the prefix's operands
    must occur in order, git compares its subcommand after the global options, and a subcommand git
    does not ship (an alias, a git-NAME program) or plumbing with the same effect matches every git rule."""
    seen = invocation(segment_words)
    wanted = invocation(list(prefix_words))
    if seen.program is not None and seen.program != wanted.program:
        return False
    if seen.program is None:
        return True
    if wanted.program == "git" and wanted.subcommand:
        sub = seen.subcommand
        if sub == "":
            return False  # git alone, or only global options (--version): no subcommand runs
        if sub is None or sub.lower() not in GIT_COMMANDS:
            return True  # computed at run time, an alias or a git-NAME program: it may be anything
        if sub in GIT_SAME_EFFECT.get(wanted.subcommand, ()):
            return True
        if sub != wanted.subcommand:
            return False
    if not seen.unknown_options and not wanted.options <= seen.options:
        return False
    return _operands_in_order(wanted.operands, seen.operands)
