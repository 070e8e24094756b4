"""The risk levels of a call: the closed set every approval decision is made on.

Kept apart from the tool contract (:mod:`peon.core.tool`, which re-exports both names) so that a front end
can name the risks — ``peon mcp --allow RISK`` — without loading the contract: ``peon mcp`` parses its
options and launches its supervisor before it imports anything else (:mod:`peon.client.spawn`).
"""

from __future__ import annotations

from enum import Enum


class ToolRisk(str, Enum):
    """Stable risk values, from least to most dangerous."""

    READ_ONLY = "read_only"
    FILESYSTEM = "filesystem"
    PROCESS = "process"
    DELEGATE = "delegate"


RISK_NAMES: tuple[str, ...] = tuple(risk.value for risk in ToolRisk)  # the risk names, least dangerous first
