"""The tree-sitter grammar of bash, and the syntax tree it reads a command line into.

Promise: :func:`parse_tree` is bounded: it gives the grammar a budget of input reads proportional to the
line's length (its error recovery is quadratic on some malformed lines) and returns None once the budget
is spent, never a tree that took longer. ``tree_sitter`` is imported on the first parse only, so nothing
that merely imports Peon's approval code (a worker, the forkserver) loads it. docs/approval.md says why
this grammar was chosen over bashlex. Owns the parser and the small readers of its nodes.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any


@functools.lru_cache(maxsize=1)
def _parser() -> Any:
    import tree_sitter  # imported here: only the supervisor analyses commands, workers never load it
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


PARSE_CHUNK = 512
PARSE_READS_PER_CHUNK = 8  # a well-formed line is read about once; error recovery re-reads without end


def parse_tree(command: str) -> Any:
    """The syntax tree, or None when the grammar needed more than its budget of input reads (its
    error recovery on some malformed lines is quadratic: 120 kB of ``)(`` would take ~45 s)."""
    source = command.encode("utf-8", "surrogatepass")
    budget = PARSE_READS_PER_CHUNK * (len(source) // PARSE_CHUNK + 1) + 64
    reads = 0
    spent = False

    def read(offset: int, _point: Any) -> bytes:
        nonlocal reads, spent
        reads += 1
        if reads > budget:
            spent = True
            return b""
        return source[offset:offset + PARSE_CHUNK]

    parser = _parser()
    parser.parse(read)
    if spent:
        return None
    # Parsed again from the bytes: a tree parsed from a reader reads node texts through it, slowly.
    return parser.parse(source)


def first_error(node: Any) -> str:
    """Where the first syntax error of a tree is, in words (line and column, 1-based)."""
    for child in descendants(node):
        if child.type == "ERROR" or child.is_missing:
            line, column = child.start_point
            what = f"missing {child.type!r}" if child.is_missing else "unexpected text"
            return f"{what} at line {line + 1}, column {column + 1}"
    return "syntax error"


def descendants(node: Any) -> Iterator[Any]:
    """Every node below ``node`` (itself first), in document order, without recursion."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def preorder(root: Any, leaves: frozenset[str] = frozenset()) -> Iterator[Any]:
    """The nodes of a tree in document order, each as it is entered, never below a node of a kind in
    ``leaves``; with one tree cursor (linear, and no recursion whatever the nesting)."""
    cursor = root.walk()
    entering = True
    while True:
        node = cursor.node
        if entering:
            yield node
            if node.child_count and node.type not in leaves and cursor.goto_first_child():
                continue
        if cursor.goto_next_sibling():
            entering = True
            continue
        if not cursor.goto_parent():
            return
        entering = False


def node_text(node: Any) -> str:
    """A node's source text (bytes that are not UTF-8 kept as surrogate escapes)."""
    text: bytes = node.text
    return text.decode("utf-8", "surrogateescape")
