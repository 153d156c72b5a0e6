"""Decision latency of the embedded model (Gemma 3 270M on llama-cpp-python's server) before and after the
prompt layout of issue 44, where the prompt after the task only grows between compactions.

Two steps. Record: reinloop runs ROUNDS rounds of cost.py's scripted workload (one tool call a round, observations
of 300 to 2,000 characters, cost.py's 5 tools) with the json protocol and the settings `reinloop run` gives the
embedded model, its requests going to a recording OpenAI-compatible server that replies as the constrained model
would; each tree (the checkout before, the working tree) records in a subprocess with its own PYTHONPATH. Replay:
each recorded sequence, summaries included where they were sent, is sent in order to one embedded model server
started as a tree's reinloop starts it (a fresh one per replay, as each `reinloop run` starts its own), every
reply cut to REPLAY_TOKENS tokens so that the time is mostly the prompt's. Three setups (SETUPS: today's, the new
layout alone, the layout and the server's settings) take turns, --repeats times each, so that all see the same
machine noise; each request is timed in wall time and in the server process's CPU time.

Run: git worktree add /tmp/before c374a02
     .venv/bin/python benchmarks/local_latency.py --before /tmp/before [--repeats 3] [--doc docs/cost.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import httpx
import psutil

COMMAND = ".venv/bin/python benchmarks/local_latency.py --before /tmp/before --repeats 3 --doc docs/cost.md"
ROOT = Path(__file__).resolve().parent.parent
ROUNDS = 30
REPORTED_ROUNDS = (1, 10, 20, 30)
# Replies are cut to this many tokens in the replay, the same for every request: what is timed is mostly the
# prompt (reinloop allows 200; a decision of the constrained model is 30 to 80).
REPLAY_TOKENS = 8
# What `reinloop run` gives the embedded model (reinloop.models.model_from_settings).
EMBEDDED_BUDGET = 3_400
Kind = Literal["decision", "summary"]

# ------------------------------------------------------------------------------------------------- recording


class Recorder:
    """An OpenAI-compatible chat server on 127.0.0.1 that plays the workload as the embedded model would (each
    decision one json-protocol object, the answer after the last round; a summary for a summary request) and
    keeps every request body as sent."""

    def __init__(self, rounds: int, protocol: Any) -> None:
        self.rounds, self.protocol = rounds, protocol
        self.requests: list[dict[str, Any]] = []
        self._decisions = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        from cost import ANSWER, SUMMARY, is_fold_request, scripted_step

        # Only a decision is constrained to the protocol's form, and a fold request in the decisions' context (the
        # agent's own model summarizes, answering in that form); a separate summarizer is the bare chat model.
        folding = is_fold_request(body)
        constrained = "response_format" in body or "grammar" in body
        kind: Kind = "decision" if constrained and not folding else "summary"
        if kind == "summary":
            text = f"Summary {sum(r['kind'] == 'summary' for r in self.requests) + 1}. {SUMMARY}"
            text = self.protocol.format_answer(text) if folding else text
        elif self._decisions >= self.rounds:
            text = self.protocol.format_answer(ANSWER, "I have checked everything.")
        else:
            step = scripted_step(self._decisions)
            text = self.protocol.format_decision(step.thought, [{"name": step.tool, "args": step.args}])
        self._decisions += kind == "decision"
        self.requests.append({"kind": kind, "body": body})
        message = {"role": "assistant", "content": text}
        return {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0,
                "model": body.get("model"), "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}  # fmt: skip

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                data = json.dumps(recorder.reply(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


def record(rounds: int, out: Path) -> None:
    """Run reinloop (the one on this process's path) through the workload; write its requests to `out`."""
    from cost import TASK, toolset

    import reinloop
    from reinloop import AgentConfig, build_agent
    from reinloop.memory import memory_store
    from reinloop.models.local import REPLY_TOKENS, LocalModelServer, local_protocol

    protocol = local_protocol("json")
    config = AgentConfig(protocol="json", context_token_budget=EMBEDDED_BUDGET, max_reply_tokens=REPLY_TOKENS,
                         max_iterations=rounds + 1)  # fmt: skip
    with Recorder(rounds, protocol) as recorder:
        # The chat model reinloop builds for its server, pointed at the recorder (the server is never started).
        server = LocalModelServer(Path(os.devnull))
        server.port = recorder.port
        # A store, as `reinloop run` opens one: recalled memories are part of the prompt.
        agent = build_agent(server.chat_model(), toolset(5), config=config, protocol=protocol, store=memory_store())
        result = agent.invoke({"task": TASK})
    assert result["finish_reason"] == "answered", result["finish_reason"]
    out.write_text(json.dumps({"reinloop": str(Path(reinloop.__file__).parent), "requests": recorder.requests}))


def record_tree(tree: Path, rounds: int, out: Path) -> None:
    """The requests of the reinloop in `tree`, recorded in a subprocess with that tree first on its path."""
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, __file__, "--record", str(out), "--rounds", str(rounds)], check=True,
                   env=environment, cwd=tree)  # fmt: skip
    recorded = json.loads(out.read_text())
    if Path(recorded["reinloop"]).resolve() != (tree / "reinloop").resolve():
        raise SystemExit(f"recorded with {recorded['reinloop']}, not the reinloop in {tree}")


