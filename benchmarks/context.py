"""Prompt tokens per model call over a long scripted run: reinloop against LangChain's `create_agent`.

Three agents do the same 200 steps (one `fetch` call each, every observation about 2,000 characters), in
the same run, with the same scripted model: reinloop with its defaults, `create_agent` without middleware,
and `create_agent` with its `SummarizationMiddleware`. Every prompt is counted with the same tokenizer
(reinloop's TokenCounter: cl100k_base, offline), tool schemas included. Summaries come from one fake
summarizer for both summarizing agents; their calls are counted apart. Prints per-step max/mean and
totals, and writes a PNG plot.

Run: python benchmarks/context.py [--steps 200] [--out benchmarks/context.png]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path

from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool

from reinloop import AgentConfig, build_agent
from reinloop.memory import TokenCounter
from reinloop.testing import ScriptedChatModel, tool_call

COUNTER = TokenCounter()
WORDS = ("amber", "basalt", "cobalt", "dune", "ember", "fjord", "glacier", "harbor", "island", "jungle", "kelp",
         "lagoon", "mesa", "nectar", "orchid")  # fmt: skip
SUMMARY = "Summary of the earlier steps: pages were fetched and read; nothing failed. " * 6


@tool
def fetch(page: int) -> str:
    """Fetch one page of a long report."""
    return f"Page {page}: " + " ".join(WORDS[(page * 7 + i) % len(WORDS)] for i in range(300))


TOOL_TOKENS = COUNTER.tools([convert_to_openai_tool(fetch)])


def recording_model(steps: int, prompts: list[int]) -> ScriptedChatModel:
    """Decides `steps` fetches then answers; records the prompt tokens of every decision."""

    def respond(messages: list[BaseMessage]) -> AIMessage:
        prompts.append(COUNTER.messages(messages) + TOOL_TOKENS)
        done = len(prompts) - 1
        if done >= steps:
            return AIMessage("All pages read.")
        return tool_call("fetch", {"page": done}, content=f"Page {done - 1} read; on to page {done}.")

    return ScriptedChatModel(respond=respond)


SUMMARIZER_PROMPTS: dict[str, list[int]] = {}


def summarizer(agent: str) -> ScriptedChatModel:
    """The same fake summary for both summarizing agents; records what each summary call is sent."""
    prompts = SUMMARIZER_PROMPTS.setdefault(agent, [])

    def respond(messages: list[BaseMessage]) -> str:
        prompts.append(COUNTER.messages(messages))
        return SUMMARY

    return ScriptedChatModel(respond=respond)


def run_reinloop(steps: int) -> list[int]:
    prompts: list[int] = []
    config = AgentConfig(max_iterations=steps + 1, max_repeats=steps)
    agent = build_agent(recording_model(steps, prompts), [fetch], config=config, summary_model=summarizer("reinloop"))
    assert agent.invoke({"task": "Read the report page by page."})["finish_reason"] == "answered"
    return prompts


def run_create_agent(steps: int, middleware: list) -> list[int]:
    prompts: list[int] = []
    agent = create_agent(recording_model(steps, prompts), [fetch], middleware=middleware)
    agent.invoke(
        {"messages": [{"role": "user", "content": "Read the report page by page."}]}, {"recursion_limit": 10_000}
    )
    return prompts


AGENTS: dict[str, Callable[[int], list[int]]] = {
    "reinloop": run_reinloop,
    "create_agent": lambda steps: run_create_agent(steps, []),
    "create_agent + summarization": lambda steps: run_create_agent(
        steps,
        [
            SummarizationMiddleware(
                summarizer("create_agent + summarization"), trigger=("tokens", 6_000), keep=("messages", 20)
            )
        ],
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warm-up", type=int, default=20, help="steps left out of the flatness figure")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("context.png"))
    args = parser.parse_args()
    results = {name: run(args.steps) for name, run in AGENTS.items()}
    plain = sum(results["create_agent"])
    print(f"prompt tokens per model call over {args.steps} steps (tokenizer: {COUNTER.encoding.name})")
    header = f"{'agent':<30} {'max':>8} {'mean':>8} {'total':>11} {'vs plain':>9} {'max/min after warm-up':>22}"
    print(f"{header} {'summary calls':>14} {'their prompts':>14}")
    for name, prompts in results.items():
        steady = prompts[args.warm_up :]
        summaries = SUMMARIZER_PROMPTS.get(name, [])
        print(
            f"{name:<30} {max(prompts):>8} {statistics.mean(prompts):>8.0f} {sum(prompts):>11} "
            f"{sum(prompts) / plain:>9.3f} {max(steady) / min(steady):>22.2f} {len(summaries):>14} {sum(summaries):>14}"
        )
    plot(results, args.out)
    print(f"plot: {args.out}")


def plot(results: dict[str, list[int]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(9, 5))
    for name, prompts in results.items():
        axes.plot(range(len(prompts)), prompts, label=name)
    axes.set_xlabel("model call (step)")
    axes.set_ylabel("prompt tokens")
    axes.set_yscale("log")
    axes.set_title("Prompt tokens per model call")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(out, dpi=120)


if __name__ == "__main__":
    main()
