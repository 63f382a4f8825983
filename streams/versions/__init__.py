"""Memory versions: one namespace, one input log, several memories folded from it.

A version is a name and a configuration (`omstream.topics` has how its topics are named):

- `registry`: the registry `<ns>.versions` (which versions exist, and the default readers
  serve), its records on the wire in `records`;
- `stats`: what each version's workers report (`stats.json`);
- `watch`: how far a version has folded, from the broker;
- `replay`: `om replay`, a new version folded from the retained log beside the live one;
- `bulk` (and `bulk_fold`, one partition's fold): a new settled version folded in `om replay`'s
  process, then handed over to its worker;
- `drop`: `om drop`, a version deleted.

The registry's and the workers' names are exported here; `replay`, `bulk` and `drop` start and
delete things, and are imported from their modules.
"""

from .records import DefaultVersion, VersionInfo
from .registry import Registry, forget, read_registry, register, set_default, version_info
from .stats import StatsSummary, WorkerStats, stats_path

__all__ = ["DefaultVersion", "Registry", "StatsSummary", "VersionInfo", "WorkerStats", "forget", "read_registry",
           "register", "set_default", "stats_path", "version_info"]
