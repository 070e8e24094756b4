"""A front end's defaults (``peon mcp`` and ``peon serve``: ``limits.yield_after_seconds``) sit under every
configuration someone wrote: the user's file, the project's file, ``--config`` and ``--allow``."""

from __future__ import annotations

import pytest

from peon.client.config import load_config
from peon.client.config.front_ends import MCP_DEFAULTS, with_front_end_defaults
from peon.core.errors import ConfigError


@pytest.fixture
def places(tmp_path):
    workspace = tmp_path / "ws"
    (workspace / ".peon").mkdir(parents=True)
    (tmp_path / "xdg" / "peon").mkdir(parents=True)
    return workspace, {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}, tmp_path / "xdg" / "peon" / "config.toml"


def resolved(config, workspace, env) -> float:
    return load_config(config, workspace=workspace, env=env).config.limits.yield_after_seconds


def test_the_shipped_default_yields_nothing_and_the_mcp_servers_yield_at_45_seconds(places):
    workspace, env, _ = places
    assert resolved(None, workspace, env) == 0
    assert MCP_DEFAULTS == {"limits.yield_after_seconds": 45.0}
    config = with_front_end_defaults(None, MCP_DEFAULTS, workspace=workspace, env=env)
    assert resolved(config, workspace, env) == 45.0
    allowed = with_front_end_defaults({"approval": {"process": "allow"}}, MCP_DEFAULTS, workspace=workspace, env=env)
    assert allowed == {"approval": {"process": "allow"}, "limits": {"yield_after_seconds": 45.0}}


def test_a_value_someone_wrote_wins_in_any_layer(places, tmp_path):
    workspace, env, user_file = places
    assert with_front_end_defaults({"limits": {"yield_after_seconds": 0.0}}, MCP_DEFAULTS, workspace=workspace,
                                   env=env) == {"limits": {"yield_after_seconds": 0.0}}
    user_file.write_text("[limits]\nyield_after_seconds = 10.0\n")
    assert with_front_end_defaults(None, MCP_DEFAULTS, workspace=workspace, env=env) is None
    assert resolved(None, workspace, env) == 10.0
    # A project may only lower it, as every limit: below the user's 10, or to 0 (answered at the end).
    (workspace / ".peon" / "config.toml").write_text("[limits]\nyield_after_seconds = 5.0\n")
    assert with_front_end_defaults(None, MCP_DEFAULTS, workspace=workspace, env=env) is None
    assert resolved(None, workspace, env) == 5.0
    user_file.unlink()
    (workspace / ".peon" / "config.toml").write_text("[limits]\nyield_after_seconds = 0.0\n")
    assert with_front_end_defaults(None, MCP_DEFAULTS, workspace=workspace, env=env) is None
    assert resolved(None, workspace, env) == 0


def test_a_config_file_is_kept_whole_and_a_bad_one_is_reported_by_its_name(places, tmp_path):
    workspace, env, _ = places
    chosen = tmp_path / "chosen.toml"
    chosen.write_text("[limits]\nyield_after_seconds = 2.0\n")
    assert with_front_end_defaults(str(chosen), MCP_DEFAULTS, workspace=workspace, env=env) == str(chosen)
    other = tmp_path / "other.toml"
    other.write_text("[limits]\nmax_output_bytes = 4096\n")
    config = with_front_end_defaults(str(other), MCP_DEFAULTS, workspace=workspace, env=env)
    assert config == {"limits": {"max_output_bytes": 4096, "yield_after_seconds": 45.0}}
    bad = tmp_path / "bad.toml"
    bad.write_text("[limits]\nyield_after_seconds = -1.0\n")
    with pytest.raises(ConfigError, match=r"bad\.toml"):
        with_front_end_defaults(str(bad), MCP_DEFAULTS, workspace=workspace, env=env)
