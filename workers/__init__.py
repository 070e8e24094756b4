"""Peon's workers: one process per tool call, and the process machinery they share.

Promise: a worker runs exactly one call. When it reports the call's result, no process the call
started is alive. A worker may crash; its supervisor survives that and cleans up after it.
"""
