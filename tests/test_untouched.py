"""Importing reinloop, and running an agent, changes nothing in LangChain or LangGraph for the rest of the process."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json

    import langchain_core.language_models.chat_models as chat_models
    import langchain_core.tools.base as tools_base
    import langchain_core.tools.simple as tools_simple
    import langchain_core.tools.structured as tools_structured
    from langchain.agents import create_agent
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import BaseTool, StructuredTool, tool
    from langgraph.pregel import Pregel
    from langgraph.pregel._read import PregelNode


    def helpers():
        found = {}
        for module in (tools_base, tools_structured, tools_simple, chat_models):
            for name, value in sorted(vars(module).items()):
                if callable(value) and not isinstance(value, type):
                    found[f"{module.__name__}.{name}"] = value
        for cls in (BaseTool, StructuredTool, PregelNode, Pregel):
            found.update({f"{cls.__name__}.{name}": value for name, value in vars(cls).items()})
        return found


    class Events(BaseCallbackHandler):
        def __init__(self):
            self.seen = []

        def on_chain_start(self, serialized, inputs, **kwargs):
            self.seen.append(("chain", kwargs.get("name")))

        def on_tool_start(self, serialized, input_str, **kwargs):
            self.seen.append(("tool", (serialized or {}).get("name")))


    class FakeModel(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):
            return self


    @tool
    def add(a: int, b: int) -> int:
        \"\"\"Add two numbers.\"\"\"
        return a + b


    def create_agent_run():
        replies = iter([AIMessage("", tool_calls=[{"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"}]),
                        AIMessage("3")])
        agent = create_agent(FakeModel(messages=replies), [add])
        events = Events()
        result = agent.invoke({"messages": [("user", "add")]}, {"callbacks": [events]})
        return [m.text for m in result["messages"]], events.seen


    before, run_before = helpers(), create_agent_run()

    import reinloop
    from reinloop.testing import ScriptedChatModel, tool_call

    agent = reinloop.build_agent(ScriptedChatModel(replies=[tool_call("add", {"a": 1, "b": 2}), "3"]), [add])
    assert agent.invoke({"task": "add"})["final_answer"] == "3"

    after, run_after = helpers(), create_agent_run()
    changed = sorted(name for name in before.keys() | after.keys() if before.get(name) is not after.get(name))
    print(json.dumps({"changed": changed, "same_run": run_before == run_after, "tools": run_after[1]}))
    """
)


def test_importing_reinloop_and_running_an_agent_leaves_langchain_and_langgraph_as_they_ship():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True)
    import json

    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["changed"] == []  # no helper, method or class attribute replaced
    assert found["same_run"] and ["tool", "add"] in found["tools"]  # create_agent runs, and is traced, the same
