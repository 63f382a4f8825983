"""The worker (`om worker`): the fold agent and the model agent around the pure engine.

- `fold_loop`: the fold agent's batches, fold, send, store, ack, and why that order makes a
  crash harmless;
- `folding`: one batch folded, no I/O: limits, decoding, dead letters, the fold itself;
- `model_agent`: every job answered once, from the cache or the model, acked in log order;
- `table`: the state table, changelog first, then the local RocksDB;
- `sending`: what the agents send, retried until the broker has it;
- `faust_repairs`: Faust's consumer, topic and app, repaired where they lost records;
- `app`: `build_app`, which wires them into a Faust app.

Nothing is imported here, so the pure part (`folding`) loads without Faust, aiokafka or RocksDB.
"""
