"""reinloop's quickstart, offline: a scripted model drives the guarded loop through each kind of step.

Run: python examples/quickstart.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from langchain_core.tools import tool

from reinloop import AgentConfig, build_agent, draw, resume, sqlite_checkpointer
from reinloop.testing import ScriptedChatModel, tool_call


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def main() -> None:
    # The model first sends bad arguments, gets the validation error back, corrects itself, then answers.
    model = ScriptedChatModel(
        replies=[
            tool_call("add", {"a": "two", "b": 3}),
            tool_call("multiply", {"a": 2, "b": 3}),
            tool_call("add", {"a": 2, "b": 3}),
            "2 + 3 = 5",
        ]
    )
    with tempfile.TemporaryDirectory() as folder:
        saver = sqlite_checkpointer(Path(folder) / "runs.sqlite")
        agent = build_agent(model, [add], config=AgentConfig(max_iterations=3), checkpointer=saver)
        thread = {"configurable": {"thread_id": "quickstart"}}
        print(draw(agent, "ascii"))
        for update in agent.stream({"task": "What is 2 + 3?"}, thread, stream_mode="updates"):
            for node, values in update.items():
                for message in (values or {}).get("messages", []):
                    text = message.text or str(getattr(message, "tool_calls", ""))
                    print(f"[{node}] {type(message).__name__}: {text[:100]}")
        state = agent.get_state(thread).values
        print(f"finish_reason={state['finish_reason']} iteration={state['iteration']}")
        if state["finish_reason"] != "answered":
            state = resume(agent, thread, extra_iterations=2, hint="Use add with integers.")
        print(f"final answer: {state['final_answer']!r} ({state['finish_reason']}, {state['iteration']} rounds)")
        saver.conn.close()


if __name__ == "__main__":
    main()
