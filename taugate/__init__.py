"""taugate core: label keys, API models, workload kinds, cluster state, settings, CLI."""

__version__ = "0.1.0"
