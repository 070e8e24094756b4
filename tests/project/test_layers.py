"""The layers, as the tree shows them: imports point down, folder by folder.

``peon/core`` is what every process may import (the tool contract and its vocabulary); ``peon/approval`` the
pure approval decision; ``workers/`` the worker and process machinery, which depends only on the contract;
``peon/tools`` the built-in tools, prepared in the supervisor and run in workers; ``supervisor/`` the
supervisor process, which nothing else imports (the session starts it as a process); ``peon/client`` the
embedding process; ``peon/mcp``, ``peon/serve`` and ``peon/cli`` the front ends. :data:`MAY_IMPORT` states
which folder may import which; only ``peon/client`` imports pydantic. The static checks read every module's
imports (top-level and inside functions, relative ones resolved); the dynamic check imports what a worker
and the forkserver load and looks at ``sys.modules``: the worker side must stay lean.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import peon
from helpers.tree import ROOT, layer_of, module_name, modules

# Which of Peon's folders each folder may import besides itself ("peon": the top package's own modules —
# the public names, the approvers, telemetry).
MAY_IMPORT: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "approval": frozenset({"core"}),
    "workers": frozenset({"core"}),
    "checkpoints": frozenset({"core"}),
    "tools": frozenset({"core", "approval", "workers", "checkpoints"}),
    "supervisor": frozenset({"core", "approval", "tools", "workers", "checkpoints"}),
    "client": frozenset({"peon", "core", "approval", "workers", "mcp", "checkpoints"}),
    "mcp": frozenset({"peon", "core", "approval", "client"}),
    "serve": frozenset({"peon", "core", "client", "mcp", "cli"}),
    "cli": frozenset({"peon", "core", "approval", "client", "mcp", "serve", "tools", "workers", "checkpoints"}),
    "peon": frozenset({"core", "client"}),
}
# Only the client validates the configuration model: nothing else imports pydantic.
PYDANTIC_USERS = frozenset({"client"})

# Loaded by none of the worker-side modules: heavy validation libraries, the configuration loader, and
# every module of the supervisor.
HEAVY_ROOTS = ("pydantic", "pydantic_core", "jsonschema")
HEAVY_PACKAGES = ("peon.supervisor",)
HEAVY_MODULES = ("peon.client.config", "peon.approval.validation")


def imports_of(name: str, path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports (``from a import b`` counts as ``a`` and ``a.b``), with line numbers,
    plus literal names passed to ``importlib.import_module``/``__import__``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names if alias.name != "*"]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def test_every_package_module_is_seen():
    names = {name for name, _ in modules()}
    assert {"peon.core.tool", "peon.workers.worker", "peon.workers.forkserver", "peon.supervisor.service"} <= names


def folder_of(module: str) -> str | None:
    """The folder a module of Peon's belongs to (``core``, ``supervisor``, …; ``peon`` for the top package's
    own modules), or None for a module that is not Peon's."""
    parts = module.split(".")
    if parts[0] != "peon":
        return None
    if len(parts) > 1 and parts[1] in MAY_IMPORT:
        return parts[1]
    return "peon"


def test_every_folder_has_a_rule():
    folders = {folder_of(name) for name, _ in modules()}
    assert folders == set(MAY_IMPORT), folders ^ set(MAY_IMPORT)


def test_nothing_imports_the_supervisor():
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for name, path in modules() if layer_of(name) != "supervisor"
             for line, module in imports_of(name, path) if layer_of(module) == "supervisor"]
    assert wrong == [], "\n".join(wrong)


def test_each_folder_imports_only_the_folders_beneath_it():
    wrong = []
    for name, path in modules():
        here = folder_of(name)
        assert here is not None
        for line, module in imports_of(name, path):
            there = folder_of(module)
            if there is None or there == here or module == "peon":
                continue
            if there not in MAY_IMPORT[here]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({here}) imports {module} ({there})")
    assert wrong == [], "\n".join(wrong)


def test_only_the_client_imports_pydantic():
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for name, path in modules() if folder_of(name) not in PYDANTIC_USERS
             for line, module in imports_of(name, path) if module.split(".")[0] in ("pydantic", "pydantic_core")]
    assert wrong == [], "\n".join(wrong)


