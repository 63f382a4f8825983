"""The pure OM engine: `fold(state, input, config) -> (state, events, jobs)`.

No clock, no randomness, no I/O: time is the inputs' event time, ids derive from the memory key
and sequence numbers (`ids`), and whatever the engine must know of the world (a model's
capabilities) is handed to it in its configuration (`step.EngineConfig`).  It imports only itself,
`omstream.schemas` and the standard library (not `os`), with pydantic, orjson, jsonschema, tiktoken
and xxhash for pure computation (tests/unit/test_layout.py and
tests/unit/engine/test_engine_purity.py hold it to that).

Four modules on top and three rooms, on floors: a module imports only from its own floor and
the floors below it (type-only imports, under `if TYPE_CHECKING:`, aside).

    fold        one input applied; messages accepted or refused; commands     (imports anything)
    cycles/     the steps that emit events and model jobs                    (step and below)
    step        what one fold call works with: EngineConfig, Step, Folded    (prompting and below)
    prompting/  what the models are shown and how their answers are read     (rules and below)
    rules/      numbers and decisions: thresholds, activation, reflection…   (state, ids)
    state, ids  the record kept; the ids a fold derives                      (nothing of the engine)

Where each decision is made.  A concept that is both a rule and a step of a cycle has two
modules: the rule, a function of numbers and records (`rules.activation`, `rules.extraction`,
`rules.reflection_plan`), and the step that applies it to a memory and emits its events
(`cycles.activating`, `cycles.extracting`, `cycles.reflecting`).  Each room's `__init__` maps it.
"""
