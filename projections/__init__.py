"""The read side: what `om serve` answers, folded from `<ns>.events` alone.

Five modules on top and five rooms, on floors: a module imports only from its own floor and the
floors below it (type-only imports, under `if TYPE_CHECKING:`, aside).

    serve, openapi  `om serve` (the feeds and the HTTP server); the OpenAPI document  (anything)
    http/           the routes, assembled by `http.web`; access, errors, parameters   (versions and below)
    versions        the projection of each version a reader asks for (`?version=`)   (feed and below)
    feed, search/   the context projection fed from the events; the search index    (store and below)
    store/          the read model and the search index on disk (SQLite, slot-locked)  (views and below)
    views/          the context windows, chat shape, dates, the events kept per memory (recall)
    recall/, follower  the recall tool over a source; the one reader of `<ns>.events` (nothing of the read side)

`follower.EventsFollower` reads `<ns>.events` for the three that follow it: the context projection
(`feed`), the search index (`search.feed`) and `om tail`.  `search/embedding/` holds the embedders
(only the search uses them).  Each room's `__init__` maps it; tests/unit/test_layout.py holds the
rooms and the floors.
"""
