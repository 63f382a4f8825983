"""Replay: a new memory version folded from the retained input log, on top of the fold pipeline.

- `replay`: `om replay`, a new version folded from the retained log beside the live one;
- `bulk` (and `bulk_fold`, one partition's fold through `omstream.pipeline`): a new settled
  version folded in `om replay`'s process, then handed over to its worker;
- `watch`: how far a version has folded, from the broker;
- `drop`: `om drop`, a version deleted.

It imports the pipeline, the version registry (`omstream.versions`) and the root's plumbing,
never the worker, and nothing but the CLI imports it (tests/unit/test_layout.py holds it to
that).  These modules start and delete things: nothing is imported here.
"""
