"""Bounding and cleaning command output: head+tail truncation, terminal text, the output store."""
