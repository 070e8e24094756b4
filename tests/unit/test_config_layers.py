"""Configuration layers, loaded without a session: precedence, where the user's file is, errors that name
file and key, files that are not regular, nesting bounds, and a project file that can only tighten."""

from __future__ import annotations

import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from peon.client.config import load_config, user_config_path
from peon.core.errors import ConfigError


@pytest.fixture
def layout(tmp_path):
    """A user config home and a workspace; write files with .user(...) / .project(...)."""

    class Layout:
        home = tmp_path / "xdg"
        workspace = tmp_path / "ws"
        env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
        user_file = tmp_path / "xdg" / "peon" / "config.toml"
        project_file = tmp_path / "ws" / ".peon" / "config.toml"

        def user(self, text: str):
            self.user_file.parent.mkdir(parents=True, exist_ok=True)
            self.user_file.write_text(text)

        def project(self, text: str):
            self.project_file.parent.mkdir(parents=True, exist_ok=True)
            self.project_file.write_text(text)

        def load(self, overrides=None):
            return load_config(overrides, workspace=self.workspace, env=self.env)

    Layout.workspace.mkdir()
    return Layout()


# -- precedence ------------------------------------------------------------------------------------


def test_each_layer_overrides_the_one_below(layout):
    assert layout.load().config.limits.max_timeout_seconds == 600
    layout.user("[limits]\nmax_timeout_seconds = 300\n")
    assert layout.load().config.limits.max_timeout_seconds == 300
    layout.project("[limits]\nmax_timeout_seconds = 200\n")
    assert layout.load().config.limits.max_timeout_seconds == 200
    loaded = layout.load({"limits": {"max_timeout_seconds": 100}})
    assert loaded.config.limits.max_timeout_seconds == 100
    assert [layer.kind for layer in loaded.layers] == ["defaults", "user", "project", "overrides"]
    assert loaded.source_of("limits.max_timeout_seconds") == "overrides"
    assert loaded.source_of("limits.max_output_bytes") == "defaults"


def test_layers_record_the_keys_they_set(layout):
    layout.user('[limits]\nmax_output_bytes = 4096\n[approval]\nprocess = "allow"\n'
                '[[approval.rules]]\ntool = "bash"\ncommand_prefix = "ls"\ndecision = "allow"\n')
    layout.project('[approval]\nprocess = "ask"\n')
    loaded = layout.load({"runtime": {"containment": "process-tree"}})
    keys = {layer.kind: layer.keys for layer in loaded.layers}
    assert set(keys["user"]) == {"limits.max_output_bytes", "approval.process", "approval.rules[0]"}
    assert keys["project"] == ("approval.process",)
    assert keys["overrides"] == ("runtime.containment",)
    assert "agents.claude.executable" in keys["defaults"]
    assert loaded.describe_layers()[1] == {"source": str(layout.user_file), "kind": "user", "keys": list(keys["user"])}


def test_unrelated_keys_of_lower_layers_survive(layout):
    layout.user("[limits]\nmax_output_bytes = 4096\n")
    layout.project("[skills]\nmax_skills = 3\n")
    config = layout.load({"limits": {"read_max_bytes": 10}}).config
    assert (config.limits.max_output_bytes, config.skills.max_skills, config.limits.read_max_bytes) == (4096, 3, 10)
    assert config.limits.max_timeout_seconds == 600


def test_rules_accumulate_across_layers(layout):
    layout.user('[[approval.rules]]\ntool = "bash"\ncommand_prefix = "ls"\ndecision = "allow"\n')
    layout.project('[[approval.rules]]\ntool = "bash"\ncommand_prefix = "ls -R"\ndecision = "deny"\n')
    loaded = layout.load({"approval": {"rules": [{"tool": "bash", "command_prefix": "pwd", "decision": "allow"}]}})
    rules = loaded.config.approval.rules
    assert [(r.command_prefix, r.decision, r.tighten_only) for r in rules] == [
        ("ls", "allow", False), ("ls -R", "deny", True), ("pwd", "allow", False)]
    assert loaded.rule_sources == (f"approval.rules[0] in {layout.user_file}",
                                   f"approval.rules[0] in {layout.project_file}", "approval.rules[0] in overrides")


def test_overrides_may_be_a_file(layout, tmp_path):
    path = tmp_path / "cli.toml"
    path.write_text("[limits]\nmax_output_bytes = 2048\n")
    loaded = layout.load(str(path))
    assert loaded.config.limits.max_output_bytes == 2048
    assert loaded.layers[-1].source == str(path) and loaded.layers[-1].kind == "overrides"


