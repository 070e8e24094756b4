"""Agent clients (Claude Code, Codex, Cursor, VS Code): registering ``peon mcp`` with each, in place of its own tools.

Importing this package loads nothing: ``peon setup`` and ``peon doctor`` import :mod:`.registry` when they
run, so no other command pays for the clients' modules or the TOML library. :mod:`.base` holds the
vocabulary, :mod:`.files` the editing of configuration files, and one module per client what Peon knows of
that client's files.
"""
