"""The cycles: the steps of a fold that emit events and model jobs (spec §6–§9).

May import `omstream.engine.step`, `state`, `ids`, `prompting/` and `rules/`; never `fold`
(which imports this room).

- `check`: what a step (or message) sets off, in order; `status`: the `data-om-status` marker it
  ends with.
- `observing` (blocking), `buffering` (background chunks), `activating`, `reflecting`,
  `extracting`: the cycles of one thread; `multi_observing` and `resource_extracting`: a resource
  memory's observation over several threads (spec §6.10); `thread_deletion`: one thread of a
  resource memory deleted; `working_memory`: the agent's write of the working-memory document.
- `jobs`: the model job a cycle sends; `results`: where its answer goes; `deadline`: the backstop
  for an answer that never comes.
"""
