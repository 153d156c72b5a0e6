"""Drawing the agent's graph offline: mermaid text, ASCII art, or PNG/SVG through the local Graphviz, with
the labels of conditional edges (the keys of a router's `path_map`) in every format."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from langgraph.graph.state import CompiledStateGraph

from reinloop.errors import ConfigurationError

__all__ = ["STOPPED_COLOR", "VISITED_COLOR", "DrawFormat", "draw", "path_svg"]

DrawFormat = Literal["mermaid", "ascii", "png", "svg", "dot"]
# How `path_svg` marks a run's path: the nodes and edges it went through, and the node where it stopped.
VISITED_COLOR = "#2b6cb0"
STOPPED_COLOR = "#c05621"


def draw(
    agent: CompiledStateGraph[Any, Any, Any, Any], format: DrawFormat = "mermaid", path: str | Path | None = None
) -> str | bytes:
    """The agent's graph as text (mermaid, ascii, dot) or image bytes (png, svg); written to `path` if given.

    Nothing is sent over the network: mermaid is text to render where you like, PNG and SVG come from the
    Graphviz `dot` program (Debian/Ubuntu: `apt-get install graphviz`). ASCII art has no room for edge
    labels: they are listed under it.
    """
    graph = agent.get_graph()
    result: str | bytes
    if format == "mermaid":
        result = graph.draw_mermaid()
    elif format == "ascii":
        labelled = [f"{edge.source} -> {edge.target}: {edge.data}" for edge in graph.edges if edge.data]
        result = graph.draw_ascii() + "".join(f"\n{line}" for line in labelled)
    elif format in ("dot", "png", "svg"):
        result = _graphviz(agent, format)
    else:
        raise ConfigurationError(f"unknown format {format!r}; use one of mermaid, ascii, png, svg, dot")
    if path is not None:
        target = Path(path)
        if isinstance(result, bytes):
            target.write_bytes(result)
        else:
            target.write_text(result, encoding="utf-8")
    return result


def path_svg(
    agent: CompiledStateGraph[Any, Any, Any, Any],
    nodes: Iterable[str] = (),
    edges: Iterable[tuple[str, str]] = (),
    stopped_at: str | None = None,
) -> str:
    """The agent's graph as SVG (through Graphviz's `dot`) with a run's path marked: the `nodes` and `edges` it
    went through (class ``visited``) and the node where it stopped (class ``stopped``). Each node's SVG group
    has the id ``node_<name>``."""
    svg = _rendered(_digraph(agent, _Marks(frozenset(nodes), frozenset(edges), stopped_at, named=True)), "svg")
    return svg.decode() if isinstance(svg, bytes) else svg


@dataclass(frozen=True)
class _Marks:
    """The Graphviz attributes that mark a path on the graph."""

    nodes: frozenset[str] = field(default_factory=frozenset)
    edges: frozenset[tuple[str, str]] = field(default_factory=frozenset)
    stopped_at: str | None = None
    named: bool = False  # each node's SVG group gets the id "node_<name>"

    def node(self, node_id: str) -> dict[str, str]:
        named = {"id": f"node_{node_id}"} if self.named else {}
        if node_id == self.stopped_at:
            return {**named, "class": "stopped", "color": STOPPED_COLOR, "penwidth": "3", "fontcolor": STOPPED_COLOR}
        if node_id in self.nodes:
            return {**named, "class": "visited", "color": VISITED_COLOR, "penwidth": "2"}
        return named

    def edge(self, source: str, target: str) -> dict[str, str]:
        if (source, target) in self.edges:
            return {"class": "visited", "color": VISITED_COLOR, "penwidth": "2"}
        return {}


def _graphviz(agent: CompiledStateGraph[Any, Any, Any, Any], format: str) -> str | bytes:
    return _rendered(_digraph(agent, _Marks()), format)


def _digraph(agent: CompiledStateGraph[Any, Any, Any, Any], marks: _Marks) -> Any:
    """The agent's graph as a Graphviz `Digraph`, with the attributes of `marks`."""
    import graphviz

    graph = agent.get_graph()
    dot = graphviz.Digraph(name=agent.name, graph_attr={"rankdir": "TB"}, node_attr={"fontname": "Helvetica"})
    for node_id in graph.nodes:
        terminal = node_id in ("__start__", "__end__")
        dot.node(node_id, node_id.strip("_"), shape="oval" if terminal else "box", style="rounded",
                 **marks.node(node_id))  # fmt: skip
    for edge in graph.edges:
        label = None if edge.data is None else str(edge.data)
        dot.edge(edge.source, edge.target, label=label, style="dashed" if edge.conditional else "solid",
                 **marks.edge(edge.source, edge.target))  # fmt: skip
    return dot


def _rendered(dot: Any, format: str) -> str | bytes:
    """`dot` as its source (format "dot") or drawn by Graphviz (png, svg)."""
    import graphviz

    if format == "dot":
        source: str = dot.source
        return source
    try:
        image: bytes = dot.pipe(format=format)
        return image
    except graphviz.ExecutableNotFound:
        raise ConfigurationError(
            f"drawing {format.upper()} needs Graphviz's `dot` program: install it (apt-get install graphviz, "
            "brew install graphviz), or draw as mermaid or ascii"
        ) from None
