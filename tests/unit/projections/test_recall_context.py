"""With retrieval on, the actor's context shows observation groups as `## Group` sections with
their range, and carries the recall guidance (spec §10, §12)."""

from omstream.engine.fold import fold, new_state
from omstream.engine.prompting.groups import parse_groups
from omstream.projections.recall import recall_instructions
from omstream.projections.views.context import INSTRUCTIONS, PREAMBLE, ContextProjection
from tests.helpers import engine, message, scripted_result


def window_of(config, count: int = 8):
    projection = ContextProjection(retrieval=config.resolved.retrieval)
    state = new_state("thread:t1", "t1", "u1")
    for i in range(count):
        out = fold(state, message(i, words=80), config)
        state, pending = out.state, list(out.jobs)
        for event in out.events:
            projection.apply_event(event)
        while pending:
            out = fold(state, scripted_result(pending.pop(0)), config)
            state, pending = out.state, pending + list(out.jobs)
            for event in out.events:
                projection.apply_event(event)
    return projection.threads["t1"], state


def test_groups_render_as_sections_with_their_range_and_the_guidance_follows_the_instructions():
    config = engine(300, retrieval={"scope": "thread", "instructions": "Quote invoices exactly."})
    view, state = window_of(config)
    groups = parse_groups(state.observations)
    assert groups
    system = view.window().system
    assert system[0] == (f"{PREAMBLE}\n\n{INSTRUCTIONS}\n\n"
                         + recall_instructions("thread", search=False, custom="Quote invoices exactly."))
    assert system[0].endswith("### Additional recall guidance\nQuote invoices exactly.")
    shown = "\n".join(system[2:])
    assert "<observation-group" not in shown and "</observation-group>" not in shown
    for g in groups:
        assert f"## Group `{g.id}`\n_range: `{g.range}`_\n\n" in shown
    print(len(groups), "groups shown, first range", groups[0].range)


def test_without_retrieval_no_guidance_and_no_sections():
    view, _ = window_of(engine(300))
    assert "## Recall" not in view.window().system[0] and "## Group" not in "\n".join(view.window().system)


def test_resource_scoped_recall_guidance_comes_before_any_observation():
    empty, _ = window_of(engine(100_000, retrieval=True), count=2)
    window = empty.window()
    assert window.system == (recall_instructions("resource", search=False),) and window.continuation is None
    assert "mode: \"threads\"" in window.system[0] and "mode: \"search\"" not in window.system[0]
    thread_scope, _ = window_of(engine(100_000, retrieval={"scope": "thread"}), count=2)
    assert thread_scope.window().system == ()
    searching = recall_instructions("resource", search=True)
    assert "`mode: \"search\"` with a `query`" in searching
