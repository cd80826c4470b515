"""Policies: what the gate does about a compaction, as YAML data (DESIGN §4, §8).

- :mod:`.schema` — the file format (validated by :mod:`proxy.yamlconf`, errors file:line),
- :mod:`.loader` — presets by name, files, ``extends``, compile to a frozen :class:`Policy`,
- :mod:`.model` — the compiled policy and its pure evaluations (scoping, regenerability,
  priorities, obligations),
- :mod:`.reload` — :class:`PolicyHolder`, hot reload on file change or SIGHUP that keeps
  the old policy when the new file is bad.
"""

from ..yamlconf import ConfigError
from .loader import (
    compile_policy,
    load_policy,
    load_policy_text,
    markers_path,
    preset_names,
    presets_dir,
)
from .model import Effective, Policy, RequestContext
from .reload import PolicyHolder, ReloadResult

__all__ = [
    "ConfigError",
    "Effective",
    "Policy",
    "PolicyHolder",
    "ReloadResult",
    "RequestContext",
    "compile_policy",
    "load_policy",
    "load_policy_text",
    "markers_path",
    "preset_names",
    "presets_dir",
]
