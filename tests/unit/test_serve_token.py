"""Where ``peon serve`` takes its bearer token from: a file or an environment variable, one way only, and never a
short, empty or spaced one."""

from __future__ import annotations

import pytest

from helpers.serve import TOKEN
from peon.serve.main import StartupError, read_token


def test_token_sources(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    assert read_token(str(token_file), "T", {}) == TOKEN
    assert read_token(None, "T", {"T": TOKEN}) == TOKEN
    assert read_token(None, "T", {}) is None
    for path, environ, expected in [
        (str(token_file), {"T": TOKEN}, "one way only"), (None, {"T": "short"}, "at least 16"),
        (None, {"T": " "}, "set but empty"), (str(tmp_path / "nope"), {}, "cannot read"),
        (None, {"T": "a b" * 10}, "without spaces"),
    ]:
        with pytest.raises(StartupError, match=expected):
            read_token(path, "T", environ)
