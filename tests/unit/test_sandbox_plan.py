"""The sandbox's pure decisions, without processes: Landlock rules per ABI, what an ABI cannot enforce,
the bubblewrap command line, the approved plan's strict parsing, the [sandbox] configuration and what a
project may change there, and the worker failing closed on an approval without a usable sandbox."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from peon.client.config import load_config
from peon.core.agent_control import AGENT_CONTROL_PATHS
from peon.core.errors import ConfigError, ErrorCode, PeonError, ToolError
from peon.core.tool import SessionView, ToolRisk
from peon.tools.bash import BashTool
from peon.workers.sandbox import landlock as ll
from peon.workers.sandbox import Simulation, call_details, confinement_for, expand, result_summary
from peon.core.environment import CACHE_VARIABLES, cache_environment
from peon.workers.sandbox.plan import (
    QUIET_PROFILE, RUN_NEXT_LINE, SandboxPlan, bwrap_argv, enforced, hideable, host_socket_paths, kind_limits,
    landlock_rules, layers, protected_paths, quiet_profile, seccomp_rules, unenforced,
)

PLAN = SandboxPlan("landlock", ("/ws", "/tmp", "/dev/null"), ("/",), False, True, True, abi=6)


def test_rules_handle_every_right_of_the_abi_and_grant_back_only_what_the_plan_says():
    rules = landlock_rules(PLAN, {"/ws", "/tmp", "/"})
    assert rules.handled_fs == ll.fs_rights(6) == (1 << 16) - 1
    assert rules.handled_net == ll.NET_BIND_TCP | ll.NET_CONNECT_TCP
    assert rules.scoped == ll.SCOPE_SIGNAL | ll.SCOPE_ABSTRACT_UNIX_SOCKET
    grants = dict(rules.grants)
    assert grants["/"] == ll.FS_READ  # reading and executing, nothing else
    assert grants["/ws"] == grants["/tmp"] == ll.fs_rights(6)
    # A file (not a directory) can only carry file rights, or landlock_add_rule refuses it.
    assert grants["/dev/null"] == ll.fs_rights(6) & ll.FS_FILE_RIGHTS
    assert not grants["/dev/null"] & (ll.FS_MAKE_REG | ll.FS_REMOVE_FILE | ll.FS_READ_DIR)


@pytest.mark.parametrize("abi, fs_bits, net, scoped", [
    (1, 13, False, False), (2, 14, False, False), (3, 15, False, False),
    (4, 15, True, False), (5, 16, True, False), (6, 16, True, True), (7, 16, True, True),
])
def test_rules_follow_the_abi(abi, fs_bits, net, scoped):
    plan = SandboxPlan("landlock", ("/ws",), ("/",), False, True, True, abi=abi)
    rules = landlock_rules(plan, {"/ws", "/"})
    assert rules.handled_fs == (1 << fs_bits) - 1
    assert bool(rules.handled_net) is net
    assert bool(rules.scoped) is scoped


def test_with_the_mount_view_landlock_leaves_truncate_and_reading_everything_to_it():
    view = SandboxPlan("landlock", ("/ws", "/dev/null"), ("/",), True, True, True, abi=7, mount_view=True)
    rules = landlock_rules(view, {"/ws", "/"})
    assert rules.handled_fs == ll.fs_rights(7) & ~ll.FS_TRUNCATE & ~ll.FS_READ
    grants = dict(rules.grants)
    assert "/" not in grants  # nothing left to grant there: every path is readable, the view refuses writes
    assert grants["/ws"] == rules.handled_fs and rules.handled_fs & ll.FS_WRITE_FILE
    assert grants["/dev/null"] == rules.handled_fs & ll.FS_FILE_RIGHTS
    # Narrowed reads stay Landlock's; without the view Landlock handles everything.
    narrowed = landlock_rules(SandboxPlan("landlock", ("/ws",), ("/usr", "/ws"), True, True, True, abi=7,
                                          mount_view=True), {"/ws", "/usr"})
    assert narrowed.handled_fs == ll.fs_rights(7) & ~ll.FS_TRUNCATE and dict(narrowed.grants)["/usr"] == ll.FS_READ
    assert landlock_rules(PLAN, {"/ws", "/tmp", "/"}).handled_fs == ll.fs_rights(6)


def test_network_and_isolation_can_be_left_out():
    plan = SandboxPlan("landlock", ("/ws",), ("/",), True, False, True, abi=7)
    rules = landlock_rules(plan, {"/ws", "/"})
    assert rules.handled_net == 0 and rules.scoped == ll.SCOPE_ABSTRACT_UNIX_SOCKET


def test_what_each_abi_cannot_enforce_is_named():
    options = {"network": False, "isolate_signals": True, "isolate_abstract_sockets": True}
    assert unenforced("landlock", 7, **options) == []
    gaps = unenforced("landlock", 5, **options)
    assert len(gaps) == 2 and "isolate_signals" in gaps[0] and "ABI 6" in gaps[0]
    gaps = unenforced("landlock", 3, **options)
    assert "sandbox.network = false" in gaps[0] and "ABI 4" in gaps[0]
    gaps = unenforced("landlock", 2, **options)
    assert "truncate" in gaps[0]
    assert unenforced("landlock", 3, network=True, isolate_signals=False, isolate_abstract_sockets=False) == []
    # bwrap: abstract sockets live in the network namespace, which it shares when the network is on.
    assert unenforced("bwrap", 0, **options) == []
    assert "isolate_abstract_sockets" in unenforced("bwrap", 0, **{**options, "network": True})[0]
    # Landlock without its namespaces: protected paths, host unix sockets and a private loopback are named.
    gaps = unenforced("landlock", 7, **options, namespaces=False, protected=True)
    assert "sandbox.protected" in gaps[0] and "named unix sockets" in gaps[1] and "CAP_SYS_ADMIN" in gaps[1]
    assert kind_limits("landlock", namespaces=False) and "utimes" in kind_limits("landlock", namespaces=False)[0]
    assert kind_limits("landlock", namespaces=True) == kind_limits("bwrap", namespaces=False) == []


def test_bwrap_command_line():
    writable = ("/ws", "/tmp", "/dev/null", "/dev/shm")
    plan = SandboxPlan("bwrap", writable, ("/",), False, True, True, bwrap="/usr/bin/bwrap")
    argv = bwrap_argv(plan, ["/bin/bash", "-lc", "echo hi"], "/ws")
    assert argv[0] == "/usr/bin/bwrap"
    assert argv[argv.index("--"):] == ["--", "/bin/bash", "-lc", "echo hi"]
    options = " ".join(argv[:argv.index("--")])
    assert "--ro-bind / /" in options
    assert "--bind /ws /ws" in options and "--bind /tmp /tmp" in options and "--bind /dev/shm /dev/shm" in options
    assert "/dev/null" not in options  # the fresh /dev has it
    assert options.index("--ro-bind / /") < options.index("--dev /dev") < options.index("--bind /ws /ws")
    for flag in ("--unshare-pid", "--unshare-ipc", "--unshare-net", "--cap-drop ALL", "--chdir /ws"):
        assert flag in options
    # Left out on purpose: each would cut a cancelled command's grace (see bwrap_argv).
    assert "--die-with-parent" not in options and "--new-session" not in options
    narrow = SandboxPlan("bwrap", ("/ws",), ("/usr", "/etc"), True, True, True, bwrap="/b")
    shared = bwrap_argv(narrow, ["/bin/true"], "/ws")
    assert "--unshare-net" not in shared
    assert "--ro-bind /usr /usr" in " ".join(shared) and "--ro-bind / /" not in " ".join(shared)


def test_the_approved_plan_is_parsed_strictly():
    assert SandboxPlan.from_dict(PLAN.to_dict()) == PLAN
    bad = [
        {**PLAN.to_dict(), "kind": "chroot"},
        {**PLAN.to_dict(), "writable": ["relative/path"]},
        {**PLAN.to_dict(), "writable": "/ws"},
        {**PLAN.to_dict(), "network": "no"},
        {**PLAN.to_dict(), "abi": True},
        {**PLAN.to_dict(), "abi": 0},
        {**PLAN.to_dict(), "kind": "bwrap", "bwrap": "bwrap"},
        {k: v for k, v in PLAN.to_dict().items() if k != "isolate_signals"},
    ]
    for data in bad:
        with pytest.raises(ValueError):
            SandboxPlan.from_dict(data)


def test_simulation_knob_only_takes_known_items():
    assert Simulation.parse("") == Simulation()
    assert Simulation.parse("no-landlock, landlock-abi=3,no-bwrap") == Simulation(True, 3, True)
    with pytest.raises(PeonError) as caught:
        Simulation.parse("landlock-abi=lots")
    assert caught.value.code == ErrorCode.CONFIG_INVALID and "landlock-abi=lots" in caught.value.message


def test_paths_expand_home_of_the_session():
    assert expand("~/.cache", {"HOME": "/home/u"}) == "/home/u/.cache"
    assert expand("~/.cache", {"HOME": "relative"}) is None
    assert expand("/abs", {}) == "/abs"


# -- configuration ---------------------------------------------------------------------------------


def test_sandbox_is_on_by_default_where_the_kernel_allows():
    config = load_config(env={}).config
    assert config.sandbox.mode == "auto" and config.sandbox.kind == "landlock"
    assert ".git/hooks" in config.sandbox.protected and config.sandbox.caches == "workspace"
    assert config.sandbox.readable == ("/",) and config.sandbox.network is True
    assert config.agents.claude.sandbox is False


@pytest.mark.parametrize("table, key", [
    ({"mode": "on"}, "sandbox.mode"),
    ({"kind": "docker"}, "sandbox.kind"),
    ({"writable": ["relative/dir"]}, "sandbox.writable"),
    ({"readable": "/"}, "sandbox.readable"),
    ({"network": "false"}, "sandbox.network"),
    ({"isolate_signals": 1}, "sandbox.isolate_signals"),
    ({"nework": False}, "sandbox.nework"),
])
def test_bad_sandbox_settings_name_the_key(table, key):
    with pytest.raises(ConfigError) as caught:
        load_config({"sandbox": table}, env={})
    assert key in caught.value.message


def project(tmp_path: Path, text: str, user: str = "") -> Path:
    (tmp_path / "ws" / ".peon").mkdir(parents=True)
    (tmp_path / "ws" / ".peon" / "config.toml").write_text(text)
    (tmp_path / "user.toml").write_text(user)
    return tmp_path / "ws"


def test_a_project_may_only_strengthen_the_sandbox(tmp_path):
    ws = project(tmp_path, '[sandbox]\nmode = "required"\nnetwork = false\nisolate_signals = true\n')
    config = load_config(workspace=ws, env={"PEON_CONFIG": str(tmp_path / "user.toml")}).config
    assert config.sandbox.mode == "required" and config.sandbox.network is False


@pytest.mark.parametrize("text, key", [
    ('[sandbox]\nmode = "off"\n', "sandbox.mode"),
    ('[sandbox]\nnetwork = true\n', "sandbox.network"),
    ('[sandbox]\nisolate_signals = false\n', "sandbox.isolate_signals"),
    ('[sandbox]\nwritable = ["/"]\n', "sandbox.writable"),
    ('[sandbox]\nreadable = ["/"]\n', "sandbox.readable"),
    ('[sandbox]\nkind = "bwrap"\n', "sandbox.kind"),
    ('[agents.claude]\nsandbox = false\n', "agents.claude.sandbox"),
])
def test_a_project_cannot_weaken_the_sandbox(tmp_path, text, key):
    user = '[sandbox]\nmode = "auto"\nnetwork = false\n'
    ws = project(tmp_path, text, user)
    with pytest.raises(ConfigError) as caught:
        load_config(workspace=ws, env={"PEON_CONFIG": str(tmp_path / "user.toml")})
    assert key in caught.value.message


# -- approval details and the worker's side, without processes ----------------------------------------


STATUS = {"mode": "auto", "active": True, "kind": "landlock", "plan": PLAN.to_dict(), "not_enforced": []}


def view(status: dict, mode: str = "auto") -> SessionView:
    config = load_config({"sandbox": {"mode": mode}}, env={}).config
    return SessionView(workspace=Path("/ws"), config=config, env={}, sandbox=status)


def test_bash_is_assessed_sandboxed_only_when_the_sandbox_is_active():
    bash = BashTool()
    on = bash.prepare({"command": "make"}, view(STATUS))
    assert on.sandboxed is True and on.risk == ToolRisk.PROCESS
    off = bash.prepare({"command": "make"}, view({"mode": "auto", "active": False, "reason": "x"}))
    assert off.sandboxed is False
    details = bash.prepare({"command": "make"}, view(STATUS)).details["sandbox"]
    assert details["active"] is True and details["abi"] == 6 and details["network"] is False
    assert details["writable"] == ["/ws", "/tmp", "/dev/null"] and details["mode"] == "auto"
    # Off: the details stay exactly as they were before there was a sandbox.
    assert "sandbox" not in bash.prepare({"command": "make"}, view({"mode": "off", "active": False}, "off")).details


def test_call_details_and_result_summary():
    assert call_details({"mode": "off"}) is None
    assert call_details({"mode": "auto", "active": False, "reason": "no Landlock"}) == {
        "active": False, "mode": "auto", "reason": "no Landlock"}
    switched_off = call_details(STATUS, enabled=False, why_not="agents.pi.sandbox is false")
    assert switched_off == {"active": False, "mode": "auto", "reason": "agents.pi.sandbox is false"}
    assert result_summary(call_details(STATUS)) == {"kind": "landlock", "abi": 6, "network": False,
                                                    "writable": ["/ws", "/tmp", "/dev/null"],
                                                    "layers": ["landlock"], "not_enforced": []}
    assert result_summary(None) is None


def context(approved: dict, mode: str):
    return SimpleNamespace(approved=approved, workspace=Path("/ws"), session=view(STATUS, mode))


def test_the_worker_fails_closed_on_an_unusable_approval():
    assert confinement_for(context({"sandbox": call_details(STATUS)}, "auto")).plan == PLAN
    with pytest.raises(ToolError) as caught:
        confinement_for(context({"sandbox": {**call_details(STATUS), "writable": ["ws"]}}, "auto"))
    assert caught.value.code == ErrorCode.SANDBOX_UNAVAILABLE and "nothing was started" in caught.value.message
    with pytest.raises(ToolError) as caught:
        confinement_for(context({}, "required"))
    assert caught.value.code == ErrorCode.SANDBOX_UNAVAILABLE and "required" in caught.value.message
    # An adapter switched off runs unsandboxed even when the session requires the sandbox for bash.
    assert confinement_for(context({}, "required"), enabled=False) is None
    assert confinement_for(context({"sandbox": {"active": False, "mode": "auto"}}, "auto")) is None


def test_doctor_describes_the_session_sandbox_and_each_enforced_and_unenforced_rule():
    from peon.cli.doctor import describe_sandbox

    assert describe_sandbox({"mode": "off", "active": False, "reason": 'sandbox.mode is "off"'}) == (
        'off: not sandboxed (sandbox.mode is "off")')
    line = describe_sandbox({**STATUS, "not_enforced": ["sandbox.isolate_signals (needs Landlock ABI 6)"],
                             "enforced": ["writes outside the writable paths are refused"]})
    assert line.splitlines() == [
        "auto: landlock ABI 6; layers landlock; writes beneath /ws, /tmp, /dev/null; reads beneath /; network off",
        "               enforced: writes outside the writable paths are refused",
        "               NOT enforced: sandbox.isolate_signals (needs Landlock ABI 6)"]
    failed = describe_sandbox({"error": "sandbox_unavailable: no"})
    assert failed == "the session did not start: sandbox_unavailable: no"


# -- the layers beside Landlock ---------------------------------------------------------------------


def test_protected_paths_are_the_existing_ones_inside_the_writable_roots():
    existing = {"/ws/.git/hooks", "/ws/.claude", "/ws/.vscode", "/tmp/.idea"}
    links = {"/ws/.vscode": "/etc/vscode"}  # leads out: read-only there already
    got = protected_paths(("/ws", "/tmp", "/dev/null"), (".git/hooks", ".claude", ".mcp.json", ".vscode", ".idea"),
                          lambda p: links.get(p, p), existing.__contains__)
    assert got == ["/ws/.git/hooks", "/ws/.claude", "/tmp/.idea"]


def test_host_sockets_are_the_named_ones_listed():
    listing = ("Num       RefCount Protocol Flags    Type St Inode Path\n"
               "0000: 00000002 00000000 00010000 0001 01 1234 /run/docker.sock\n"
               "0000: 00000002 00000000 00010000 0001 01 1235 @abstract-name\n"
               "0000: 00000002 00000000 00010000 0001 01 1236\n"
               "0000: 00000002 00000000 00010000 0001 01 1237 /tmp/with space.sock\n"
               "0000: 00000002 00000000 00010000 0001 01 1238 /run/docker.sock\n"
               "0000: 00000002 00000000 00010000 0001 01 1239 relative.sock\n")
    assert host_socket_paths(listing) == ["/run/docker.sock", "/tmp/with space.sock"]


def test_peon_directories_are_hidden_only_where_nothing_needed_lies_beneath():
    assert hideable(["/state/peon/sessions/s1", "/state/peon/sessions", "/tmp/peon-run-x", "/tmp/t", "/"],
                    ["/tmp/t/ws", "/tmp", "/dev/null"]) == ("/state/peon/sessions/s1", "/state/peon/sessions",
                                                            "/tmp/peon-run-x")


def test_seccomp_rules_follow_the_plan():
    full = SandboxPlan("landlock", ("/ws",), ("/",), False, True, True, abi=7, netns="/proc/1/task/2/ns/net",
                       netns_inode=5, mount_view=True, seccomp=True)
    rules = seccomp_rules(full)
    assert rules.special_chmod and rules.no_io_uring and not rules.metadata and not rules.inet_stream_only
    assert set(rules.socket_families) == {1, 2, 10, 16}
    bare = SandboxPlan("landlock", ("/ws",), ("/",), False, True, True, abi=7, seccomp=True)
    assert seccomp_rules(bare).metadata and seccomp_rules(bare).inet_stream_only
    online = SandboxPlan("landlock", ("/ws",), ("/",), True, True, True, abi=7, seccomp=True, mount_view=True)
    assert seccomp_rules(online).socket_families == () and not seccomp_rules(online).inet_stream_only
    # With its own network namespace, TCP there is the command's own loopback: no Landlock TCP rules.
    assert landlock_rules(full, {"/ws", "/"}).handled_net == 0
    assert layers(full) == ["landlock", "mount_view", "network_namespace", "seccomp"]
    assert any("private network namespace" in line for line in enforced(full))


def test_the_new_plan_fields_round_trip_and_are_checked():
    plan = SandboxPlan("landlock", ("/ws",), ("/",), False, True, True, abi=7, protected=(".git/hooks",),
                       netns="/proc/1/task/2/ns/net", netns_inode=5, mount_view=True, seccomp=True,
                       hidden=("/state",))
    assert SandboxPlan.from_dict(plan.to_dict()) == plan
    for key, value in [("protected", ["../x"]), ("protected", ["/abs"]), ("netns", "/etc/netns"),
                       ("netns_inode", 0), ("mount_view", "yes"), ("hidden", ["rel"])]:
        with pytest.raises(ValueError):
            SandboxPlan.from_dict({**plan.to_dict(), key: value})


def test_a_login_profile_is_silenced_and_the_command_keeps_its_stderr():
    assert quiet_profile(["/bin/bash", "-lc", "make"]) == [
        "/bin/bash", "-c", QUIET_PROFILE.removesuffix("\n") + RUN_NEXT_LINE + "make"]
    assert QUIET_PROFILE.endswith("} 2>/dev/null\n")
    script = quiet_profile(["/bin/bash", "-lc", "make"])[2]
    first_line = script.split("\n")[0]  # eval runs what follows it, cut at the first line's known length
    offset = len(first_line) + 1
    assert first_line.endswith(f'eval -- "${{BASH_EXECUTION_STRING:{offset}}}"; exit') and first_line.isascii()
    assert script[offset:] == "make"
    assert not any(ch < " " for ch in first_line)  # the first control character is the newline
    assert quiet_profile(["/usr/bin/claude", "-p", "x"]) == ["/usr/bin/claude", "-p", "x"]


def test_caches_point_at_the_cache_directory_unless_set():
    env = cache_environment("/c", {"PIP_CACHE_DIR": "/mine", "GOCACHE": ""})
    assert "PIP_CACHE_DIR" not in env and env["GOCACHE"] == "/c/go-build" and env["npm_config_cache"] == "/c/npm"
    assert set(CACHE_VARIABLES) - {"PIP_CACHE_DIR"} <= set(env)


@pytest.mark.parametrize("table, key", [
    ({"network": ["bad host!"]}, "sandbox.network"),
    ({"protected": ["../escape"]}, "sandbox.protected"),
    ({"caches": "everywhere"}, "sandbox.caches"),
])
def test_bad_new_sandbox_settings_name_the_key(table, key):
    with pytest.raises(ConfigError) as caught:
        load_config({"sandbox": table}, env={})
    assert key in caught.value.message


def test_a_project_may_narrow_the_allowlist_and_add_protected_paths(tmp_path):
    user = '[sandbox]\nnetwork = ["pypi.org", "registry.npmjs.org"]\n'
    env = {"PEON_CONFIG": str(tmp_path / "user.toml")}
    every_default = ", ".join(f'"{entry}"' for entry in AGENT_CONTROL_PATHS)  # the user's: the defaults
    narrowed = load_config(workspace=project(tmp_path, '[sandbox]\nnetwork = ["pypi.org"]\n'
                                             f'protected = [{every_default}, "Makefile"]\n', user),
                           env=env).config.sandbox
    assert narrowed.network == ("pypi.org",) and "Makefile" in narrowed.protected
    for text in ('[sandbox]\nnetwork = ["evil.test"]\n', '[sandbox]\nprotected = []\n'):
        shutil.rmtree(tmp_path / "ws")
        with pytest.raises(ConfigError):
            load_config(workspace=project(tmp_path, text, user), env=env)


def test_a_session_cache_directory_planted_in_the_temp_dir_is_not_used(tmp_path):
    """The per-session cache directory is made in a shared temp dir: a link planted there under its name
    (to /etc, say) must not become a writable path."""
    from peon.workers.sandbox import cache_dir

    (tmp_path / "peon-cache-s1").symlink_to("/etc")
    section = SimpleNamespace(caches="session")
    assert cache_dir(section, {"TMPDIR": str(tmp_path)}, "s1") is None
    made = cache_dir(section, {"TMPDIR": str(tmp_path)}, "s2")
    assert made == str(tmp_path.resolve() / "peon-cache-s2") and os.stat(made).st_mode & 0o777 == 0o700
    assert cache_dir(section, {"TMPDIR": str(tmp_path)}, "s2") == made  # already ours
    assert cache_dir(SimpleNamespace(caches="off"), {"TMPDIR": str(tmp_path)}, "s3") is None
    user = cache_dir(SimpleNamespace(caches="user"), {"HOME": str(tmp_path / "home")}, "s4")
    assert user == str(tmp_path.resolve() / "home" / ".cache" / "peon" / "sandbox")


def test_a_workspaces_sessions_share_one_cache_directory_outside_it(tmp_path):
    """caches = "workspace" (the default): one directory per workspace beneath the user's cache directory,
    the same for each of its sessions, another for another workspace, never inside the workspace."""
    from peon.workers.sandbox import cache_dir

    section = SimpleNamespace(caches="workspace")
    env = {"HOME": str(tmp_path / "home")}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = cache_dir(section, env, "s1", str(tmp_path / "a"))
    assert first == cache_dir(section, env, "s2", str(tmp_path / "a"))
    assert first != cache_dir(section, env, "s3", str(tmp_path / "b"))
    assert first is not None and first.startswith(str(tmp_path.resolve() / "home" / ".cache" / "peon" / "sandbox"))
    assert os.stat(first).st_mode & 0o777 == 0o700 and not first.startswith(str(tmp_path / "a"))
    assert cache_dir(section, {"XDG_CACHE_HOME": str(tmp_path / "xdg")}, "s4", str(tmp_path / "a")).startswith(
        str(tmp_path.resolve() / "xdg" / "peon" / "sandbox" / "workspaces"))


def test_the_environment_follows_the_sandbox_network():
    """network = false: package managers in offline mode (unless set); an allowlist: the proxy instead;
    caches beneath the cache directory either way; nothing of this without an active sandbox."""
    from peon.core.environment import OFFLINE, command_environment

    def env_for(status: dict, given: dict | None = None) -> dict:
        config = SimpleNamespace(environment={})
        return command_environment(SimpleNamespace(config=config, env={"PATH": "/bin", **(given or {})},
                                                   sandbox=status))

    offline = {"active": True, "cache_dir": "/c", "plan": {"network": False}}
    env = env_for(offline, {"PIP_RETRIES": "3"})
    assert env["PIP_RETRIES"] == "3" and env["npm_config_offline"] == "true" and env["GOPROXY"] == "off"
    assert env["PIP_CACHE_DIR"] == "/c/pip" and "HTTP_PROXY" not in env
    allowlisted = {**offline, "egress": {"proxy": "http://127.0.0.1:5"}}
    env = env_for(allowlisted, {"HTTPS_PROXY": "http://elsewhere"})
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://127.0.0.1:5"
    assert env["NO_PROXY"] == "localhost,127.0.0.1,::1"
    assert not set(OFFLINE) & set(env)
    online = env_for({"active": True, "cache_dir": "/c", "plan": {"network": True}})
    assert not set(OFFLINE) & set(online) and online["npm_config_cache"] == "/c/npm"
    assert env_for({"active": False, "cache_dir": "/c"}) == {"PATH": "/bin"}
