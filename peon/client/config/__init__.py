"""The configuration a session runs with: its model, and the layers it is resolved from.

Promise: :func:`load_config` resolves the shipped defaults, the user's file, the project's file and
the caller's overrides into a :class:`LoadedConfig` whose :class:`PeonConfig` is always complete and
valid, or raises one :class:`~peon.core.errors.ConfigError` naming the layer, the key and what was
expected. Only the client loads this package (and pydantic with it); the supervisor and its workers
read the validated result through :mod:`peon.core.config_view`.

Modules: :mod:`~peon.client.config.model` (the tables and keys), :mod:`~peon.client.config.layers`
(finding, reading and merging the layers), :mod:`~peon.client.config.project` (what a project file
may only tighten), :mod:`~peon.client.config.messages` (validation and its sentences),
:mod:`~peon.client.config.tables` (plain tables: nesting bound, merging, dotted keys).
"""

from peon.client.config.layers import (
    MAX_CONFIG_FILE_BYTES, PROJECT_CONFIG, Layer, LayerKind, LoadedConfig, load_config, read_toml, shipped_defaults,
    user_config_path,
)
from peon.client.config.messages import describe_validation_error, validate
from peon.client.config.model import (
    MAX_ENVIRONMENT_BYTES, AgentCommand, Agents, Approval, ApprovalRule, Audit, Jobs, Limits, PeonConfig, Runtime,
    Sandbox, Skills, ToolsConfig,
)
from peon.client.config.project import project_floors, project_refusals
from peon.client.config.tables import MAX_CONFIG_DEPTH, check_nesting, dotted_keys, merge

__all__ = [
    "MAX_CONFIG_DEPTH", "MAX_CONFIG_FILE_BYTES", "MAX_ENVIRONMENT_BYTES", "PROJECT_CONFIG", "AgentCommand", "Agents",
    "Approval", "ApprovalRule", "Audit", "Jobs", "Layer", "LayerKind", "Limits", "LoadedConfig", "PeonConfig",
    "Runtime", "Sandbox", "Skills", "ToolsConfig", "check_nesting", "describe_validation_error", "dotted_keys",
    "load_config", "merge", "project_floors", "project_refusals", "read_toml", "shipped_defaults",
    "user_config_path", "validate",
]
