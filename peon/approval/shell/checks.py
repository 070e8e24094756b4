"""The fail-closed checks that the grammar read a command line the way bash will.

Promise: where tree-sitter's reading and bash's may differ, the line is made opaque, never trusted:
text the grammar skipped between its tokens (:func:`check_coverage`), a here-document the grammar ends
on another line than bash (:func:`check_heredocs`), and a backslash-newline that joins two words into
one for bash (:func:`check_continuations`). Each check is one linear pass over the tree. Owns these
checks; what the tree means is :mod:`peon.approval.shell.walk`'s.
"""

from __future__ import annotations

import re
from typing import Any

from peon.approval.shell.grammar import descendants, node_text, preorder
from peon.approval.shell.result import one_line
from peon.approval.shell.state import State
from peon.approval.shell.words import heredoc_delimiter


_KEEPS_BACKSLASH_NEWLINE = frozenset({"raw_string", "heredoc_body", "comment", "ansi_c_string"})


def check_continuations(state: State, root: Any) -> None:
    """Bash removes backslash-newline before it splits words (``r\\<newline>m`` runs ``rm``); the grammar
    splits there. Between two non-blank characters outside quotes that keep it, the line is opaque.
    One walk of the tree in document order decides every place (linear, whatever the nesting)."""
    source = state.source
    joins = []
    position = source.find(b"\\\n")
    while position >= 0:
        before = source[position - 1:position] if position else b" "
        after = source[position + 2:position + 3] or b" "
        if before not in b" \t\n;&|" and after not in b" \t\n;&|":
            joins.append(position)
        position = source.find(b"\\\n", position + 2)
    if not joins:
        return
    # Innermost enclosing node of interest at each join: quotes that keep the backslash-newline as
    # text (or remove it within one word), substitutions that start a new command line.
    stack: list[tuple[int, bool]] = []  # (end byte, keeps)
    pending = iter(joins)
    join = next(pending, None)
    for node in preorder(root, _KEEPS_BACKSLASH_NEWLINE):
        while join is not None and join < node.start_byte:  # every node before it has been seen
            if _joins_a_word(state, stack, join):
                return
            join = next(pending, None)
        if join is None:
            return
        kind = node.type
        if kind in _KEEPS_BACKSLASH_NEWLINE or kind == "string":
            while stack and stack[-1][0] <= node.start_byte:
                stack.pop()
            stack.append((node.end_byte, True))
        elif kind in ("command_substitution", "process_substitution"):
            while stack and stack[-1][0] <= node.start_byte:
                stack.pop()
            stack.append((node.end_byte, False))
    while join is not None:  # after the last node
        if _joins_a_word(state, stack, join):
            return
        join = next(pending, None)


def _joins_a_word(state: State, stack: list[tuple[int, bool]], join: int) -> bool:
    """Whether the backslash-newline at ``join`` joins a word (the line is then made opaque): it does unless the
    innermost node still open there (``stack``: end byte, keeps) keeps it as text."""
    while stack and stack[-1][0] <= join:
        stack.pop()
    if stack and stack[-1][1]:
        return False
    state.add_opaque("a line continuation joins a word bash reads as one (a backslash-newline)")
    return True


_COVERING = frozenset({"heredoc_body", "string", "translated_string"})  # their text is theirs, children or not
_SEPARATORS = re.compile(rb"(?:[ \t\n]|\\\n)*")


def check_coverage(state: State, root: Any) -> None:
    """Every byte between the grammar's tokens must be a blank or a line continuation: text the grammar
    skipped (it drops a leading escaped blank, which bash keeps) is text whose meaning Peon did not see."""
    source = state.source
    position = 0
    for node in preorder(root, _COVERING):
        if (node.child_count and node.type not in _COVERING) or node.type == "program":
            continue  # only a token, or a node whose text is all its own, covers bytes
        start = node.start_byte
        if start > position and not _SEPARATORS.fullmatch(source, position, start):
            gap = source[position:start].decode("utf-8", "replace")
            state.add_opaque(f"the grammar skipped text it did not understand ({one_line(gap)!r})")
            return
        position = max(position, node.end_byte)
    if position < len(source) and not _SEPARATORS.fullmatch(source, position, len(source)):
        state.add_opaque("the grammar skipped text at the end of the command")


def check_heredocs(state: State, root: Any) -> None:
    """Bash ends a here-document at the first line equal to its delimiter; if the grammar ended it
    anywhere else, commands could hide in (or out of) the body, so the command is opaque."""
    lines = state.source.split(b"\n")
    offsets = []
    position = 0
    for line in lines:
        offsets.append(position)
        position += len(line) + 1
    for node in descendants(root):
        if node.type != "heredoc_redirect":
            continue
        start = next((c for c in node.children if c.type == "heredoc_start"), None)
        end = next((c for c in node.children if c.type == "heredoc_end"), None)
        strip_tabs = any(node_text(c) == "<<-" for c in node.children if not c.is_named)
        if start is None or end is None:
            state.add_opaque("a here-document has no end line")
            continue
        delimiter = heredoc_delimiter(node_text(start))
        if delimiter is None:
            state.add_opaque("a here-document's delimiter is computed at run time")
            continue
        body = next((c for c in node.children if c.type == "heredoc_body"), None)
        first_line = (body.start_point[0] if body is not None else end.start_point[0])
        end_line = end.start_point[0]
        for number in range(first_line, end_line + 1):
            line = lines[number] if number < len(lines) else b""
            if strip_tabs:
                line = line.lstrip(b"\t")
            if line == delimiter.encode("utf-8", "surrogatepass"):
                if number != end_line:
                    state.add_opaque("a here-document ends earlier than the grammar says")
                break
        else:
            state.add_opaque("a here-document's end line does not match its delimiter")
