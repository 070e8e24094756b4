"""Walking the syntax tree of a command line into the simple commands bash could run.

Promise: :func:`analyze` is pure (no I/O, no clock) and total: any string gives a
:class:`~peon.approval.shell.result.ShellAnalysis`, never an exception, in work bounded by the line's
length (at most :data:`MAX_COMMAND_BYTES` are parsed, :data:`MAX_SEGMENTS` simple commands and
:data:`MAX_SYNTAX_DEPTH` levels of nesting are followed; past any bound the line is opaque). Every node of
the tree is either understood — lists, pipelines, subshells, groups, loops, conditionals, function
bodies, substitutions, redirections, assignments, here-documents — or makes the line opaque. Owns the
walk over the syntax; what one simple command runs is :mod:`peon.approval.shell.commands`'s.
"""

from __future__ import annotations

from typing import Any

from peon.approval.shell.checks import check_continuations, check_coverage, check_heredocs
from peon.approval.shell.commands import SUBSCRIPTED_NAME, add_segment, check_assignment, check_name_builtin
from peon.approval.shell.grammar import descendants, first_error, node_text, parse_tree
from peon.approval.shell.result import Redirect, Segment, ShellAnalysis, Write, one_line
from peon.approval.shell.state import State
from peon.approval.shell.words import joined_words, literal, written_words

MAX_SEGMENTS = 500  # a command line with more simple commands than this is opaque (bounded work)
MAX_COMMAND_BYTES = 256 * 1024  # longer command lines are not parsed at all: opaque
MAX_SYNTAX_DEPTH = 100  # substitutions, subshells and groups nested deeper than this are opaque

_WRITE_OPERATORS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&", "&>|"})
_ARITHMETIC_TEST = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_TRANSPARENT = frozenset({"program", "list", "pipeline", "negated_command", "subshell", "compound_statement",
                          "do_group", "if_statement", "elif_clause", "else_clause", "while_statement",
                          "case_statement", "case_item", "for_statement", "comment"})
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_WORDS = frozenset({"word", "number", "string", "raw_string", "ansi_c_string", "translated_string",
                    "concatenation", "simple_expansion", "expansion", "command_substitution",
                    "process_substitution", "arithmetic_expansion", "brace_expression", "extglob_pattern",
                    "array", "regex", "test_operator", "special_variable_name", "variable_name"})


def analyze(command: str) -> ShellAnalysis:
    """Every simple command ``command`` may run, what cannot be seen, and where it writes. Each call
    parses the line anew: a caller that needs the analysis twice keeps it (one ``bash`` call is analysed
    once, by the tool's ``prepare``, and the policy reads that analysis)."""
    state = State(command.encode("utf-8", "surrogatepass"), _analyze_into)
    try:
        _analyze_into(state, command, origin="")
    except RecursionError:  # MAX_SYNTAX_DEPTH keeps the walk far from the limit; this is the last net
        state.add_opaque("the command is nested too deeply to analyse")
    return ShellAnalysis(tuple(state.segments), tuple(state.opaque), tuple(state.dynamic), tuple(state.writes),
                         command)


def _analyze_into(state: State, command: str, origin: str) -> None:
    if "\0" in command:
        state.add_opaque("the command contains a NUL byte")
        return
    if len(command) > MAX_COMMAND_BYTES:
        state.add_opaque(f"the command is longer than {MAX_COMMAND_BYTES} characters")
        return
    tree = parse_tree(command)
    if tree is None:
        state.add_opaque("the command could not be parsed within the analysis budget")
        return
    root = tree.root_node
    if root.has_error:
        state.add_opaque(f"the command could not be parsed as bash ({first_error(root)})")
        return
    saved = state.source
    state.source = command.encode("utf-8", "surrogatepass")
    try:
        check_coverage(state, root)
        if b"<<" in state.source:
            check_heredocs(state, root)
        if b"\\\n" in state.source:
            check_continuations(state, root)
        _visit(state, root, origin)
    finally:
        state.source = saved


