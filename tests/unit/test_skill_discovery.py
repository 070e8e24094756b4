"""Skills without a session: the front matter rules, and discovery under the user and project roots (symlinks
out of a root, bounds, collisions, bad files)."""

from __future__ import annotations

import os
import random
import re
import threading
import time

import pytest

from helpers.skills import DESCRIPTION, skill_text, write_skill
from peon.core.skills import SkillProblem, check_skill, parse_front_matter, split_front_matter
from peon.supervisor import skills
from peon.supervisor.skills import discover


def reasons(found) -> dict[str, str]:
    return {os.path.basename(entry["path"]): entry["reason"] for entry in found.skipped}


# -- front matter (pure) ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("name: a\ndescription: plain text", "plain text"),
    ("name: a\ndescription: 'single ''quoted'' # not a comment'", "single 'quoted' # not a comment"),
    ('name: a\ndescription: "double \\"quoted\\" \\u00e9\\t"', 'double "quoted" é\t'),
    ("name: a\ndescription: folded plain\n  over two lines # comment", "folded plain over two lines"),
    ("name: a\ndescription:\n  starts below\n\n  with a paragraph", "starts below\nwith a paragraph"),
    ("name: a\ndescription: |\n  literal\n    indented\n", "literal\n  indented\n"),
    ("name: a\ndescription: >-\n  folded\n  block\n\n  scalar\n", "folded block\nscalar"),
    ("name: a\ndescription: x\nlicense: MIT\nmetadata:\n  author: me\n# comment\n  nested: {a: 1}\n"
     "allowed-tools:\n- Bash\n- Read", "x"),
])
def test_front_matter_values(text, expected):
    assert parse_front_matter(text)["description"] == expected


@pytest.mark.parametrize("text, reason", [
    ("name: a\nname: b", "sets 'name' twice"),
    ("name: [a, b]", "starts with '['"),
    ("name: &anchor a", "starts with '&'"),
    ("name: !!str a", "starts with '!'"),
    ("name:\n  - a\n  - b", "not a list"),
    ("name:\n- a", "not a list"),
    ("description: a: b", "nested mapping"),
    ("description: 'unterminated", "unterminated"),
    ("description: 'a' trailing", "after its closing quote"),
    ('description: "bad \\q escape"', "unknown escape"),
    ("\tname: a", "tab"),
    ("name: a\tb", "tab"),
    ("  name: a", "indented before any key"),
    ("just text", "not a 'key: value' line"),
    ("description: x # comment\n  more", "continues after a comment"),
    ("name: 2048", "reads as a null, boolean, number or date"),
    ("description: ~", "reads as a null"),
    ("description: yes", "reads as a null, boolean"),
    ("name: 2024-01-31", "or date"),
    ("description: .inf", "number"),
])
def test_front_matter_refusals(text, reason):
    with pytest.raises(SkillProblem, match=re.escape(reason)):
        parse_front_matter(text)


@pytest.mark.parametrize("data, reason", [
    (b"name: a\n", "does not begin with a '---' line"),
    (b"---\nname: a\n", "not closed"),
    (b"---\nname: \xff\n---\n", "not valid UTF-8"),
    (b"---\n" + b"x: " + b"y" * 20000, f"within {skills.FRONT_MATTER_MAX_BYTES} bytes"),
])
def test_front_matter_delimiters(data, reason):
    with pytest.raises(SkillProblem, match=re.escape(reason)):
        split_front_matter(data[: skills.FRONT_MATTER_MAX_BYTES])


def test_front_matter_delimiters_accept_bom_crlf_and_dots():
    assert split_front_matter(b"\xef\xbb\xbf---\r\nname: a\r\n...\r\nbody") == "name: a"


@pytest.mark.parametrize("fields, reason", [
    ({"description": "d"}, "no 'name'"),
    ({"name": "a"}, "no 'description'"),
    ({"name": "", "description": "d"}, "1-64"),
    ({"name": "a" * 65, "description": "d"}, "has 65 characters"),
    ({"name": "Upper", "description": "d"}, "lowercase"),
    ({"name": "-lead", "description": "d"}, "lowercase"),
    ({"name": "trail-", "description": "d"}, "lowercase"),
    ({"name": "dou--ble", "description": "d"}, "lowercase"),
    ({"name": "under_score", "description": "d"}, "lowercase"),
    ({"name": "other", "description": "d"}, "does not match its directory name 'dir'"),
    ({"name": "dir", "description": ""}, "1-1024"),
    ({"name": "dir", "description": "   \n"}, "blank"),
    ({"name": "dir", "description": "d" * 1025}, "has 1025 characters"),
    ({"name": "dir", "description": "bell \x07 and escape \x1b[31m"}, "U+0007"),
])
def test_skill_rules(fields, reason):
    directory = "dir" if fields.get("name") in ("dir", "other", None) else fields["name"]
    with pytest.raises(SkillProblem, match=re.escape(reason)):
        check_skill(directory, fields)


