"""The worker (`om worker`): the Faust agents around the fold pipeline (`omstream.pipeline`).

- `fold_loop`: the fold agent's batches, fold, send, store, ack, and why that order makes a
  crash harmless;
- `backlog`: the records the fold agent has read ahead, queued per memory;
- `model_agent`: every job answered once (`omstream.pipeline.answering`), acked in log order;
- `table`: the state table, changelog first, then the local RocksDB;
- `relay`: the intake relay, plain records of `<ns>.intake` sealed onto the log;
- `key_agreement`, `capability`: the result key agreed in the registry; whether the model
  takes attachments, asked of a child process;
- `faust_repairs`: Faust's consumer, topic and app, repaired where they lost records;
- `app`: `build_app`, which wires them into a Faust app.

It imports the pipeline, the version registry and the root's plumbing, never the replay.
Nothing is imported here, so the pipeline loads without Faust, aiokafka or RocksDB.
"""
