"""The graph's shape: a snapshot of the mermaid diagram, and offline drawing in every format."""

import re
from pathlib import Path
from typing import TypedDict, get_args

import pytest
from langgraph.graph import END, START, StateGraph

from reinloop import ConfigurationError, build_agent, draw
from reinloop.graph import CHECK_FINISH_EDGES, VALIDATE_ARGS_EDGES, AfterCheckFinish, AfterValidateArgs
from reinloop.testing import ScriptedChatModel
from tests.conftest import add

SNAPSHOT = Path(__file__).parent / "snapshots" / "graph.mmd"


@pytest.fixture(scope="module")
def agent():
    return build_agent(ScriptedChatModel(), [add])


def test_mermaid_diagram_matches_the_snapshot(agent):
    # To accept an intended change of topology: python -c "from tests.test_topology import write; write()"
    assert draw(agent, "mermaid") == SNAPSHOT.read_text()


def test_the_diagram_has_exactly_the_designed_edges(agent):
    graph = agent.get_graph()
    edges = {(e.source, e.target, e.conditional) for e in graph.edges}
    assert edges == {
        ("__start__", "decide", False),
        ("decide", "validate_args", False),
        ("validate_args", "decide", True),  # retry
        ("validate_args", "execute_tool", True),
        ("validate_args", "observe", True),  # error feedback
        ("validate_args", "check_finish", True),  # final answer
        ("execute_tool", "observe", False),
        ("observe", "compress_memory", False),
        ("compress_memory", "check_finish", False),
        ("check_finish", "decide", True),
        ("check_finish", "circuit_break", True),  # circuit break
        ("check_finish", "__end__", True),
        ("circuit_break", "__end__", False),
    }


def test_ascii_drawing(agent):
    art = draw(agent, "ascii")
    for node in ("decide", "validate_args", "execute_tool", "observe", "compress_memory", "check_finish"):
        assert f"| {node} |" in art


@pytest.mark.parametrize(("fmt", "magic"), [("png", b"\x89PNG"), ("svg", b"<svg")], ids=["png", "svg"])
def test_images_are_rendered_locally_with_graphviz(agent, tmp_path, fmt, magic):
    target = tmp_path / f"graph.{fmt}"
    data = draw(agent, fmt, target)
    assert magic in data[:400]
    assert target.read_bytes() == data


def test_dot_source_marks_conditional_edges_dashed(agent):
    source = draw(agent, "dot")
    assert 'validate_args -> decide [label="parse error, retry left" style=dashed]' in source
    assert "decide -> validate_args [style=solid]" in source


def test_missing_graphviz_is_a_clear_error(agent, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ConfigurationError, match="apt-get install graphviz"):
        draw(agent, "png")


def test_unknown_format(agent):
    with pytest.raises(ConfigurationError, match="unknown format 'gif'"):
        draw(agent, "gif")


def write() -> None:
    SNAPSHOT.write_text(draw(build_agent(ScriptedChatModel(), [add]), "mermaid"))


def test_the_topology_without_a_model_draws_the_same_graph_and_reads_saved_threads():
    from langgraph.checkpoint.memory import InMemorySaver

    from reinloop.graph import agent_topology
    from reinloop.testing import tool_call

    assert draw(agent_topology(), "mermaid") == SNAPSHOT.read_text()
    saver = InMemorySaver()
    running = build_agent(ScriptedChatModel(replies=[tool_call("add", {"a": 2, "b": 3}), "5"]), [add],
                          checkpointer=saver)  # fmt: skip
    config = {"configurable": {"thread_id": "t"}}
    running.invoke({"task": "add"}, config)
    reader = agent_topology(saver)
    assert reader.get_state(config).values == running.get_state(config).values
    assert [s.next for s in reader.get_state_history(config)] == [s.next for s in running.get_state_history(config)]
    with pytest.raises(ConfigurationError, match="cannot run"):
        reader.invoke({"task": "add"}, {"configurable": {"thread_id": "other"}})


README = Path(__file__).parents[1] / "README.md"
# A labelled conditional edge of the README's mermaid diagram: `validate_args -.->|ok| execute_tool;`.
README_EDGE = re.compile(r"^\s*(\w+) -\.->\|([^|]+)\| (\w+)", re.MULTILINE)


def labelled_graph():
    """A two-node graph whose router's outcomes are labelled (`path_map` keys), as LangGraph draws them."""

    class State(TypedDict):
        n: int

    graph = StateGraph(State)
    for node in ("work", "fix", "report"):
        graph.add_node(node, lambda state: {})
    graph.add_edge(START, "work")
    graph.add_conditional_edges("work", lambda state: "done", {"needs a fix": "fix", "done": "report"})
    graph.add_edge("fix", "report")
    graph.add_edge("report", END)
    return graph.compile()


@pytest.mark.parametrize(
    ("fmt", "drawn"),
    [
        ("mermaid", ["work -. &nbsp;done&nbsp; .-> report", "work -. &nbsp;needs a fix&nbsp; .-> fix"]),
        ("dot", ["work -> report [label=done style=dashed]", 'work -> fix [label="needs a fix" style=dashed]']),
        ("ascii", ["work -> report: done", "work -> fix: needs a fix"]),
    ],
    ids=["mermaid", "dot", "ascii"],
)
def test_edge_labels_are_drawn_in_every_text_format(fmt, drawn):
    text = draw(labelled_graph(), fmt)
    for line in drawn:
        assert line in text


def test_the_diagram_labels_its_conditional_edges_as_the_readme_does(agent):
    readme = {(source, target): label for source, label, target in README_EDGE.findall(README.read_text())}
    assert len(readme) == 7  # every conditional edge of the README's diagram is labelled
    drawn = {(edge.source, edge.target): edge.data for edge in agent.get_graph().edges if edge.conditional}
    assert drawn == readme


def test_every_route_has_a_labelled_edge():
    # A router outcome missing from the path map would fail only the run that takes it.
    assert sorted(VALIDATE_ARGS_EDGES.values()) == sorted(get_args(AfterValidateArgs))
    assert sorted(CHECK_FINISH_EDGES.values()) == sorted(get_args(AfterCheckFinish))