def test_skill_rules_accept_the_limits():
    assert check_skill("a" * 64, {"name": "a" * 64, "description": "d" * 1024}) == ("a" * 64, "d" * 1024)
    assert check_skill("a-1-b", {"name": "a-1-b", "description": "multi\nline\twith tab"})[0] == "a-1-b"


def test_front_matter_agrees_with_a_yaml_parser():
    """Differential check: whatever the strict parser accepts, PyYAML (when installed) reads the same."""
    yaml = pytest.importorskip("yaml")
    rng = random.Random(1234)
    atoms = ["a", "b c", "é", " ", "'", '"', "\\n", "\\", "#", " #x", ":", "x:y", "-", "|", ">", "\n", "\n  ",
             "\n\n  ", "''", "\t", "%", "@", "&a", "*", "!t", "[", "]", "{", "}", ",", "?", "0", "true", "~", "1.5",
             "2024-01-02", "yes", "null", "0x1f", "1_000", ".nan", "12:30"]

    def scalar() -> str:
        body = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 6)))
        kind = rng.random()
        if kind < 0.3:
            return body.replace("\n", " ")
        if kind < 0.5:
            return "'" + body.replace("'", "''") + "'"
        if kind < 0.7:
            return '"' + body.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if kind < 0.85:
            lines = body.split("\n")
            return rng.choice(["|", ">", "|-",
                               ">+"]) + "\n" + "\n".join("  " + line if line.strip() else "" for line in lines)
        return body

    accepted = 0
    for _ in range(4000):
        text = f"name: {scalar()}\ndescription: {scalar()}\n"
        try:
            ours = parse_front_matter(text)
        except SkillProblem:
            continue
        reference = yaml.safe_load(text)  # must not raise: we accepted it
        for key in ("name", "description"):
            value = reference[key]
            if value is None:  # an empty value: refused later, by check_skill
                assert ours[key] == "", text
            else:  # never a number, boolean or date that Peon would read as text
                assert isinstance(value, str) and ours[key] == value, text
        accepted += 1
    assert accepted > 1000


# -- discovery --------------------------------------------------------------------------------------------


def test_discovers_both_roots_with_canonical_paths(roots, workspace):
    user, project, env = roots
    write_skill(user, "user-skill")
    write_skill(project, "project-skill")
    (project / "README.md").write_text("not a skill")  # plain files and dot-entries are not candidates
    (project / ".git").mkdir()
    found = discover(workspace, env, 64)
    assert sorted(found.available) == ["project-skill", "user-skill"]
    record = found.available["project-skill"]
    assert record.origin == "project" and record.description == DESCRIPTION
    assert record.path == os.path.realpath(project / "project-skill" / "SKILL.md")
    assert record.root == os.path.realpath(project)
    assert found.available["user-skill"].origin == "user"
    assert found.skipped == []


def test_user_root_follows_xdg_then_home(tmp_path, workspace):
    home_root = tmp_path / "home" / ".config" / "peon" / "skills"
    write_skill(home_root, "from-home")
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": "relative/ignored"}
    assert list(discover(workspace, env, 64).available) == ["from-home"]
    assert discover(workspace, {}, 64).available == {}


def test_user_skills_win_name_collisions(roots, workspace):
    user, project, env = roots
    write_skill(user, "deploy", skill_text("deploy", "the user's deploy"))
    write_skill(project, "deploy", skill_text("deploy", "the repository's deploy"))
    found = discover(workspace, env, 64)
    assert found.available["deploy"].description == "the user's deploy"
    assert found.available["deploy"].origin == "user"
    (skipped,) = found.skipped
    assert skipped["path"] == os.path.join(os.path.realpath(project), "deploy")
    assert "user skill of the same name" in skipped["reason"] and "takes precedence" in skipped["reason"]


def test_at_most_max_skills_user_first_then_name_order(roots, workspace):
    user, project, env = roots
    for name in ["p-a", "p-b", "p-c"]:
        write_skill(project, name)
    for name in ["u-b", "u-a"]:
        write_skill(user, name)
    found = discover(workspace, env, 3)
    assert list(found.available) == ["u-a", "u-b", "p-a"]
    assert {k: v for k, v in reasons(found).items()} == {
        "p-b": "skills.max_skills (3) valid skills were already found",
        "p-c": "skills.max_skills (3) valid skills were already found",
    }
    assert discover(workspace, env, 0).available == {}


