"""The HTTP read side `om serve` answers with: `web` assembles the route modules.

    web           the application: the route modules, the access check, `?version=`
    status        GET /healthz, GET /openapi.json
    threads       GET /threads, GET /threads/{threadId}/context
    sse           GET /threads/{threadId}/events, GET /events (the live feed)
    recall        GET|POST /threads/{threadId}/recall (over `projections.recall`)
    dashboard     GET /, GET /threads/{threadId}, the static files, GET /dashboard/activity
    access        who may read what: tokens, one middleware
    errors        every error as JSON, its codes; the access log
    query_params  the parameters several routes share (`after`, `wait`)
"""
