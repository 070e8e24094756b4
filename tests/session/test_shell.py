"""The shell analysis against real bash: the words the analysis reads as literal are exactly the words bash
passes to a command. The analysis alone, as a pure function, is tests/unit/test_shell_analysis.py."""

from __future__ import annotations

import subprocess

from hypothesis import given, settings
from hypothesis import strategies as st

from peon.approval.shell import analyze


# -- literal words read as bash reads them -----------------------------------------------------------

WORD_ALPHABET = st.lists(st.sampled_from([*"ab-_./=,+@%:'\"\\ ", "é", "1", "$'\\x41'", "\\n", "$'\\t'"]),
                         max_size=12).map("".join)


@settings(max_examples=150, deadline=None)
@given(WORD_ALPHABET)
def test_literal_words_are_the_words_bash_sees(text):
    analysis = analyze(f"set -- {text}")
    if analysis.opaque or len(analysis.segments) != 1:
        return
    words = list(analysis.segments[0].words[2:])  # after "set --"
    if not words or any(w is None for w in words):
        return
    script = f'set -- {text}\nprintf "%s\\0" "$@"'
    out = subprocess.run(["/bin/bash", "--norc", "--noprofile", "-c", script], capture_output=True, timeout=10)
    if out.returncode != 0:
        return
    assert out.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1] == words