def worker_side_modules() -> list[str]:
    tools = sorted(module_name(p) for p in (ROOT / "peon" / "tools").rglob("*.py"))
    return ["peon.workers.forkserver", "peon.workers.worker", *tools]


@pytest.mark.parametrize("module", worker_side_modules())
def test_worker_side_imports_stay_lean(module):
    probe = ("import importlib, json, sys\n"
             f"importlib.import_module({module!r})\n"
             "print(json.dumps(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, f"importing {module} failed:\n{proc.stderr}"
    loaded = json.loads(proc.stdout)
    heavy = [m for m in loaded if layer_of(m) in HEAVY_ROOTS or m in HEAVY_MODULES
             or any(m == h or m.startswith(h + ".") for h in HEAVY_PACKAGES)]
    assert heavy == [], f"importing {module} loads {heavy}"


def test_public_names_are_typed_and_lazy():
    """Every name in ``peon.__all__`` is imported for type checkers (its real type, not ``Any``) and
    resolves at run time to that same object, and ``import peon`` alone loads none of them."""
    init = ROOT / "peon" / "__init__.py"
    tree = ast.parse(init.read_text(encoding="utf-8"))
    typed: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                for alias in imp.names:
                    assert alias.asname == alias.name, f"{alias.name} must be re-exported as itself"
                    typed[alias.name] = f"peon.{imp.module}" if imp.module else f"peon.{alias.name}"
    probe = ("import json, sys, peon\n"
             "before = sorted(m for m in sys.modules if m.startswith('peon.'))\n"
             "where = {n: getattr(getattr(peon, n), '__module__', None) or getattr(peon, n).__name__\n"
             "         for n in peon.__all__}\n"
             "print(json.dumps({'all': peon.__all__, 'before': before, 'where': where}))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert sorted(facts["all"]) == sorted(typed)
    assert facts["before"] == []
    assert facts["where"] == typed
    assert (ROOT / "peon" / "py.typed").is_file()


def test_a_client_and_an_opening_supervisor_do_without_the_schema_validator(tmp_path):
    """``jsonschema`` (tens of milliseconds to import) is loaded by a supervisor only after it answered
    ``ready``, and never by a client, which checks only an input's depth."""
    probe = ("import json, sys, peon\n"
             f"with peon.Session({str(tmp_path)!r}, state_dir={str(tmp_path / 'state')!r}) as session:\n"
             "    session.call('bash', {'command': 'true'})\n"
             "    session.call('bash', {})\n"
             "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'jsonschema')))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
    opening = ("import sys, peon.supervisor.service\n"
               "print(sorted(m for m in sys.modules if m.split('.')[0] == 'jsonschema'))\n")
    proc = subprocess.run([sys.executable, "-P", "-c", opening], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_a_supervisor_loads_jsonschema_only_for_an_input_its_compiled_check_refuses(tmp_path):
    """Built-in tools have compiled fast checks: valid inputs never need ``jsonschema`` (about 6.5 MiB
    of the supervisor's memory, seen here by its compiled ``rpds`` in the supervisor's maps); the first
    input the fast check refuses loads it, and the error is ``jsonschema``'s."""
    def supervisor_has_jsonschema(pid: int) -> bool:
        return "/rpds/" in Path(f"/proc/{pid}/maps").read_text()

    with peon.Session(tmp_path, state_dir=tmp_path / "state") as session:
        pid = session.info["pid"]
        (tmp_path / "a.txt").write_text("a\n")
        assert session.call("read", {"path": "a.txt"}).ok
        session.call("bash", {"command": "true"})
        assert not supervisor_has_jsonschema(pid)
        refused = session.call("read", {"path": "a.txt", "offset": "one"})
        assert refused.error is not None and refused.error.code == "invalid_input"
        assert refused.error.details["rule"] == "type" and refused.error.details["pointer"] == "/offset"
        assert supervisor_has_jsonschema(pid)


def test_what_a_client_loads_before_it_starts_its_supervisor():
    """``Session()`` starts the supervisor first and only then loads the configuration code: everything
    ``peon.client.session`` imports delays that start, so it loads no event loop, policy or validation library."""
    probe = ("import json, sys, peon.client.session\n"
             "print(json.dumps(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    too_early = set(json.loads(proc.stdout)) & {"asyncio", "peon.approval.policy", "peon.client.config", "pydantic",
                                                 "jsonschema"}
    assert too_early == set(), sorted(too_early)