# ---------------------------------------------------------------------------------------------------- replay


@dataclass(frozen=True)
class Timed:
    """One request replayed: its kind, the prompt tokens the server counted, wall and server CPU seconds."""

    kind: Kind
    prompt: int
    wall: float
    cpu: float


def replay(requests: Sequence[dict[str, Any]]) -> list[Timed]:
    """Every request of one run, in order, against one fresh embedded model server started as the reinloop on
    this process's path starts it."""
    from reinloop.models.local import LocalModelServer

    with LocalModelServer() as server:
        (child,) = psutil.Process().children()  # the server: this process starts no other
        with httpx.Client(base_url=server.base_url, timeout=600) as client:
            return [_timed(client, child, request) for request in requests]


def replay_with(tree: Path, requests: Path, out: Path) -> list[Timed]:
    """`replay` of the requests in the file `requests` in a subprocess, with the server of the reinloop in `tree`."""
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, __file__, "--replay", str(requests), "--timed", str(out)], check=True,
                   env=environment, cwd=tree)  # fmt: skip
    return [Timed(**timed) for timed in json.loads(out.read_text())]


def _timed(client: httpx.Client, server: psutil.Process, request: dict[str, Any]) -> Timed:
    body = {**request["body"], "max_tokens": REPLAY_TOKENS}
    body.pop("max_completion_tokens", None)
    cpu, wall = _cpu(server), time.perf_counter()
    response = client.post("/chat/completions", json=body)
    wall, cpu = time.perf_counter() - wall, _cpu(server) - cpu
    response.raise_for_status()
    return Timed(request["kind"], int(response.json()["usage"]["prompt_tokens"]), wall, cpu)


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


# --------------------------------------------------------------------------------------------------- figures


def decisions(timed: Sequence[Timed]) -> list[Timed]:
    return [t for t in timed if t.kind == "decision"]


