"""What the benchmarks share: how they hand figures to ``targets.py`` and time calls, the bare workers of
the design's floors, the no-op tool, and the MCP servers they start. Nothing here measures by itself."""
