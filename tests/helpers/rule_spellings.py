"""A corpus of ways to write three commands deny rules usually name — ``rm -rf``, ``curl`` and
``git push`` — that bash really runs: option spellings, quoting, wrappers, nested shells, code bash
evaluates from literal words, aliases and plumbing. ``{url}`` is a local HTTP server's address.

``INTERPRETERS`` are spellings through a language interpreter, the documented class deny rules cannot
see into (docs/approval.md): they are in the corpus so the count says how many still run."""

from __future__ import annotations

# Ways to hide any command line ``{c}`` (written with double quotes only) in what bash evaluates.
HIDING = [
    "{c}", "true && {c}", "false || {c}", "({c})", "{{ {c}; }}", "echo $({c})", "echo `{c}`", "a=$({c})",
    "f() {{ {c}; }}; f", "if true; then {c}; fi", "for i in 1; do {c}; done", "cd . && {c}", "{c} >/dev/null",
    "bash -c '{c}'", "sh -c '{c}'", "bash -c -- '{c}'", "bash -c -e '{c}'", "bash -o errexit -c '{c}'",
    "bash /dev/stdin <<< '{c}'", "echo '{c}' | bash", "eval '{c}'", "printf -v 'a[$({c})]' 1",
    "declare -i n; n='a[$({c})]'", "x='a[$({c})]'; : ${{!x}}", "read 'a[$({c})]' <<< 1",
    "env 'BASH_FUNC_f%%=() {{ {c}; }}' bash -c f", "coproc {{ {c}; }}; wait", "cat <<E\n$({c})\nE",
    "GIT_PAGER='{c}' git --version", "export PAGER='{c}'; true",
]
# Ways to write a program name ``{p}`` that bash still runs as that program.
NAMING = ["{p}", "/usr/bin/{p}", "\\{p}", "'{p}'", "\"{p}\"", "command {p}", "env {p}", "env -i PATH=/usr/bin:/bin {p}",
          "nice {p}", "nice -n 5 {p}", "timeout 5 {p}", "nohup {p}", "stdbuf -oL {p}", "setsid -w {p}", "time -p {p}",
          "exec {p}", "setarch x86_64 {p}", "jobs -x {p}", "X={p}; $X", "$(echo {p})"]

RM = [
    *[n.format(p="rm") + " -rf victim" for n in NAMING],
    *[h.format(c="rm -rf victim") for h in HIDING],
    "rm -fr victim", "rm -r -f victim", "rm -R -f victim", "rm --recursive --force victim", "rm --rec --for victim",
    "rm victim -rf", "rm -rfv victim", "rm -f -v -R victim", "rm --interactive=never -r victim", "rm -rf -- victim",
    "r''m -rf victim", "$'\\x72m' -rf victim", "r\\\nm -rf victim", "xargs rm -rf <<< victim",
    "echo victim | xargs rm -rf", "find . -maxdepth 1 -name victim -exec rm -rf {} +",
    "find . -maxdepth 1 -name victim -exec rm -rf {} \\;", "rm -rf ./victim/../victim",
    "{rm,-rf,victim}", "rm${IFS}-rf${IFS}victim", "command -- rm -rf victim", "xargs -I{} rm -rf {} <<< victim",
    "nice --adjustment=5 rm -rf victim", "timeout --signal=KILL 5 rm -rf victim", "sh -c 'rm -rf \"$1\"' _ victim",
    "bash <<< 'rm -rf victim'", "bash -s <<< 'rm -rf victim'", "bash -cx 'rm -rf victim'",
    "find . -maxdepth 1 -name victim -exec sh -c 'rm -rf \"$0\"' {} \\;", "command eval 'rm -rf victim'",
    "builtin exec rm -rf victim", "select x in a; do rm -rf victim; break; done <<< 1",
    "[[ $(rm -rf victim) ]]", "echo ${x:-$(rm -rf victim)}", "cat <<< $(rm -rf victim)", "trap 'rm -rf victim' EXIT",
    "source <(echo rm -rf victim)", "printf 'rm -rf victim' | sh", "a=(rm -rf victim); \"${a[@]}\"",
]
CURL = [
    *[n.format(p="curl") + " -s {url}" for n in NAMING],
    *[h.format(c="curl -s {url}") for h in HIDING],
    "curl {url}", "curl -sS {url}", "curl --silent {url}", "curl -o /dev/null {url}", "curl --url {url}",
    "curl -XGET {url}", "c''url -s {url}", "$'\\x63url' -s {url}", "c\\\nurl -s {url}", "xargs curl -s <<< {url}",
    "echo {url} | xargs curl -s", "find . -maxdepth 0 -exec curl -s {url} \\;",
]
GIT_PUSH = [
    *[n.format(p="git") + " push -q origin main" for n in NAMING],
    *[h.format(c="git push -q origin main") for h in HIDING],
    "git push -q -u origin main", "git push -q --set-upstream origin main", "git -C . push -q origin main",
    "git -c user.name=x push -q origin main", "git --git-dir=.git push -q origin main",
    "git --no-pager push -q origin main",
    "git -P push -q origin main", "git --work-tree=. push -q origin main", "git 'push' -q origin main",
    "git pu''sh -q origin main", "git $'push' -q origin main", "P=push; git $P -q origin main",
    "git push -q origin HEAD:main", "git push -q --all origin", "git push -qf origin main",
    "git send-pack ../remote.git main", "git -c alias.p=push p -q origin main", "git up -q origin main",
    "git config alias.q push && git q -q origin main", "xargs git push -q <<< 'origin main'",
    "find . -maxdepth 0 -exec git push -q origin main \\;", "g\\\nit push -q origin main",
    "/usr/lib/git-core/git-push -q origin main", "PATH=/usr/lib/git-core:$PATH git-push -q origin main",
    "$(git --exec-path)/git-push -q origin main", "/usr/lib/git-core/git-send-pack ../remote.git main",
]
INTERPRETERS = {
    "rm -rf": ["python3 -c \"import shutil; shutil.rmtree('victim')\"",
               "perl -e 'use File::Path; rmtree(\"victim\")'"],
    "curl": ["python3 -c \"import urllib.request as u; u.urlopen('{url}').read()\""],
    "git push": ["python3 -c \"import subprocess; subprocess.run(['git', 'push', '-q', 'origin', 'main'])\""],
}
