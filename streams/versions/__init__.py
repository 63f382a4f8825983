"""Memory versions: one namespace, one input log, several memories folded from it.

A version is a name and a configuration (`omstream.topics` has how its topics are named):

- `registry`: the registry `<ns>.versions` (which versions exist, and the default readers
  serve), its records on the wire in `records`;
- `stats`: what each version's workers report (`stats.json`).

How a version is folded from the retained log, watched and dropped is `omstream.replay`.  The
registry imports neither the worker nor the replay; both read it.  Its names are exported here.
"""

from .records import DefaultVersion, VersionInfo
from .registry import Registry, forget, read_registry, register, set_default, version_info
from .stats import StatsSummary, WorkerStats, stats_path

__all__ = ["DefaultVersion", "Registry", "StatsSummary", "VersionInfo", "WorkerStats", "forget", "read_registry",
           "register", "set_default", "stats_path", "version_info"]