def _spread(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def table(runs: dict[str, list[list[Timed]]]) -> str:
    """Per reported round: median (min-max over the repetitions) of wall and CPU seconds, the prompt tokens."""
    lines = ["| round | layout | prompt tokens | wall s, median (min-max) | server CPU s, median (min-max) |",
             "|---:|---|---:|---:|---:|"]  # fmt: skip
    for number in REPORTED_ROUNDS:
        for name, repeats in runs.items():
            rounds = [decisions(run)[number - 1] for run in repeats]
            lines.append(f"| {number} | {name} | {rounds[0].prompt:,} | {_spread([t.wall for t in rounds])} | "
                         f"{_spread([t.cpu for t in rounds])} |")  # fmt: skip
    lines += ["", "| layout | decisions | summaries | prompt tokens, all requests | wall s, whole run (median) |",
              "|---|---:|---:|---:|---:|"]  # fmt: skip
    for name, repeats in runs.items():
        run = repeats[0]
        total = statistics.median(sum(t.wall for t in r) for r in repeats)
        lines.append(f"| {name} | {len(decisions(run))} | {len(run) - len(decisions(run))} | "
                     f"{sum(t.prompt for t in run):,} | {total:.1f} |")  # fmt: skip
    return "\n".join(lines)


SECTION = "## The embedded model"


def section(runs: dict[str, list[list[Timed]]], repeats: int) -> str:
    """The docs section: what was measured, the table, a reading of round 30, the command."""
    today, layout, both = (_median_at(runs[setup.name], ROUNDS) for setup in SETUPS)
    return "\n".join(
        [
            SECTION,
            "",
            f"Decision latency of the embedded model (Gemma 3 270M on llama-cpp-python's server, 2 shared "
            f"cores) over a {ROUNDS}-round run of the workload above (5 tools), with the json protocol and the "
            f"embedded model's {EMBEDDED_BUDGET:,}-token budget: every request reinloop sent, summaries included, "
            f"replayed in order to one server started as reinloop starts it, each reply cut to {REPLAY_TOKENS} "
            f"tokens so that the time is the prompt's. Median (min-max) of {repeats} replays of each setup, taken "
            f"in turn; CPU is the server process's. The layout before is c374a02's; the server before is started "
            f"without `--logits_all false`.",
            "",
            table(runs),
            "",
            f"At round {ROUNDS} a decision took {today[0]:.1f} s ({today[1]:.1f} s CPU) before, {layout[0]:.1f} s "
            f"({layout[1]:.1f} s CPU) with the new layout alone and {both[0]:.1f} s ({both[1]:.1f} s CPU) with the "
            f"server's logits off too. Before, the memory note after the task changed every round from round 11, so "
            f"llama.cpp evaluated everything after the task again; now a decision evaluates only what was appended "
            f"since the previous one, except the first after a compaction (the summary request in between replaces "
            f"the KV cache, and the note changes): that one costs as much as before. Logits off halves the time of "
            f"the tokens that are evaluated (rounds 1 to 10, the decisions after a compaction, the whole run); at "
            f"rounds 20 and 30, a few hundred new tokens, the difference is within this machine's noise. The server's "
            f"`--cache` (a copy of the state after every reply, restored for an older prefix) was tried and not kept: "
            f"about 1 s more on every request, to save the system prompt and task (1,100 tokens) on the first "
            f"decision after a compaction.",
            "",
            f"Command: `git worktree add /tmp/before c374a02 && {COMMAND}` (the per-request figures are in the "
            f"`--out` folder).",
            "",
        ]
    )


def _median_at(repeats: list[list[Timed]], number: int) -> tuple[float, float]:
    rounds = [decisions(run)[number - 1] for run in repeats]
    return statistics.median(t.wall for t in rounds), statistics.median(t.cpu for t in rounds)


def write_section(page: Path, text: str) -> None:
    """`text` as the last section of `page`, in place of the one it replaces."""
    kept = page.read_text().split(f"\n{SECTION}\n")[0].rstrip("\n")
    page.write_text(f"{kept}\n\n{text}")


def per_round(runs: dict[str, list[list[Timed]]]) -> str:
    """Every request of each layout: kind, prompt tokens, median wall and CPU seconds."""
    lines = []
    for name, repeats in runs.items():
        lines.append(f"{name}:")
        for position, first in enumerate(repeats[0]):
            walls = [run[position].wall for run in repeats]
            cpus = [run[position].cpu for run in repeats]
            lines.append(f"  {position + 1:3d} {first.kind:8s} {first.prompt:6d} tokens  wall {_spread(walls)}  "
                         f"cpu {_spread(cpus)}")  # fmt: skip
    return "\n".join(lines)


@dataclass(frozen=True)
class Setup:
    """What one replay sends (the requests of a layout) to which server (as a tree's reinloop starts it)."""

    layout: Literal["before", "after"]
    server: Literal["before", "after"]

    @property
    def name(self) -> str:
        return f"{self.layout} layout, {self.server} server"


# Today's, the layout alone (the server as before), the layout and the server's settings.
SETUPS = (Setup("before", "before"), Setup("after", "before"), Setup("after", "after"))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--before", type=Path, help="a checkout of reinloop before the change (git worktree)")
    parser.add_argument("--after", type=Path, default=ROOT, help="the tree after it (default: this one)")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--repeats", type=int, default=3, help="replays of each setup, in turn")
    parser.add_argument("--out", type=Path, help="a folder for the recorded requests and the figures")
    parser.add_argument("--doc", type=Path, help="a docs page whose last section the figures become (docs/cost.md)")
    # The subprocesses: a recording (its output file), a replay (its requests and its output file).
    parser.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--replay", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--timed", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.record:
        record(args.rounds, args.record)
        return
    if args.replay:
        timed = replay(json.loads(args.replay.read_text())["requests"])
        args.timed.write_text(json.dumps([vars(t) for t in timed]))
        return
    if args.before is None:
        parser.error("--before is required: a checkout of the code before (git worktree add /tmp/before c374a02)")
    out = args.out or Path(tempfile.mkdtemp(prefix="local-latency-"))
    out.mkdir(parents=True, exist_ok=True)
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    for name, tree in trees.items():
        record_tree(tree, args.rounds, out / f"{name}.json")
    runs: dict[str, list[list[Timed]]] = {setup.name: [] for setup in SETUPS}
    for repeat in range(args.repeats):
        for setup in SETUPS:
            started = time.perf_counter()
            timed = replay_with(trees[setup.server], out / f"{setup.layout}.json", out / "timed.json")
            runs[setup.name].append(timed)
            print(
                f"repeat {repeat + 1}, {setup.name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True
            )
    report = f"{table(runs)}\n\n{per_round(runs)}\n"
    (out / "local_latency.md").write_text(report)
    (out / "runs.json").write_text(
        json.dumps({name: [[vars(t) for t in run] for run in rs] for name, rs in runs.items()})
    )
    if args.doc:
        write_section(args.doc, section(runs, args.repeats))
    print(report)


if __name__ == "__main__":
    main()
