"""The read side on disk, in SQLite: a restart reads on from where it stopped.

    store           the read model's file: views, events, positions; its slots and their locks
    view_rows       a thread view as rows (a head, and one row per message)
    stored_history  the events kept in the store, as the feed's `EventHistory`
    sqlite          what every file of the read side shares: a slot locked per process, one
                    transaction per batch, deleted rows erased (the search index uses it too)
"""
