"""The agent tests/test_server.py serves with `langgraph dev`: a deterministic model that adds up the numbers in
its task, one `add` call a round, and answers with the sum (and the operator's hint, when it saw one)."""

from __future__ import annotations

import re

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from reinloop import AgentConfig, build_agent
from reinloop.resume import HINT_TEMPLATE
from reinloop.testing import ScriptedChatModel, tool_call

MAX_ITERATIONS = 3
HINT_PREFIX = HINT_TEMPLATE.split("{hint}")[0]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def add_up(messages: list[BaseMessage]) -> AIMessage | str:
    """Add the task's numbers left to right, one call a round, from the results it was shown."""
    task = next(message.text for message in messages if isinstance(message, HumanMessage))
    numbers = [int(number) for number in re.findall(r"-?\d+", task)]
    results = [int(message.text.splitlines()[-1]) for message in messages if isinstance(message, ToolMessage)]
    done = len(results)
    total = results[-1] if results else numbers[0]
    if done + 1 < len(numbers):
        return tool_call("add", {"a": total, "b": numbers[done + 1]})
    hints = [message.text[len(HINT_PREFIX) :] for message in messages if message.text.startswith(HINT_PREFIX)]
    return f"The sum is {total}." + "".join(f" Hint seen: {hint}" for hint in hints)


agent = build_agent(ScriptedChatModel(respond=add_up), [add], config=AgentConfig(max_iterations=MAX_ITERATIONS))

# The same agent, asking a person before each `add` call; LangGraph Server gives it its checkpointer at run time.
approving = build_agent(
    ScriptedChatModel(respond=add_up),
    [add],
    config=AgentConfig(max_iterations=MAX_ITERATIONS),
    approve=["add"],
    checkpointer=True,
)