def test_symlinked_skill_directory_pointing_outside_is_skipped(roots, workspace, tmp_path):
    user, project, env = roots
    outside = tmp_path / "outside"
    write_skill(outside, "evil")
    (project / "evil").symlink_to(outside / "evil")
    (user / "evil2").symlink_to(outside / "evil")
    write_skill(project, "real")
    (project / "alias").symlink_to("real")  # inside the root, but named differently
    (project / "abs-alias").symlink_to(project / "real")  # absolute: refused like any workspace symlink
    write_skill(user, "u-real")
    (user / "user-alias").symlink_to(user / "u-real")  # the user root is not the workspace: absolute is fine
    write_skill(project, "linked-file", None).unlink()
    (project / "linked-file" / "SKILL.md").symlink_to(outside / "evil" / "SKILL.md")
    found = discover(workspace, env, 64)
    assert list(found.available) == ["u-real", "real"]
    why = reasons(found)
    assert "outside its root" in why["evil"] and "outside its root" in why["evil2"]
    assert "outside its root" in why["linked-file"]
    assert "does not match its directory name 'alias'" in why["alias"]
    assert "outside its root and the workspace" in why["abs-alias"] and "an absolute path" in why["abs-alias"]
    assert "does not match its directory name 'user-alias'" in why["user-alias"]


def test_symlinks_inside_the_root_are_followed(roots, workspace):
    _user, project, env = roots
    storage = project / "storage"
    write_skill(storage, "kept", skill_text("via-link"))
    (project / "via-link").symlink_to("storage/kept")  # relative, stays inside the root
    found = discover(workspace, env, 64)
    assert found.available["via-link"].path == os.path.realpath(storage / "kept" / "SKILL.md")
    assert "storage" in reasons(found)  # a directory without SKILL.md is reported


def test_nothing_outside_the_root_is_opened(roots, workspace, tmp_path):
    """A SKILL.md symlinked to a FIFO outside the root: a writer waiting for a reader stays blocked."""
    _user, project, env = roots
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (project / "trap").mkdir()
    (project / "trap" / "SKILL.md").symlink_to(fifo)
    opened = threading.Event()

    def writer():
        with open(fifo, "wb"):  # blocks until someone opens the FIFO for reading
            opened.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        found = discover(workspace, env, 64)
        assert "outside its root" in reasons(found)["trap"]
        time.sleep(0.2)
        assert not opened.is_set()
    finally:
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # release the writer
        thread.join(5)


def test_special_files_inside_the_root_are_skipped(roots, workspace):
    _user, project, env = roots
    (project / "fifo-skill").mkdir()
    os.mkfifo(project / "fifo-skill" / "SKILL.md")
    (project / "dir-skill" / "SKILL.md").mkdir(parents=True)
    (project / "empty-dir").mkdir()
    (project / "loop").symlink_to("loop")
    why = reasons(discover(workspace, env, 64))
    assert "not a regular file" in why["fifo-skill"] and "not a regular file" in why["dir-skill"]
    assert "no SKILL.md" in why["empty-dir"]
    assert "loop" in why


def test_a_project_root_outside_the_workspace_is_skipped(workspace, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    write_skill(elsewhere, "foreign")
    (workspace / ".peon").mkdir()
    (workspace / ".peon" / "skills").symlink_to(elsewhere)
    found = discover(workspace, {}, 64)
    assert found.available == {}
    assert "outside the workspace" in found.skipped[0]["reason"]


def test_bad_front_matter_is_skipped_with_a_reason(roots, workspace):
    _user, project, env = roots
    bad = {
        "no-front": b"# Just markdown\n",
        "unclosed": b"---\nname: unclosed\ndescription: d\n",
        "not-utf8": b"---\nname: not-utf8\ndescription: \xff\xfe\n---\n",
        "Upper": skill_text("Upper"),
        "mismatch": skill_text("something-else"),
        "no-desc": "---\nname: no-desc\n---\n",
        "long-desc": skill_text("long-desc", "d" * 1025),
        "flow": "---\nname: flow\ndescription: [a, b]\n---\n",
        "twice": "---\nname: twice\nname: twice\ndescription: d\n---\n",
        "huge-front": "---\nname: huge-front\ndescription: d\nx: " + "y" * 20000 + "\n---\n",
    }
    for directory, text in bad.items():
        write_skill(project, directory, text)
    write_skill(project, "good")
    found = discover(workspace, env, 64)
    assert list(found.available) == ["good"]
    why = reasons(found)
    assert set(why) == set(bad)
    assert "does not begin with a '---' line" in why["no-front"]
    assert "not closed" in why["unclosed"]
    assert "not valid UTF-8" in why["not-utf8"]
    assert "lowercase" in why["Upper"]
    assert "does not match its directory name" in why["mismatch"]
    assert "no 'description'" in why["no-desc"]
    assert "1025 characters" in why["long-desc"]
    assert "starts with '['" in why["flow"]
    assert "twice" in why["twice"]
    assert "within 16384 bytes" in why["huge-front"]


def test_discovery_is_bounded(roots, workspace, monkeypatch):
    _user, project, env = roots
    for index in range(5):
        write_skill(project, f"s{index}")
    found = discover(workspace, env, 64, budget_seconds=0)
    assert found.available == {}
    assert "discovery stopped after 0 s; 5 entries of this root were not examined" in found.skipped[0]["reason"]
    monkeypatch.setattr(skills, "MAX_ENTRIES_PER_ROOT", 3)
    found = discover(workspace, env, 64)
    assert len(found.available) == 3
    assert any("more than 3 entries" in entry["reason"] for entry in found.skipped)

