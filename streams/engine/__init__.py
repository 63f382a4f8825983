"""The pure OM engine: `fold(state, input, config) -> (state, events, jobs)`.

No clock, no randomness, no I/O: time is the inputs' event time, ids derive from the memory key
and sequence numbers (`ids`), and whatever the engine must know of the world (a model's
capabilities) is handed to it in its configuration (`step.EngineConfig`).  It imports only itself,
`omstream.schemas` and the standard library, with pydantic, orjson, jsonschema and tiktoken for
pure computation (tests/unit/test_layout.py and tests/unit/engine/test_engine_purity.py hold
it to that).

Where each decision is made.  A concept that is both a rule and a step of a cycle has two
modules: the rule, a function of numbers and records (`activation`, `extraction`,
`reflection_plan`), and the step that applies it to a memory and emits its events
(`activating`, `extracting`, `reflecting`).

- `fold`: one input applied; messages accepted or refused; commands.
- `check`: what a step (or message) sets off, in order; `status`: the marker it ends with.
- `thresholds`: every threshold and derived token count (`resolution` turns the options into them).
- `observing` (blocking), `buffering` (background chunks), `activating`/`activation`,
  `reflecting`/`reflection_plan`, `extracting`/`extraction`: the cycles.
- `jobs`: the model job a cycle sends; `results`: where its answer goes; `deadline`: the backstop.
- `prompts`, `transcript`, `truncation`, `observer_attachments`: what the models are shown;
  `parsing`: how their answers are read; `observation_times`: an Observer's dates and times held
  to its messages; `observations`: the observation text; `groups`: its
  observation groups with retrieval on (spec §12).
- `tokens`, `attachments`: token counts; `temporal`: time-gap markers; `state`: the record kept.
"""
