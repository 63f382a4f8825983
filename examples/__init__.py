"""The examples, shipped in the wheel as `omstream.examples` so that an installed `om` finds
what `om demo` plays, and a user can run the agent loop without a checkout.

    demo.toml, demo-conversation.jsonl   what `om demo` runs (its settings and conversation)
    simulate.toml                        scripted models for `om simulate` without a broker
    agent.toml, agent_loop.py            an agent loop whose memory is omstream
                                         (`python -m omstream.examples.agent_loop --help`)
    resource.toml, two-threads.jsonl     resource scope: two threads of one user
    feed.js                              a browser/Node reader of a thread's live feed
"""

from pathlib import Path

#: Where the example files are, in a checkout and in an installed wheel alike.
FOLDER = Path(__file__).resolve().parent
