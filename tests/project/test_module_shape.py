"""The shape of Peon's modules, read from the tree (no process, nothing imported but the test's own code).

* No import cycle among Peon's modules. Every import counts — top-level or inside a function, absolute or
  relative — except those under ``if TYPE_CHECKING:``, which never run.
* No ``_private`` name of one module is imported by another: a name another module needs is public, or the
  code that needs it moves.
* Every module starts with a docstring (what it promises and what it owns), and none is longer than
  :data:`MAX_LINES`, except the few in :data:`LONGER`, each with the reason it is one idea.
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers.tree import ROOT, modules

MAX_LINES = 700
# Modules allowed past MAX_LINES, and why each is still one idea.
LONGER: dict[str, str] = {}


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The line numbers of the statements under ``if TYPE_CHECKING:`` blocks."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for inner in node.body:
                lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


def _imports(name: str, path: Path) -> list[tuple[int, str, tuple[str, ...]]]:
    """Each import of ``path`` that runs: (line, the module named, the names taken from it)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skipped = _type_checking_only(tree)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: list[tuple[int, str, tuple[str, ...]]] = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.append((node.lineno, module, tuple(alias.name for alias in node.names)))
    return found


def _graph() -> dict[str, set[str]]:
    known = dict(modules())

    def module_of(dotted: str) -> str | None:
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in known:
                return ".".join(parts[:end])
        return None

    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        edges: set[str] = set()
        for _, module, taken in _imports(name, path):
            for dotted in (module, *(f"{module}.{item}" for item in taken)):
                target = module_of(dotted)
                if target is not None and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_peons_modules():
    assert _cycles(_graph()) == []


def test_no_private_name_is_imported_from_another_module():
    known = dict(modules())
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {item} from {module}"
             for name, path in known.items()
             for line, module, taken in _imports(name, path)
             if module in known and module != name
             for item in taken if item.startswith("_") and not item.startswith("__")]
    assert wrong == [], "\n".join(wrong)


def test_every_module_states_its_promise_and_stays_one_idea():
    missing = []
    too_long = []
    for name, path in modules():
        text = path.read_text(encoding="utf-8")
        if (path.name != "__init__.py" or text.strip()) and ast.get_docstring(ast.parse(text)) is None:
            missing.append(str(path.relative_to(ROOT)))
        if text.count("\n") > MAX_LINES and name not in LONGER:
            too_long.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
    assert missing == [], "modules without a docstring: " + ", ".join(missing)
    assert too_long == [], "\n".join(too_long)
