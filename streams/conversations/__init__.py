"""Conversations: a thread's input records as a file, folded without a broker, exported from the log.

- `files`: conversation files, JSON lines of input records (`om produce`, `om simulate`);
- `simulation`: `om simulate`, the real fold and model calls over a conversation file, no broker
  (`omstream.simulate`);
- `export`: `om export`, a thread's retained history in `<ns>.log` as a conversation file.

It imports the engine, `models`, `crypto` and the root's plumbing; the client reads its files,
the CLI runs it.  Nothing of the worker, the pipeline or the replay.  Nothing is imported here.
"""