def _snippet(state: State, node: Any, limit: int = 300) -> str:
    """The start of a node's text, copied in bounded time (a node may span the whole line)."""
    end = min(node.end_byte, node.start_byte + limit)
    return state.source[node.start_byte:end].decode("utf-8", "surrogateescape")


def _visit(state: State, node: Any, origin: str) -> None:
    if len(state.segments) > MAX_SEGMENTS:
        state.add_opaque(f"the command has more than {MAX_SEGMENTS} simple commands")
        return
    if not node.is_named:
        return  # keywords and operators: ;, &&, |, then, done...
    if not state.step():
        return
    if state.nesting >= MAX_SYNTAX_DEPTH:
        state.add_opaque(f"the command nests more than {MAX_SYNTAX_DEPTH} levels deep")
        return
    state.nesting += 1
    try:
        _visit_node(state, node, origin)
    finally:
        state.nesting -= 1


def _flattened(node: Any) -> list[Any]:
    """The operands of a chain of ``&&``/``||`` (the grammar nests it to the left, one level per
    operator), without recursion."""
    out: list[Any] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == "list":
            stack.extend(reversed(current.children))
        else:
            out.append(current)
    return out


def _visit_node(state: State, node: Any, origin: str) -> None:
    kind = node.type
    if kind == "compound_statement" and node.children and node.children[0].type == "((":
        state.add_opaque("it evaluates arithmetic (which can run substitutions hidden in variables)")
    elif kind == "list":
        for child in _flattened(node):
            _visit(state, child, origin)
    elif kind in _TRANSPARENT:
        for child in node.children:
            _visit(state, child, origin)
    elif kind == "command":
        _command(state, node, origin, ())
    elif kind == "redirected_statement":
        body = node.child_by_field_name("body")
        redirects = [child for child in node.children if child.type in _REDIRECTS]
        for child in node.children:
            if child.is_named and child.type not in _REDIRECTS and child != body:
                _visit(state, child, origin)
        _redirected(state, body, redirects, origin)
    elif kind in _REDIRECTS:
        for redirect, extra in _redirects(state, node, origin):
            if extra:
                state.add_opaque("words after a redirection outside a command")
            _record_write(state, redirect)
    elif kind == "heredoc_body":
        _words(state, node, origin)
    elif kind in ("variable_assignment", "variable_assignments"):
        for name in _assigned_names(node):
            state.add_dynamic(f"it assigns the shell variable {name} (which can change what later commands run)")
        _assignments(state, node, origin)
        _words(state, node, origin)
    elif kind in ("declaration_command", "unset_command"):
        words = [child for child in node.children if child.type != "variable_assignment"]
        state.add_dynamic(f"it runs {node_text(node.children[0])}, which changes shell variables or functions")
        _assignments(state, node, origin)
        _words(state, node, origin)
        literal_words = tuple(literal(w) if w.is_named else node_text(w) for w in words)
        check_name_builtin(state, literal_words)
        state.segments.append(Segment(literal_words, _snippet(state, node), origin=origin, cwds=tuple(state.cwds),
                                      notes=("it changes shell variables or functions",)))
    elif kind == "function_definition":
        name = node.child_by_field_name("name")
        state.add_dynamic(f"it defines the shell function {node_text(name) if name else '?'}")
        body = node.child_by_field_name("body")
        if body is not None:
            _visit(state, body, "function body")
    elif kind == "test_command":
        _test(state, node, origin)
    elif kind == "c_style_for_statement" or kind == "arithmetic_expansion":
        state.add_opaque("it evaluates arithmetic (which can run substitutions hidden in variables)")
    elif kind in _WORDS:
        _words(state, node, origin)
    elif kind in ("heredoc_start", "heredoc_end", "heredoc_content", "file_descriptor"):
        return
    else:
        state.add_opaque(f"it uses shell syntax Peon does not analyse ({kind})")


