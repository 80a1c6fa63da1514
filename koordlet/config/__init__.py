"""koordlet's configuration: typed groups, the feature-gate table, loading from YAML and flags."""

from koordlet.config.load import add_flags, flags_from_args, load
from koordlet.config.types import Config, WorkloadConfig

__all__ = ["Config", "WorkloadConfig", "add_flags", "flags_from_args", "load"]
