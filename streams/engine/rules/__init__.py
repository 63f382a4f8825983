"""The rules: numbers and decisions, pure functions of numbers and records.

May import `omstream.engine.state` and `ids` (and `step` for annotations only); never
`prompting/`, `cycles/` or `fold`.

- `thresholds`: every threshold and derived token count; `resolution` turns the options into
  them (`ResolvedConfig`).
- `activation`: which buffered chunks become observations, and when; `reflection_plan`: when to
  reflect, what, and which answer to keep; `extraction`: what an extractor is and how its values
  are read and validated.
- `resource`: a resource memory's threads and which of them one observation covers.
- `tokens`, `attachments`: token counts (messages, images, files); `temporal`: when a time-gap
  marker is inserted, its wording and its id.
"""
