"""Skills as the skill tests write them: a SKILL.md with front matter, in a directory of its own beneath a root."""

from __future__ import annotations

from pathlib import Path

DESCRIPTION = "Checks a release before it ships."


def skill_text(name: str, description: str = DESCRIPTION, body: str = "# Steps\n1. Run the tests.\n") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n{body}"


def write_skill(root: Path, directory: str, text: str | bytes | None = None) -> Path:
    folder = root / directory
    folder.mkdir(parents=True, exist_ok=True)
    content = skill_text(directory) if text is None else text
    path = folder / "SKILL.md"
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return path
