"""`om`: the command line of omstream.  Every command has `--help`.

    om demo                    broker + worker + web + the demo conversation, offline
    om model install|status    the offline local model (local/qwen2.5-1.5b, 1.1 GB)
    om broker start|stop|status|jars
    om topics create
    om worker                  the Faust worker (fold + model agents)
    om serve                   the HTTP read side (context windows)
    om mcp [--transport http]  an MCP server of the memories (stdio, or streamable HTTP)
    om produce FILE.jsonl      send chat messages (and the markers and commands of a conversation file)
    om tail [--namespace NS]   print lifecycle events as they happen (the running demo's namespace by default)
    om export --thread T       a thread's history in the log, as a conversation file for om simulate
    om export --resource R     (resource scope) every thread of a resource's memory, in log order
    om schema export [--check] write (or check) the JSON Schema files of the wire types
    om config check [FILE]     validate observationalMemory options; print the resolved values
    om simulate CONV.jsonl     the engine over a conversation file, without a broker
    om observe|reflect THREAD  manual cycles, through the control topic
    om title THREAD [TITLE]    retitle a thread, --pin / --unpin its title
    om replay --as NAME        fold the retained log into memory version NAME (--config NEW)
    om versions                memory versions and their figures
    om diff A B --thread T     two versions' context windows (exit 1 when they differ)
    om switch NAME | drop NAME the version readers serve by default; delete a version
    om repartition --to NS --partitions M   copy the log into namespace NS with M partitions

`--config` and `--log-level` go before or after the command (`om --config X worker` or
`om worker --config X`); `om simulate --config` names its observationalMemory options.
A settings mistake, an unknown thread, a taken port or an unreachable broker ends the command
with exit status 1 and one line per problem on stderr, never a traceback; a file that cannot be
read (`om produce`, `om simulate`) or a thread with nothing to export is exit status 2
(`omstream.cli.common` maps every error to its lines and status).

One module per command group: `broker` (broker, topics), `servers` (worker, serve), `mcp`,
`conversations` (produce, export), `tail`, `manual` (observe, reflect, title), `offline`
(simulate, schema, config), `model`, `versions` (replay, versions, diff, switch, drop),
`repartition` and `demo`; `namespaces` chooses the namespace `tail`, `dlq` and `export` read
(and refuses one without the topic); `app` builds the parser and runs a command.
"""

from .app import build_parser, main

__all__ = ["build_parser", "main"]