# -- where the user's file is ----------------------------------------------------------------------


def test_user_file_location():
    assert user_config_path({"PEON_CONFIG": "/etc/p.toml", "XDG_CONFIG_HOME": "/x"}) == (Path("/etc/p.toml"), True)
    assert user_config_path({"PEON_CONFIG": "~/p.toml", "HOME": "/h"}) == (Path("/h/p.toml"), True)
    assert str(user_config_path({"XDG_CONFIG_HOME": "/x", "HOME": "/h"})[0]) == "/x/peon/config.toml"
    assert str(user_config_path({"XDG_CONFIG_HOME": "relative", "HOME": "/h"})[0]) == "/h/.config/peon/config.toml"
    assert user_config_path({}) == (None, False)
    with pytest.raises(ConfigError, match="PEON_CONFIG must be an absolute path"):
        user_config_path({"PEON_CONFIG": "rel.toml"})


def test_peon_config_must_exist_but_the_default_location_may_not(tmp_path):
    with pytest.raises(ConfigError, match=f"configuration file {tmp_path / 'nope.toml'} does not exist"):
        load_config(env={"PEON_CONFIG": str(tmp_path / "nope.toml")})
    loaded = load_config(env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert [layer.kind for layer in loaded.layers] == ["defaults"]


def test_peon_config_wins_over_xdg(tmp_path):
    (tmp_path / "peon").mkdir()
    (tmp_path / "peon" / "config.toml").write_text("[limits]\nmax_output_bytes = 2048\n")
    named = tmp_path / "named.toml"
    named.write_text("[limits]\nmax_output_bytes = 3072\n")
    assert load_config(env={"XDG_CONFIG_HOME": str(tmp_path)}).config.limits.max_output_bytes == 2048
    both = {"XDG_CONFIG_HOME": str(tmp_path), "PEON_CONFIG": str(named)}
    assert load_config(env=both).config.limits.max_output_bytes == 3072


# -- errors name file, key and expected type -------------------------------------------------------


@pytest.mark.parametrize("text, needle", [
    ("[limits]\nmax_output_bytes = \"4096\"\n",
     "key 'limits.max_output_bytes' must be an integer, got string \"4096\""),
    ("[limits]\nmax_output_bytes = 4096.0\n", "key 'limits.max_output_bytes' must be an integer, got float 4096.0"),
    ("[limits]\nmax_timeout_seconds = true\n", "key 'limits.max_timeout_seconds' must be a number, got boolean true"),
    ("[limits]\nmax_outptu_bytes = 1\n", "unknown key 'limits.max_outptu_bytes' (did you mean 'max_output_bytes'?)"),
    ("[limitz]\nx = 1\n", "unknown key 'limitz'"),
    ("[approval]\nprocess = \"maybe\"\n",
     "key 'approval.process' must be one of 'allow', 'ask' or 'deny', got \"maybe\""),
    ("[tools]\nentry_points = \"no\"\n", "key 'tools.entry_points' must be true or false, got string \"no\""),
    ("[runtime]\ncontainment = 1\n", "key 'runtime.containment' must be one of"),
    ("[[approval.rules]]\ntool = \"bash\"\ndecision = \"allow\"\n[[approval.rules]]\ntool = 3\ndecision = \"ask\"\n",
     "key 'approval.rules[1].tool' must be a string, got integer 3"),
    ("[[approval.rules]]\ntool = \"bash\"\n", "missing key 'approval.rules[0].decision'"),
    ("[[approval.rules]]\ntool = \"bash\"\ndecision = \"deny\"\ncommand_prefix = \"a && b\"\n",
     "key 'approval.rules[0].command_prefix': must be a simple command"),
    ("[[approval.rules]]\ndecision = \"deny\"\npath_prefix = \"../x\"\n",
     "key 'approval.rules[0].path_prefix': must be a workspace-relative path"),
    ("[approval]\nrules = 5\n", "key 'approval.rules' must be an array of tables, got integer 5"),
    ("[limits]\nmax_output_bytes = 10\n",
     "key 'limits.max_output_bytes': input should be greater than or equal to 1024"),
    ("[audit]\nbackups = -1\n", "key 'audit.backups'"),
    ("limits = 3\n", "key 'limits' must be a table, got integer 3"),
])
@pytest.mark.parametrize("layer", ["user", "project"])
def test_bad_keys_and_types_name_the_file_and_key(layout, layer, text, needle):
    getattr(layout, layer)(text)
    with pytest.raises(ConfigError) as info:
        layout.load()
    path = layout.user_file if layer == "user" else layout.project_file
    assert f"invalid configuration in {path}: " in info.value.message
    assert needle in info.value.message
    assert info.value.code.value == "config_invalid"


def test_bad_overrides_are_named_as_overrides(layout):
    with pytest.raises(ConfigError, match=r"invalid configuration in overrides: unknown key 'approval\.proces'"):
        layout.load({"approval": {"proces": "allow"}})


@pytest.mark.parametrize("content, needle", [
    (b"[limits\n", "is not valid TOML"),
    (b"[limits]\nmax_output_bytes = \xff\n", "is not UTF-8"),
    (b"#" * ((1 << 20) + 1), "the limit is 1048576"),
])
def test_unreadable_files_are_named(layout, content, needle):
    layout.user_file.parent.mkdir(parents=True)
    layout.user_file.write_bytes(content)
    with pytest.raises(ConfigError, match=needle) as info:
        layout.load()
    assert str(layout.user_file) in info.value.message


def _load_in_thread(load):
    """Run ``load`` with a hang guard; returns the ConfigError it raised."""
    outcome = {}

    def run():
        try:
            load()
        except ConfigError as exc:
            outcome["error"] = exc
        except BaseException as exc:  # anything else is a defect the test reports
            outcome["other"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "loading hung"
    assert "other" not in outcome, outcome.get("other")
    assert "error" in outcome, "loading did not fail"
    return outcome["error"]


def _plant(path: Path, kind: str, tmp_path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # what /dev/zero is
    elif kind == "link-to-fifo":
        os.mkfifo(tmp_path / "elsewhere.fifo")
        path.symlink_to(tmp_path / "elsewhere.fifo")
    elif kind == "link-to-device":
        path.symlink_to("/dev/zero")
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()


NOT_REGULAR = [("fifo", "is a FIFO"), ("directory", "is a directory"), ("device", "is a character device"),
               ("link-to-fifo", "is a FIFO"), ("link-to-device", "is a character device"), ("socket", "is a socket")]


@pytest.mark.parametrize("kind, why", NOT_REGULAR)
@pytest.mark.parametrize("layer", ["user", "project"])
def test_a_non_regular_file_is_refused_not_read(layout, tmp_path, kind, why, layer):
    if kind == "device" and os.geteuid() != 0:
        pytest.skip("creating a device node needs root")
    path = layout.user_file if layer == "user" else layout.project_file
    _plant(path, kind, tmp_path)
    error = _load_in_thread(layout.load)
    assert error.message == f"configuration file {path} {why}, not a regular file"
    assert error.code.value == "config_invalid" and error.details == {"file": str(path)}


def test_a_symlink_to_a_regular_file_is_followed(layout, tmp_path):
    """Dotfile managers link the user's file into place: that is read as the file it points to."""
    real = tmp_path / "dotfiles" / "peon.toml"
    real.parent.mkdir()
    real.write_text("[limits]\nmax_output_bytes = 2048\n")
    layout.user_file.parent.mkdir(parents=True)
    layout.user_file.symlink_to(real)
    assert layout.load().config.limits.max_output_bytes == 2048


def test_an_overrides_file_that_is_a_fifo_is_refused(layout, tmp_path):
    fifo = tmp_path / "cli.toml"
    os.mkfifo(fifo)
    error = _load_in_thread(lambda: layout.load(str(fifo)))
    assert error.message == f"configuration file {fifo} is a FIFO, not a regular file"


DEEP = 5000
NESTINGS = [
    ("array", "[tools]\nextra = " + "[" * DEEP + "]" * DEEP + "\n", None),
    ("inline-table", "[tools]\nextra = " + "{a=" * DEEP + "1" + "}" * DEEP + "\n", None),
    ("dotted-key", "tools" + ".a" * DEEP + " = 1\n", "tools.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a"),
    ("table-header", "[tools" + ".a" * DEEP + "]\nx = 1\n", "tools.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a"),
    ("just-too-deep", "[tools]\nextra = " + "[" * 16 + "]" * 16 + "\n",
     "tools.extra[0][0][0][0][0][0][0][0][0][0][0][0][0][0]"),
]


@pytest.mark.parametrize("kind, text, key", NESTINGS, ids=[n[0] for n in NESTINGS])
@pytest.mark.parametrize("layer", ["user", "project"])
def test_deep_nesting_is_config_invalid_not_a_recursion_error(layout, layer, kind, text, key):
    getattr(layout, layer)(text)
    path = layout.user_file if layer == "user" else layout.project_file
    error = _load_in_thread(layout.load)
    assert error.code.value == "config_invalid"
    assert error.message.startswith(f"invalid configuration in {path}: tables and arrays nest deeper than 16 levels")
    assert error.details == {"source": str(path), "rule": "max_depth", "limit": 16}
    if key is not None:
        assert f"(at {key!r})" in error.message


def test_nesting_within_the_limit_reaches_validation(layout):
    layout.user("[tools]\nextra = " + "[" * 15 + "]" * 15 + "\n")  # 16 levels with tools.extra: silly, not refused
    with pytest.raises(ConfigError, match=r"key 'tools\.extra\[0\]' must be a string"):
        layout.load()


def test_deeply_nested_overrides_are_config_invalid(layout):
    deep: dict = {}
    inner = deep
    for _ in range(DEEP):
        inner["a"] = {}
        inner = inner["a"]
    error = _load_in_thread(lambda: layout.load({"tools": deep}))
    assert error.message.startswith("invalid configuration in overrides: tables and arrays nest deeper than 16")


# -- a project can only tighten --------------------------------------------------------------------

LOOSENINGS = [
    ("[limits]\nmax_timeout_seconds = 601.0\n", "limits.max_timeout_seconds", "above the user's 600.0"),
    ("[limits]\nmax_output_bytes = 65537\n", "limits.max_output_bytes", "a project may only lower limits"),
    ("[limits]\nread_max_bytes = 999999999\n", "limits.read_max_bytes", "above"),
    ("[limits]\nmax_input_bytes = 99999999\n", "limits.max_input_bytes", "above"),
    ("[limits]\nworker_grace_seconds = 50.0\n", "limits.worker_grace_seconds", "above"),
    ("[limits]\napproval_timeout_seconds = 1000.0\n", "limits.approval_timeout_seconds", "above"),
    ("[skills]\nmax_skills = 1000\n", "skills.max_skills", "above"),
    ("[skills]\nmax_skill_bytes = 99999999\n", "skills.max_skill_bytes", "above"),
    ('[approval]\nfilesystem = "allow"\n', "approval.filesystem", "looser than the user's 'ask'"),
    ('[approval]\nprocess = "allow"\n', "approval.process", "allow < ask < deny"),
    ('[approval]\ndelegate = "allow"\n', "approval.delegate", "looser"),
    ('[[approval.rules]]\ntool = "bash"\ncommand_prefix = "git status"\ndecision = "allow"\n', "approval.rules[0]",
     'a project rule may only "ask" or "deny"'),
    ('[[approval.rules]]\ntool = "bash"\ndecision = "deny"\ntighten_only = false\n', "approval.rules[0].tighten_only",
     "every project rule is tighten_only"),
    ('[agents.claude]\nexecutable = "/tmp/evil"\n', "agents.claude.executable",
     "only the user configures agent adapters"),
    ('[agents.codex]\nargs = ["exec", "--dangerously-bypass-approvals-and-sandbox"]\n', "agents.codex.args",
     "argument vectors"),
    ('[agents.pi]\nexecutable = "pi"\nargs = ["-p"]\n', "agents.pi.executable", "agent adapters"),  # even unchanged
    ("[agents]\napproval_prompt_chars = 10\n", "agents.approval_prompt_chars", "agent adapters"),
    ('[tools]\nextra = ["evil.module:Tool"]\n', "tools.extra", "a project cannot add tools"),
    ("[audit]\nmax_bytes = 2048\n", "audit.max_bytes", "only the user configures the audit log"),
    ('[runtime]\ncontainment = "process-tree"\n', "runtime.containment", "weaker than the user's 'auto'"),
]


@pytest.mark.parametrize("text, key, why", LOOSENINGS)
def test_project_attempts_to_loosen_are_refused(layout, text, key, why):
    layout.project(text)
    with pytest.raises(ConfigError) as info:
        layout.load()
    message = info.value.message
    assert message.startswith(f"project configuration {layout.project_file} may only tighten the user's settings")
    assert key in message and why in message
    assert {"key": key, "reason": info.value.details["refused"][0]["reason"]} in info.value.details["refused"]


@pytest.mark.parametrize("section", ["limits", "skills"])
def test_no_limit_can_be_raised_by_a_project(layout, section):
    """Every numeric limit the model has, including ones added later: user's value + 1 is refused."""
    user = getattr(load_config(env={}).config, section)
    for name, value in user.model_dump().items():
        raised = value + 1
        layout.project(f"[{section}]\n{name} = {raised!r}\n")
        with pytest.raises(ConfigError, match=rf"{section}.{name} \({raised!r} is above the user's {value!r}"):
            layout.load()
        layout.project(f"[{section}]\n{name} = {value!r}\n")  # equal is not raising
        assert getattr(getattr(layout.load().config, section), name) == value


def test_every_refused_key_is_named_at_once(layout):
    layout.project('[limits]\nmax_output_bytes = 99999999\n[approval]\nprocess = "allow"\n'
                   '[agents.claude]\nexecutable = "x"\n')
    with pytest.raises(ConfigError) as info:
        layout.load()
    assert [r["key"] for r in info.value.details["refused"]] == [
        "limits.max_output_bytes", "approval.process", "agents.claude.executable"]


def test_tools_entry_points_may_only_be_turned_off(layout):
    layout.project("[tools]\nentry_points = false\n")
    assert layout.load().config.tools.entry_points is False
    layout.user("[tools]\nentry_points = false\n")
    layout.project("[tools]\nentry_points = true\n")
    with pytest.raises(ConfigError, match=r"tools\.entry_points .a project cannot enable tools the user disabled"):
        layout.load()


def test_project_is_compared_with_the_users_resolved_values(layout):
    layout.user('[limits]\nmax_timeout_seconds = 1200.0\n[approval]\nprocess = "allow"\n'
                '[runtime]\ncontainment = "process-tree"\n')
    layout.project('[limits]\nmax_timeout_seconds = 900.0\n[approval]\nprocess = "allow"\n'
                   '[runtime]\ncontainment = "auto"\n')
    config = layout.load().config  # 900 > defaults' 600 but below the user's 1200; equal approval is no loosening
    assert config.limits.max_timeout_seconds == 900 and config.approval.process == "allow"
    assert config.runtime.containment == "auto"
    layout.user("[limits]\nmax_timeout_seconds = 100.0\n")
    with pytest.raises(ConfigError, match=r"limits.max_timeout_seconds \(900.0 is above the user's 100.0"):
        layout.load()


def test_project_tightenings_are_accepted_and_become_floors(layout):
    layout.project('[limits]\nmax_output_bytes = 2048\n[approval]\nread_only = "ask"\nprocess = "deny"\n'
                   '[[approval.rules]]\ntool = "bash"\ncommand_prefix = "rm"\ndecision = "deny"\n'
                   '[runtime]\ncontainment = "cgroup"\n')
    loaded = layout.load()
    config = loaded.config
    assert config.limits.max_output_bytes == 2048 and config.runtime.containment == "cgroup"
    assert (config.approval.read_only, config.approval.process) == ("ask", "deny")
    floors = [(r.tool, r.risk, r.command_prefix, r.decision) for r in config.approval.rules if r.tighten_only]
    assert floors == [("bash", None, "rm", "deny"), (None, "read_only", None, "ask"), (None, "process", None, "deny")]
    assert loaded.rule_sources[1] == f"approval.read_only in {layout.project_file}"


def test_overrides_cannot_lift_a_project_floor(layout):
    layout.project('[approval]\nprocess = "deny"\n')
    loaded = layout.load({"approval": {"process": "allow"}})
    assert loaded.config.approval.process == "allow"  # the key is the override's...
    floor = loaded.config.approval.rules[-1]  # ...but the project's floor still stands
    assert (floor.risk, floor.decision, floor.tighten_only) == ("process", "deny", True)


def test_a_project_cannot_touch_adapters_even_when_the_user_did(layout):
    layout.user('[agents.claude]\nexecutable = "/opt/claude"\nargs = ["-p"]\n')
    layout.project('[agents.claude]\nargs = ["-p", "--yolo"]\n')
    with pytest.raises(ConfigError, match=r"agents.claude.args"):
        layout.load()
    layout.project_file.unlink()
    assert layout.load().config.agents.claude.executable == "/opt/claude"


def test_a_project_may_lower_the_maximum_below_the_default(layout):
    layout.project("[limits]\nmax_timeout_seconds = 30.0\n")  # no need to lower the default too
    config = layout.load().config
    assert (config.limits.max_timeout_seconds, config.limits.default_timeout_seconds) == (30.0, 120.0)


def test_the_shipped_default_timeout_is_two_minutes():
    limits = load_config(env={}).config.limits
    assert (limits.default_timeout_seconds, limits.max_timeout_seconds) == (120.0, 600.0)

