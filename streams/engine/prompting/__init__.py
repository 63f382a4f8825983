"""What the models are shown and how their answers are read: prompts, transcripts, the
observation text's formats, parsing.

May import `rules/`, `omstream.engine.state` and `ids` (and `step` for annotations only); never
`cycles/`, `step` at run time, or `fold`.

- `prompts`: what the Observer and the Reflector are asked (`COMPRESSION_GUIDANCE` included);
  `answer_grammar`: the grammars a local model decodes its answers under.
- `transcript`: the messages as the Observer reads them; `truncation`: what it is shown of the
  previous observations; `observer_attachments`: the images and files it is sent; `window`: what
  one thread of a resource memory sees of the others (and how many tokens that is).
- `parsing`: how an answer is read; `thread_answers`: an answer about several threads;
  `observation_times`: an Observer's dates and times held to its messages.
- `observations`: the observation text (chunks and boundaries); `sections`: a resource memory's
  per-thread sections; `groups`, `resource_groups`: observation groups with retrieval on (spec §12).
"""
