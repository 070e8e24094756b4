"""What several built-in tools share: the agent base, pinning, process fields, the file target,
text edits, patches, diffs, search and globs."""
