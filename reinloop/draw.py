"""Drawing the agent's graph offline: mermaid text, ASCII art, or PNG/SVG through the local Graphviz, with
the labels of conditional edges (the keys of a router's `path_map`) in every format."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from langgraph.graph.state import CompiledStateGraph

from reinloop.errors import ConfigurationError

__all__ = ["DrawFormat", "draw"]

DrawFormat = Literal["mermaid", "ascii", "png", "svg", "dot"]


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


def _graphviz(agent: CompiledStateGraph[Any, Any, Any, Any], format: str) -> str | bytes:
    import graphviz

    graph = agent.get_graph()
    dot = graphviz.Digraph(name=agent.name, graph_attr={"rankdir": "TB"}, node_attr={"fontname": "Helvetica"})
    for node_id in graph.nodes:
        terminal = node_id in ("__start__", "__end__")
        dot.node(node_id, node_id.strip("_"), shape="oval" if terminal else "box", style="rounded")
    for edge in graph.edges:
        label = None if edge.data is None else str(edge.data)
        dot.edge(edge.source, edge.target, label=label, style="dashed" if edge.conditional else "solid")
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
