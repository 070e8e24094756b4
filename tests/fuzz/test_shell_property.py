"""The shell analysis against what bash really runs: random and adversarial lines go through both
:func:`peon.approval.shell.analyze` and a real bash under ``strace -f -e trace=execve``; every program bash
executes must appear as a segment (or a wrapper of one), or the analysis must say the line is opaque."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peon.approval.shell import analyze

STRACE = shutil.which("strace")
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(STRACE is None or BASH is None,
                                reason="strace (installed by .ci/run) and bash are needed to watch what bash runs")

_EXECVE = re.compile(r'^\d+\s+execve\("([^"]*)",.*\)\s+=\s+0\s*$')


def executed(line: str, directory: Path) -> list[str]:
    """The programs (base names) a real bash executes for ``line``, its own start left out."""
    log = directory / "strace.log"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(directory), "LC_ALL": "C"}
    assert STRACE is not None and BASH is not None
    process = subprocess.Popen([STRACE, "-f", "-qq", "-e", "trace=execve", "-o", str(log), BASH, "-c", line],
                               cwd=directory, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:  # strace and what it traces share the group this test started
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    programs = []
    for entry in log.read_text(errors="replace").splitlines():
        match = _EXECVE.match(entry)
        if match:
            programs.append(os.path.basename(match.group(1)))
    return programs[1:]  # the first is bash itself, started by strace


def check(line: str, directory: Path) -> None:
    analysis = analyze(line)
    if analysis.opaque:
        return
    seen = {s.program for s in analysis.segments} | {w for s in analysis.segments for w in s.wrappers}
    missing = [program for program in executed(line, directory) if program not in seen]
    assert not missing, (line, missing, [s.words for s in analysis.segments])


# Ways to spell a command name, and to hide a command in what bash evaluates.
SPELLINGS = ["touch", "t'o'uch", '"touch"', "\\touch", "$'\\x74ouch'", "$'t'ouch", "t\\\nouch", "/usr/bin/touch",
             "command touch", "env touch", "nice touch", "timeout 5 touch", "env -i PATH=/usr/bin touch",
             "command -p touch", "exec touch", "builtin command touch", "xargs touch <<< x", "T=touch; $T"]
HIDERS = [
    "printf -v 'a[$({c})]' 1", "read 'a[$({c})]' <<< 1", "declare 'a[$({c})]=1'", "unset 'a[$({c})]'",
    "test -v 'a[$({c})]'", "[ -v 'a[$({c})]' ]", "[[ -v 'a[$({c})]' ]]", "declare -i n; n='a[$({c})]'",
    "declare -n r='a[$({c})]'; : $r", "x='a[$({c})]'; : ${{!x}}", "bash -c -- '{c}'", "bash -c -e '{c}'",
    "bash -c +x '{c}'", "bash -o errexit -c '{c}'", "bash /dev/stdin <<< '{c}'", "bash /dev/fd/0 <<< '{c}'",
    "PS4='$({c})' bash -xc :", "env 'BASH_FUNC_f%%=() {{ {c}; }}' bash -c f", "BASH_ENV=<(echo '{c}') bash -c :",
    "jobs -x {c}", "coproc {{ {c}; }}; wait", "eval '{c}'", "({c})", "{{ {c}; }}", "echo $({c})", "a=$({c})",
    "find . -maxdepth 0 -exec {c} \\;", "true && {c}", "false || {c}", "echo x | {c}", "if true; then {c}; fi",
    "for i in 1; do {c}; done", "f() {{ {c}; }}; f", "GIT_PAGER='{c}' true", "export PAGER='{c}'",
    "setarch x86_64 {c}", "nohup {c} >/dev/null", "stdbuf -oL {c}", "time -p {c}", "cat <<E\n$({c})\nE",
]


@pytest.mark.parametrize("hider", HIDERS)
def test_commands_hidden_in_what_bash_evaluates_are_seen_or_opaque(hider, tmp_path):
    check(hider.format(c="touch made"), tmp_path)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_spelling_of_a_command_name_is_seen_or_opaque(spelling, tmp_path):
    check(f"{spelling} made", tmp_path)


PIECES = st.sampled_from(["touch a", "true", "echo x", "cat /dev/null", "printf %s y", "env true", "nice -n 1 true",
                          *[s + " b" for s in SPELLINGS]])
JOINERS = st.sampled_from(["; ", " && ", " || ", " | ", "\n", " & "])


@st.composite
def lines(draw: st.DrawFn) -> str:
    line = draw(PIECES)
    for _ in range(draw(st.integers(0, 3))):
        joiner = draw(JOINERS)
        piece = draw(PIECES)
        wrap = draw(st.sampled_from(["{}", "$({})", "({})", "{{ {}; }}", "bash -c '{}'", "echo \"$({})\"", "{}"]))
        if "'" in piece and "bash -c" in wrap:
            wrap = "{}"
        line = line + joiner + wrap.format(piece)
    if draw(st.booleans()):
        line = draw(st.sampled_from(HIDERS)).format(c=line.replace("'", "").replace("\n", "; ").rstrip("& ;"))
    return line


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines())
def test_random_lines_run_nothing_the_analysis_does_not_show(tmp_path, line):
    check(line, tmp_path)
