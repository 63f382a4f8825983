"""What the read side shows, folded from `<ns>.events`: no I/O, no HTTP, no Kafka.

    context         the context-window projection: one view per thread, `apply_event`
    system_messages the window's system messages: instructions, observations as read, hints
    working_memory  how the working-memory document is shown (tool, read-only, state signal)
    chat            a window's messages in the OpenAI chat shape
    dates           the log's dates annotated relative to the window's "now"
    resource_views  resource scope: threads sharing one memory, the other-conversation blocks
    parts           an event as the AI SDK's data part (a frame of the feed)
    history         each memory's events, kept for the feed: replay from a `seq`, then live
    asof            a window as it was right after one of its memory's events
    activity        what each memory is doing now (the dashboard's figures)
"""
