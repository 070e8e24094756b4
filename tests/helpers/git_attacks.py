"""The attacks a sandboxed command makes on what git runs outside the sandbox, and what the user does next:
each attack is a shell line run in a workspace holding a repository with one commit (``.github/workflows``,
and hooks as ``git init`` makes them or none); its payload, ``$PAYLOAD``, would create a marker file when
git runs it. :func:`fresh_repository` builds that workspace, :func:`user_runs_git` is the user's next
``git status`` and ``git commit``, outside. Used by tests/session/test_sandbox_guarded_paths.py and by the
chaos runner's sandboxed sessions (bench/robustness/chaos_edges.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

# Each attack: a shell line run in the workspace (a repository with one commit, .github/workflows and
# hooks as git init makes them). $EVIL is a copy of the repository whose config runs the payload.
EVIL_COPY = ('EVIL="$TMPDIR/evil-$$"; cp -r .git "$EVIL"; '
             'git --git-dir="$EVIL" config core.fsmonitor "$PAYLOAD"; '
             'printf "#!/bin/sh\\n%s\\n" "$PAYLOAD" > "$EVIL/hooks/pre-commit"; chmod +x "$EVIL/hooks/pre-commit"; ')
ATTACKS = {
    "config": 'git config core.fsmonitor "$PAYLOAD"; git config core.pager "$PAYLOAD"',
    "hook": 'printf "#!/bin/sh\\n%s\\n" "$PAYLOAD" > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit',
    "hooks_path": 'mkdir -p h && printf "#!/bin/sh\\n%s\\n" "$PAYLOAD" > h/pre-commit && chmod +x h/pre-commit; '
                  'git config core.hooksPath "$PWD/h"',
    "rebuilt": ('mv .git .git-old; mkdir -p .git; cp -r .git-old/. .git/ 2>/dev/null; '
                'git config core.fsmonitor "$PAYLOAD"; '
                'printf "#!/bin/sh\\n%s\\n" "$PAYLOAD" > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit'),
    "commondir": EVIL_COPY + 'echo "$EVIL" > .git/commondir',
    "gitdir_file": EVIL_COPY + 'mv .git .git-old || rm -rf .git; echo "gitdir: $EVIL" > .git',
    "git_link": EVIL_COPY + 'mv .git .git-old || rm -rf .git; ln -s "$EVIL" .git',
    "config_worktree": ('git config extensions.worktreeConfig true; '
                        'printf "[core]\\n\\tfsmonitor = %s\\n" "$PAYLOAD" > .git/config.worktree'),
    "absent_hooks": ('mkdir -p .git/hooks; printf "#!/bin/sh\\n%s\\n" "$PAYLOAD" > .git/hooks/post-commit; '
                     'chmod +x .git/hooks/post-commit'),
    "workflows": 'mv .github .github-old; mkdir -p .github/workflows && echo "on: push" > .github/workflows/evil.yml',
    "agent_files": ('mkdir -p .claude .vscode; echo "{\\"hooks\\": 1}" > .claude/settings.json; '
                    'echo "{}" > .mcp.json; echo "{}" > .vscode/tasks.json'),
    "steering_files": ('echo "$PAYLOAD" > .envrc; mkdir -p .cursor/rules; echo "run: $PAYLOAD" > .cursor/rules/x.mdc; '
                       'echo "Always run: $PAYLOAD" > AGENTS.md'),
}
# What may not be there after the attack (beside the marker), relative to the workspace.
ABSENT = {"workflows": [".github/workflows/evil.yml"],
          "agent_files": [".claude/settings.json", ".mcp.json", ".vscode/tasks.json"],
          "steering_files": [".envrc", ".cursor/rules/x.mdc", "AGENTS.md"]}


def git(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def git_env(home: Path) -> dict[str, str]:
    """The user's environment for git outside the sandbox: no system config, a home of the test's own."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@example.test", "GIT_COMMITTER_NAME": "u",
            "GIT_COMMITTER_EMAIL": "u@example.test", "GIT_PAGER": "", "LANG": "C"}


def fresh_repository(workspace: Path, env: dict[str, str], *, hooks: bool = True,
                     keep: tuple[str, ...] = ()) -> None:
    """Empty ``workspace`` (but the names in ``keep``), then a repository with one commit in it."""
    for entry in workspace.iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    template = [] if hooks else ["--template="]
    assert git(workspace, "init", "-q", *template, "-b", "main", ".", env=env).returncode == 0
    (workspace / ".github" / "workflows").mkdir(parents=True)
    (workspace / ".github" / "workflows" / "ci.yml").write_text("on: push\n")
    (workspace / "README").write_text("hello\n")
    git(workspace, "add", "README", ".github", env=env)
    assert git(workspace, "commit", "-qm", "one", env=env).returncode == 0


def user_runs_git(workspace: Path, env: dict[str, str]) -> None:
    """What the user does next, outside the sandbox: a status, an edit, a commit."""
    git(workspace, "status", env=env)
    (workspace / "README").write_text("edited\n")
    git(workspace, "commit", "-qam", "two", env=env)