def _redirected(state: State, body: Any, redirect_nodes: list[Any], origin: str) -> None:
    """Redirections written after a statement. Bash binds them to the last simple command (``cd a &&
    make > f`` redirects ``make``), which the grammar attaches to the whole list or pipeline."""
    if body is not None and body.type == "command":
        _command(state, body, origin, redirect_nodes)
        return
    if body is not None and body.type in ("list", "pipeline"):
        named = [child for child in body.children if child.is_named and child.type != "comment"]
        last = named[-1] if named else None
        for child in body.children:
            if child != last:
                _visit(state, child, origin)
        _redirected(state, last, redirect_nodes, origin)
        return
    if body is not None:
        _visit(state, body, origin)
    for child in redirect_nodes:
        for redirect, extra in _redirects(state, child, origin):
            if extra:
                state.add_opaque("words after a redirection of a compound command")
            _record_write(state, redirect)


def _assignments(state: State, node: Any, origin: str) -> None:
    """Assignments in ``node`` (itself, or its direct children) of variables whose value runs as code."""
    if node.type == "variable_assignment":
        found = [node]
    else:
        found = [child for child in node.children if child.type == "variable_assignment"]
    for item in found:
        name = item.child_by_field_name("name")
        value = item.child_by_field_name("value")
        appends = any(node_text(c) == "+=" for c in item.children if not c.is_named)
        if name is not None:
            check_assignment(state, node_text(name), None if value is None or appends else literal(value), origin,
                      empty=value is None)


def _assigned_names(node: Any) -> list[str]:
    found = node.children if node.type == "variable_assignments" else [node]
    names = []
    for item in found:
        name = item.child_by_field_name("name")
        if name is not None:
            names.append(node_text(name))
    return names


def _test(state: State, node: Any, origin: str) -> None:
    if _snippet(state, node, 2) == "((":
        state.add_opaque("it evaluates arithmetic (which can run substitutions hidden in variables)")
        return
    names_variable = False
    subscripted = False
    for child in descendants(node):
        if not state.step():
            return
        if child.type == "test_operator":
            operator = node_text(child)
            names_variable = names_variable or operator in ("-v", "-R")
            if operator in _ARITHMETIC_TEST and _snippet(state, node, 2) == "[[":
                state.add_opaque("[[ ... -eq ... ]] evaluates arithmetic (which can run substitutions)")
        elif child.type in ("word", "raw_string", "string", "concatenation", "ansi_c_string"):
            value = literal(child)
            subscripted = subscripted or (value is not None and SUBSCRIPTED_NAME.match(value) is not None)
    if names_variable and subscripted:
        state.add_opaque("-v evaluates the subscript of a variable name as arithmetic (which can run commands)")
    _words(state, node, origin)


def _words(state: State, node: Any, origin: str) -> None:
    """Substitutions, arithmetic and subscripts anywhere inside a word-like node."""
    stack = list(node.children)
    while stack:
        child = stack.pop()
        if not state.step():
            return
        if child.type in ("command_substitution", "process_substitution"):
            what = "command substitution" if child.type == "command_substitution" else "process substitution"
            state.add_dynamic(f"it uses {what} ({one_line(_snippet(state, child, 80))})")
            for inner in child.children:
                _visit(state, inner, what)
        elif child.type == "arithmetic_expansion":
            state.add_opaque("it evaluates arithmetic (which can run substitutions hidden in variables)")
        elif child.type == "subscript":
            state.add_opaque("it uses an array subscript (evaluated as arithmetic)")
        elif child.type == "expansion":
            reason = _arithmetic_in_expansion(child) or _indirect_expansion(state, child)
            if reason:
                state.add_opaque(reason)
            stack.extend(child.children)
        else:
            stack.extend(child.children)


def _indirect_expansion(state: State, node: Any) -> str | None:
    """``${!x}`` expands the variable x names, and a name with a subscript (``a[$(cmd)]``) is evaluated
    as arithmetic; listing names or keys (``${!p*}``, ``${!a[@]}``) evaluates nothing."""
    text = _snippet(state, node, 8)
    if not text.startswith("${!"):
        return None
    whole = node_text(node) if node.end_byte - node.start_byte < 200 else ""
    if whole.endswith(("[@]}", "[*]}", "*}", "@}")):
        return None
    return "${!name} expands a variable named at run time (a subscript in it is evaluated as arithmetic)"


