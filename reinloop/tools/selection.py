"""The tools a run shows its model: all of them, or (`AgentConfig.max_tools`) the few the model picks for the
task once, before the run's first decision, so that the tool schemas, the start of every prompt, stay the same
for the whole run and a provider's cache keeps serving them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import Runnable
from langgraph.errors import GraphBubbleUp

from reinloop.drivers import Steps, invoke
from reinloop.tools.registry import ToolRegistry

__all__ = ["SELECT_TOOLS_PROMPT", "Selection", "chosen_tools", "select_tools"]

SELECT_TOOLS_PROMPT = (
    "Pick the tools for a task. Of the tools below, name the at most {count} that the task will need, the most "
    "needed first, separated by commas, and nothing else.\n\nThe task: {task}\n\nThe tools:\n{tools}"
)
# Of a tool's description, what the selection prompt shows (its first line, cut to this).
DESCRIPTION_CHARS = 160


class Selection:
    """A selection's result: the names chosen (in the registry's order; None: all tools), and the call made."""

    __slots__ = ("names", "prompt", "reply")

    def __init__(self, names: list[str] | None, prompt: list[BaseMessage], reply: AIMessage | None) -> None:
        self.names, self.prompt, self.reply = names, prompt, reply


def select_tools(model: Runnable[Any, Any], task: str, registry: ToolRegistry, count: int) -> Steps[Selection]:
    """Ask `model` which `count` tools of `registry` the task needs, as steps for `reinloop.drivers`. A failing
    call, or a reply naming no tool, selects them all: a selection never ends a run."""
    listed = "\n".join(f"- {entry.name}: {_first_line(entry.tool.description)}" for entry in registry)
    prompt: list[BaseMessage] = [HumanMessage(SELECT_TOOLS_PROMPT.format(count=count, task=task, tools=listed))]
    try:
        reply = yield from invoke(model, prompt)
    except GraphBubbleUp:
        raise
    except Exception:
        return Selection(None, prompt, None)
    text = reply.text if isinstance(reply, BaseMessage) else str(reply)
    names = chosen_tools(text, registry.names, count)
    return Selection(names or None, prompt, reply if isinstance(reply, AIMessage) else None)


def chosen_tools(text: str, names: Sequence[str], count: int) -> list[str]:
    """The tool names `text` mentions, whole, the first `count` of them by where they first appear, given back in
    the order of `names` (any reply shape: a list, JSON, prose)."""
    found: dict[str, int] = {}
    for name in names:
        match = re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text)
        if match is not None:
            found[name] = match.start()
    first = set(sorted(found, key=found.__getitem__)[:count])
    return [name for name in names if name in first]


def _first_line(description: str) -> str:
    line = (description or "").strip().split("\n", 1)[0]
    return line if len(line) <= DESCRIPTION_CHARS else line[: DESCRIPTION_CHARS - 1] + "…"
