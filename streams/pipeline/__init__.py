"""The fold pipeline without Faust: what the worker (`omstream.worker`) and the bulk replay
(`omstream.replay`) both run around the pure engine.

- `folding`: one record folded, no I/O: limits (`omstream.limits`), decoding, dead letters, the
  fold itself;
- `sealed_fold`: the same with a namespace key: inputs opened, outputs and states sealed;
- `memories` (and `storage`, the records a state is laid out in): the memories' states, read
  and written as records of a key-value store;
- `sending`: what the agents send (`OutputRecord`, `Sender`), retried until the broker has it;
- `signing`: the result key, and the signature a model result carries;
- `answering`: one model job answered, from the cache or the model, always with a result;
- `cache`: the model-result cache `<ns>.cache`, the answers already paid for.

It imports the engine, the wire (`omstream.schemas`), `crypto`, `models`, the version registry's
records (`omstream.versions`) and the root's ground floor (`settings`, `limits`, `topics`, `kafka`),
never the worker nor the replay (tests/unit/test_layout.py holds it to that).  Nothing is imported here.
"""