def _arithmetic_in_expansion(node: Any) -> str | None:
    """``${x@P}`` expands a prompt string (running its substitutions); ``${x:offset}`` and ``${x[i]}``
    evaluate arithmetic, which runs substitutions hidden in a variable's value."""
    children = node.children
    for index, child in enumerate(children):
        following = children[index + 1] if index + 1 < len(children) else None
        if child.type == "@" and following is not None and node_text(following) == "P":
            return "${...@P} expands a prompt string, which can run substitutions"
        if child.type == ":" and following is not None and following.is_named and following.type != "number":
            return "${...:offset} evaluates arithmetic (which can run substitutions hidden in variables)"
    return None


def _redirects(state: State, node: Any, origin: str) -> list[tuple[Redirect, list[Any]]]:
    """The redirections in a redirect node (a here-document's line may carry more), each with the
    words the grammar attached after its target (``cmd >f arg``: ``arg`` is the command's argument)."""
    kind = node.type
    if kind == "heredoc_redirect":
        found: list[tuple[Redirect, list[Any]]] = [(Redirect("<<", None, False), [])]
        for child in node.children:
            if child.type in _REDIRECTS:
                found.extend(_redirects(state, child, origin))
            elif child.type == "heredoc_body":
                _words(state, _Holder(child), origin)
        return found
    _words(state, node, origin)
    if kind == "herestring_redirect":
        return [(Redirect("<<<", None, False), [])]
    operator = next((node_text(child) for child in node.children if not child.is_named), "")
    destinations = [node.children[i] for i in range(len(node.children))
                    if node.field_name_for_child(i) == "destination"]
    if not destinations:
        return [(Redirect(operator, None, operator in _WRITE_OPERATORS), [])]
    target = literal(destinations[0])
    duplicate = operator in (">&", "<&") and target is not None and (target.isdigit() or target == "-")
    writes = operator in _WRITE_OPERATORS and not duplicate
    return [(Redirect(operator, target, writes), destinations[1:])]


def _record_write(state: State, redirect: Redirect) -> None:
    if redirect.writes:
        state.writes.append(Write(redirect.target, tuple(state.cwds)))


def _command(state: State, node: Any, origin: str, outer_redirects: Any) -> None:
    """A ``command`` node; ``outer_redirects`` are those written after it (``cmd > f``)."""
    assignments: list[str] = []
    word_nodes: list[Any] = []
    redirects: list[Redirect] = []
    redirect_nodes = []
    for index, child in enumerate(node.children):
        field_name = node.field_name_for_child(index)
        if child.type == "variable_assignment":
            assignments.extend(_assigned_names(child))
            _assignments(state, child, origin)
            _words(state, child, origin)
        elif child.type == "command_name":
            word_nodes.extend(child.named_children)
        elif child.type in _REDIRECTS:
            redirect_nodes.append(child)
        elif field_name == "argument" or child.type in _WORDS:
            word_nodes.append(child)
        elif child.is_named and child.type != "comment":
            state.add_opaque(f"it uses shell syntax Peon does not analyse ({child.type})")
    for child in [*redirect_nodes, *outer_redirects]:
        for redirect, extra in _redirects(state, child, origin):
            redirects.append(redirect)
            _record_write(state, redirect)
            word_nodes.extend(extra)  # bash: `rm >/dev/null -rf x` runs `rm -rf x`
    word_nodes.sort(key=lambda w: w.start_byte)
    for word in word_nodes:
        _words(state, _Holder(word), origin)
    words = tuple(joined_words(word_nodes))
    add_segment(state, words, _snippet(state, node), tuple(assignments), tuple(redirects), origin,
                written=tuple(written_words(word_nodes)))


class _Holder:
    """Lets :func:`_words` look at a node itself, not only at its children."""

    def __init__(self, node: Any):
        self.children = [node]
