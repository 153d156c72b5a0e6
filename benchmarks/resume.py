"""Resuming a long thread: how long loading its state and deciding to continue take, and what its database
weighs per round, before and after `reinloop.prune`.

Each thread is built for real: a zero-latency scripted model calls a cheap tool with new arguments every
round until `max_iterations` (the rounds asked for) breaks the run, as a long run does, in a SQLite file with
reinloop's defaults. Then, repeated and interleaved, with the median and the spread over the repeats:

- `get_state`: the agent loads the thread's state (an open connection, as a long-lived process has it);
- `prepare_resume`: what `reinloop.resume` does before it invokes the model: load the state, decide how to
  continue (a circuit break: fresh budgets), save that decision as a checkpoint;
- `new process`: a new SQLite connection, then `prepare_resume`: what `reinloop resume THREAD` does after
  building its agent (`build agent`, printed once, does not depend on the thread).

Each repeat removes what `prepare_resume` saved (writes of the latest checkpoint and a new checkpoint), so
every repeat resumes the same broken thread.
Then the thread is pruned to its latest checkpoint and the file vacuumed, and the same is measured again.

Run: python benchmarks/resume.py [--rounds 30 3000] [--repeats 15] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import itertools
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.tools import tool

from reinloop import AgentConfig, build_agent, prepare_resume, prune, sqlite_checkpointer
from reinloop.testing import ScriptedChatModel, tool_call

THREAD = {"configurable": {"thread_id": "long"}}


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def agent_on(saver: Any, rounds: int) -> Any:
    numbers = itertools.count()
    # New arguments every round, so the dead-loop guard never trips; summaries come from a zero-latency fake.
    model = ScriptedChatModel(respond=lambda messages: tool_call("add", {"a": next(numbers), "b": 1}))
    summaries = ScriptedChatModel(respond=lambda messages: "Earlier steps: added numbers.")
    return build_agent(model, [add], config=AgentConfig(max_iterations=rounds), checkpointer=saver,
                       summary_model=summaries)  # fmt: skip


def build_thread(path: Path, rounds: int) -> float:
    """Run `rounds` rounds into the file at `path`; the seconds it took."""
    saver = sqlite_checkpointer(path)
    started = time.perf_counter()
    final = agent_on(saver, rounds).invoke({"task": "Keep adding."}, THREAD)
    took = time.perf_counter() - started
    assert (final["finish_reason"], final["iteration"]) == ("max_iterations", rounds), final["finish_reason"]
    saver.conn.close()
    return took


def sizes(path: Path) -> tuple[int, int, int]:
    """The file's bytes (SQLite pages), its checkpoints and its pending writes."""
    saver = sqlite_checkpointer(path)
    (pages,) = saver.conn.execute("PRAGMA page_count").fetchone()
    (page_size,) = saver.conn.execute("PRAGMA page_size").fetchone()
    (checkpoints,) = saver.conn.execute("SELECT count(*) FROM checkpoints").fetchone()
    (writes,) = saver.conn.execute("SELECT count(*) FROM writes").fetchone()
    saver.conn.close()
    return pages * page_size, checkpoints, writes


class Timings:
    """The three measurements on one file, each repeat undoing what `prepare_resume` saved."""

    def __init__(self, path: Path, rounds: int) -> None:
        self.path, self.rounds = path, rounds
        self.saver = sqlite_checkpointer(path)
        self.agent = agent_on(self.saver, rounds)
        saved = self.agent.get_state(THREAD)
        self.latest = saved.config["configurable"]["checkpoint_id"]
        # update_state saves the decision as writes of this checkpoint, then a new checkpoint: undo removes both.
        assert not self.saver.get_tuple(THREAD).pending_writes, "a broken run leaves no pending writes"

    def get_state(self) -> None:
        assert self.agent.get_state(THREAD).values["finish_reason"] == "max_iterations"

    def prepare_resume(self) -> None:
        prepare_resume(self.agent, THREAD, extra_iterations=10)

    def new_process(self) -> None:
        saver = sqlite_checkpointer(self.path)
        self.agent.checkpointer = saver
        try:
            prepare_resume(self.agent, THREAD, extra_iterations=10)
        finally:
            self.agent.checkpointer = self.saver
            saver.conn.close()

    def undo(self) -> None:
        """Remove what prepare_resume saved: the thread is the broken one again."""
        with self.saver.cursor() as cursor:
            cursor.execute("DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_id > ?", ("long", self.latest))
            cursor.execute("DELETE FROM writes WHERE thread_id = ? AND checkpoint_id >= ?", ("long", self.latest))

    def close(self) -> None:
        self.saver.conn.close()


def measure(timings: Timings, repeats: int) -> dict[str, list[float]]:
    steps: dict[str, Callable[[], None]] = {
        "get_state": timings.get_state,
        "prepare_resume": timings.prepare_resume,
        "new process": timings.new_process,
    }
    seconds: dict[str, list[float]] = {name: [] for name in steps}
    for step in steps.values():  # one warm-up each: imports, caches
        step()
        timings.undo()
    for _ in range(repeats):
        for name, step in steps.items():
            started = time.perf_counter()
            step()
            seconds[name].append(time.perf_counter() - started)
            timings.undo()
    return seconds


def profile(timings: Timings) -> str:
    profiler = cProfile.Profile()
    for _ in range(20):
        profiler.enable()
        timings.new_process()
        profiler.disable()
        timings.undo()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
    return out.getvalue()


def row(label: str, samples: list[float]) -> str:
    ms = sorted(1000 * s for s in samples)
    return f"  {label:<16} {statistics.median(ms):7.2f} ms  (min {ms[0]:.2f}, max {ms[-1]:.2f})"


def report(path: Path, rounds: int, repeats: int, label: str, with_profile: bool) -> None:
    size, checkpoints, writes = sizes(path)
    print(f"{label}: {size / 1e6:.2f} MB, {size / rounds:,.0f} bytes per round, "
          f"{checkpoints} checkpoints, {writes} pending writes")  # fmt: skip
    timings = Timings(path, rounds)
    try:
        for name, samples in measure(timings, repeats).items():
            print(row(name, samples))
        if with_profile:
            print(profile(timings))
    finally:
        timings.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, nargs="+", default=[3000], help="rounds per thread (default: 3000)")
    parser.add_argument("--repeats", type=int, default=15, help="timed repeats of each step (default: 15)")
    parser.add_argument("--profile", action="store_true", help="cProfile 'new process' on each file")
    args = parser.parse_args()

    started = time.perf_counter()
    saver = sqlite_checkpointer(":memory:")
    agent_on(saver, 1)
    print(f"build agent: {1000 * (time.perf_counter() - started):.1f} ms (once per process)")
    saver.conn.close()
    with tempfile.TemporaryDirectory() as folder:
        for rounds in args.rounds:
            path = Path(folder) / f"rounds-{rounds}.sqlite"
            print(f"\n{rounds} rounds: built in {build_thread(path, rounds):.1f} s")
            report(path, rounds, args.repeats, "before prune", args.profile)
            started = time.perf_counter()
            pruned = prune(path, vacuum=True)
            took = time.perf_counter() - started
            print(f"pruned {pruned.checkpoints} checkpoints and {pruned.writes} pending writes in {took:.2f} s")
            report(path, rounds, args.repeats, "after prune + vacuum", args.profile)


if __name__ == "__main__":
    main()
