"""The `reinloop` command: run a task, resume a thread, inspect its history and state, draw the graph, and
run the fault-injection benchmark (`reinloop eval`).

Runs are saved in a SQLite file in the user's data folder (`--db` or REINLOOP_DB to change it), so any run
can be resumed or inspected later by its thread id. Exit codes: 0 answered, 3 max_iterations,
4 error_streak, 5 dead_loop, 6 token_budget; 2 for a usage or set-up problem (one line, no traceback,
saved state untouched), 1 for an unexpected failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from reinloop.breakers import BREAKERS
from reinloop.errors import ReinloopError
from reinloop.protocols import PROTOCOLS
from reinloop.state import read_input

__all__ = ["EXIT_CODES", "main"]

EXIT_CODES: dict[str, int] = {entry.reason: entry.exit_code for entry in BREAKERS}
USAGE_ERROR = 2
SHOWN_CHARS = 160
# Run settings saved with each checkpoint (never keys), so `resume` rebuilds the same agent.
SETTINGS = ("model", "base_url", "workspace", "protocol")


class CommandError(Exception):
    """A problem the user fixes: reported on one line, exit code 2."""


def default_db() -> Path:
    if env := os.environ.get("REINLOOP_DB"):
        return Path(env)
    import platformdirs

    return platformdirs.user_data_path("reinloop") / "runs.sqlite"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    from rich.console import Console

    # Piped output is not cut to 80 columns: tables stay readable in logs and tests.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    errors = Console(stderr=True, highlight=False)
    try:
        return args.handler(args, console)
    except (CommandError, ReinloopError) as exc:
        errors.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        return USAGE_ERROR
    except KeyboardInterrupt:
        errors.print("[yellow]interrupted: the run is saved up to its last step; resume it with 'reinloop resume'[/]")
        return 130
    except Exception as exc:  # a failing model server, a full disk: one line, the saved steps stay
        if os.environ.get("REINLOOP_DEBUG"):
            raise
        reason = " ".join(str(exc).split()) or type(exc).__name__
        errors.print(
            f"[bold red]error:[/] {type(exc).__name__}: {reason} (steps saved so far are kept; 'reinloop resume' "
            "continues a run; REINLOOP_DEBUG=1 shows the traceback)",
            soft_wrap=True,
        )
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reinloop", description="A tool-using LLM agent with guard rails.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run a task")
    run.add_argument("task", help="what the agent should do")
    run.add_argument("--thread", help="thread id to save the run under (default: a new one)")
    _model_options(run)
    run.add_argument("--workspace", type=Path, default=Path("reinloop-workspace"), help="folder the tools work in")
    _limit_options(run)
    _common_options(run)
    run.set_defaults(handler=_run)

    resume = commands.add_parser("resume", help="continue a thread after a circuit break or a crash")
    resume.add_argument("thread")
    resume.add_argument("--extra-iterations", type=int, help="rounds to add (default: max_iterations)")
    resume.add_argument("--hint", help="a hint for the model")
    _model_options(resume)
    resume.add_argument("--workspace", type=Path, help="folder the tools work in (default: the run's)")
    _limit_options(resume)
    _common_options(resume)
    resume.set_defaults(handler=_resume)

    history = commands.add_parser("history", help="the steps and checkpoints of a thread")
    history.add_argument("thread")
    history.add_argument("--db", type=Path, default=None, help="runs database (default: user data folder)")
    history.set_defaults(handler=_history)

    show = commands.add_parser("show", help="the current state of a thread")
    show.add_argument("thread")
    show.add_argument("--db", type=Path, default=None, help="runs database (default: user data folder)")
    show.add_argument("--json", action="store_true", help="print the state as JSON")
    show.set_defaults(handler=_show)

    evaluation = commands.add_parser("eval", help="run the fault-injection benchmark: four agents, 50 tasks")
    evaluation.add_argument("--fault-rate", type=float, default=0.2, help="model mistakes per decision (0-1)")
    evaluation.add_argument("--tool-fault-rate", type=float, default=0.1, help="tool faults per call (0-1)")
    evaluation.add_argument("--correct-rate", type=float, default=0.7, help="chance the model fixes an error")
    evaluation.add_argument("--latency", type=float, default=0.0, help="simulated model latency per call (s)")
    evaluation.add_argument("--seed", type=int, default=0)
    evaluation.add_argument("--tasks", type=int, default=50, help="how many of the 50 tasks")
    evaluation.add_argument("--out", type=Path, default=Path("reinloop-eval"), help="folder for the report")
    evaluation.add_argument("--model", help="evaluate a real model instead of the simulated one (no faults)")
    evaluation.add_argument("--base-url", help="a real model on an OpenAI-compatible server (no faults)")
    evaluation.add_argument("--local", action="store_true", help="the embedded local model (no faults)")
    evaluation.set_defaults(handler=_eval)

    graph = commands.add_parser("graph", help="draw the agent's graph")
    graph.add_argument("--format", choices=["mermaid", "ascii", "png", "svg", "dot"], default="ascii")
    graph.add_argument("-o", "--output", type=Path, help="file to write (needed for png and svg)")
    graph.set_defaults(handler=_graph)
    return parser


def _model_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--model", help="a model string such as openai:gpt-4o-mini, or the model's name at --base-url")
    command.add_argument(
        "--base-url", help="an OpenAI-compatible server (Ollama, vLLM, llama.cpp), e.g. http://127.0.0.1:8080/v1"
    )
    command.add_argument("--protocol", choices=list(PROTOCOLS), help="how the model states decisions")


def _limit_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--max-iterations", type=int)
    command.add_argument("--error-threshold", type=int)
    command.add_argument("--tool-timeout", type=float, dest="tool_timeout_s")
    command.add_argument("--context-token-budget", type=int)
    command.add_argument("--run-token-budget", type=int)


def _common_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--db", type=Path, default=None, help="runs database (default: user data folder)")
    command.add_argument("--no-memory", action="store_true", help="no long-term memory store")
    command.add_argument("--quiet", action="store_true", help="print only the final answer")


# run and resume ---------------------------------------------------------------------------------------


def _run(args: argparse.Namespace, console: Any) -> int:
    # Checked before a model server starts or a database opens: a blank task is a usage error.
    task_input = read_input({"task": args.task})
    thread = args.thread or f"run-{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    settings = _given(args)
    with _saver(args.db, must_exist=False) as saver, _agent(args, settings, saver) as (agent, settings):
        config = _run_config(thread, settings)
        if agent.get_state(config).next:
            raise CommandError(f"thread {thread!r} is stopped mid-step; continue it with: reinloop resume {thread}")
        if not args.quiet:
            console.print(f"[dim]thread[/] [bold]{thread}[/]  [dim]model[/] {settings['model']}  "
                          f"[dim]db[/] {saver.db_path}")  # fmt: skip
        final = _stream(agent, task_input, config, console, args.quiet)
        return _finish(final, thread, console, args.quiet)


def _resume(args: argparse.Namespace, console: Any) -> int:
    from reinloop.resume import prepare_resume

    with _saver(args.db, must_exist=True) as saver:
        saved = _saved_settings(saver, args.thread)
        settings = {**saved, **{k: v for k, v in _given(args).items() if v is not None}}
        with _agent(args, settings, saver) as (agent, settings):
            config = _run_config(args.thread, settings)
            if not args.quiet:
                console.print(f"[dim]resuming thread[/] [bold]{args.thread}[/]  [dim]model[/] {settings['model']}")
            prepared = prepare_resume(agent, config, extra_iterations=args.extra_iterations, hint=args.hint)
            final = _stream(agent, None, prepared, console, args.quiet)
            return _finish(final, args.thread, console, args.quiet)


def _given(args: argparse.Namespace) -> dict[str, Any]:
    workspace = str(args.workspace.resolve()) if args.workspace else None
    return {"model": args.model, "base_url": args.base_url, "workspace": workspace, "protocol": args.protocol}


def _stream(agent: Any, payload: Any, config: dict, console: Any, quiet: bool) -> dict:
    printer = _Printer(console, quiet)
    for update in agent.stream(payload, config, stream_mode="updates"):
        for node, values in update.items():
            printer.update(node, values or {})
    return agent.get_state({"configurable": {"thread_id": config["configurable"]["thread_id"]}}).values


def _finish(values: dict, thread: str, console: Any, quiet: bool) -> int:
    reason = values.get("finish_reason")
    if quiet:
        if values.get("final_answer") is not None:
            console.print(values["final_answer"], soft_wrap=True)
    else:
        style = "green" if reason == "answered" else "yellow"
        console.rule(f"[{style}]{reason}[/]")
        if reason == "answered":
            console.print(values.get("final_answer") or "", soft_wrap=True)
        else:
            last = values.get("messages", [])[-1:] if values.get("messages") else []
            for message in last:
                console.print(message.text, soft_wrap=True)
            console.print(f"[dim]continue with:[/] reinloop resume {thread} --extra-iterations 10")
        usage = values.get("usage") or {}
        console.print(f"[dim]{values.get('iteration', 0)} rounds, {usage.get('model_calls', 0)} model calls, "
                      f"{usage.get('total_tokens', 0)} tokens[/]")  # fmt: skip
    return EXIT_CODES.get(reason or "", 1)


class _Printer:
    """One line per step as the graph streams: node, tool, arguments, observation, counters."""

    def __init__(self, console: Any, quiet: bool) -> None:
        self.console, self.quiet = console, quiet
        self.counters: dict[str, Any] = {}  # the latest value each node wrote, for the round line

    def update(self, node: str, values: dict) -> None:
        self.counters.update(
            {key: values[key] for key in ("consecutive_errors", "iterations_left", "usage") if key in values}
        )
        if self.quiet:
            return
        for message in values.get("messages", []) or []:
            self._message(node, message)
        if node == "check_finish":
            errors, left = self.counters.get("consecutive_errors", 0), self.counters.get("iterations_left", "-")
            tokens = (self.counters.get("usage") or {}).get("total_tokens", 0)
            self.console.print(
                f"  [dim]round {values.get('iteration')}  ·  errors in a row {errors}  ·  rounds left {left}"
                f"  ·  tokens {tokens}[/]"
            )
        if node == "validate_args" and values.get("correction"):
            self.console.print("  [yellow]↻ unreadable reply: asking again with a correction hint[/]")

    def _message(self, node: str, message: BaseMessage) -> None:
        if isinstance(message, AIMessage) and message.tool_calls:
            if message.text:
                self.console.print(f"[cyan]{node}[/] [italic]{_short(message.text)}[/]")
            for call in message.tool_calls:
                args = json.dumps(call["args"], ensure_ascii=False)
                self.console.print(f"[cyan]{node}[/] → [bold]{call['name']}[/]({_short(args)})")
        elif isinstance(message, ToolMessage):
            mark = "[red]✗[/]" if message.status == "error" else "[green]✓[/]"
            self.console.print(f"[cyan]{node}[/] {mark} {message.name}: {_short(message.text)}")
        elif getattr(message, "type", "") == "remove":
            return
        else:
            self.console.print(f"[cyan]{node}[/] {_short(message.text)}")


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def _run_config(thread: str, settings: dict) -> dict:
    metadata = {f"reinloop_{key}": value for key, value in settings.items() if isinstance(value, str)}
    return {"configurable": {"thread_id": thread}, "metadata": metadata}


def _saved_settings(saver: Any, thread: str) -> dict[str, Any]:
    found = saver.get_tuple({"configurable": {"thread_id": thread}})
    if found is None:
        raise CommandError(f"unknown thread {thread!r} in {saver.db_path}; 'reinloop run' starts one")
    return {key: found.metadata.get(f"reinloop_{key}") for key in SETTINGS}


# building the agent -------------------------------------------------------------------------------------


@contextmanager
def _saver(db: Path | None, *, must_exist: bool) -> Iterator[Any]:
    from reinloop.checkpoint import sqlite_checkpointer

    path = Path(db) if db else default_db()
    if must_exist and not path.exists():
        raise CommandError(f"no runs database at {path}; pass --db, or start a run with 'reinloop run'")
    saver = sqlite_checkpointer(path)
    saver.db_path = path
    try:
        yield saver
    finally:
        saver.conn.close()


@contextmanager
def _agent(args: argparse.Namespace, settings: dict, saver: Any) -> Iterator[tuple[Any, dict]]:
    from reinloop import AgentConfig, build_agent, default_toolset
    from reinloop.models import model_from_settings

    limits = {
        key: getattr(args, key)
        for key in ("max_iterations", "error_threshold", "tool_timeout_s", "context_token_budget", "run_token_budget")
        if getattr(args, key, None) is not None
    }
    with ExitStack() as stack:
        chosen = stack.enter_context(model_from_settings(settings["model"], settings["base_url"], settings["protocol"]))
        settings = {**settings, "model": chosen.label, "protocol": chosen.protocol}
        config = AgentConfig(protocol=chosen.protocol, **chosen.config, **limits)
        workspace = Path(settings["workspace"] or "reinloop-workspace")
        tools = default_toolset(workspace, model=chosen.model, weather_base_url=os.environ.get("REINLOOP_WEATHER_URL"))
        store = None if getattr(args, "no_memory", False) else _memory_store(stack, saver)
        agent = build_agent(chosen.model, tools, config=config, checkpointer=saver, store=store,
                            protocol=chosen.decision_protocol)  # fmt: skip
        yield agent, settings


def _memory_store(stack: ExitStack, saver: Any) -> Any:
    try:
        from reinloop.memory import sqlite_memory_store

        store = sqlite_memory_store(Path(saver.db_path).with_name("memory.sqlite"))
    except (ImportError, ReinloopError):
        return None  # the memory extra is not installed: summaries still work, recall does not
    stack.callback(store.conn.close)
    return store


# inspection ---------------------------------------------------------------------------------------------


def _history(args: argparse.Namespace, console: Any) -> int:
    from rich.table import Table

    with _saver(args.db, must_exist=True) as saver:
        config = {"configurable": {"thread_id": args.thread}}
        snapshots = list(_reader(saver).get_state_history(config))
        if not snapshots:
            raise CommandError(f"unknown thread {args.thread!r} in {saver.db_path}")
        table = Table(title=f"thread {args.thread}: {len(snapshots)} checkpoints")
        for column in ("step", "source", "next", "round", "errors", "tokens", "finish", "saved at", "checkpoint"):
            table.add_column(column)
        for snapshot in reversed(snapshots):
            values, metadata = snapshot.values, snapshot.metadata or {}
            table.add_row(
                str(metadata.get("step", "")),
                str(metadata.get("source", "")),
                ", ".join(snapshot.next),
                str(values.get("iteration", "")),
                str(values.get("consecutive_errors", "")),
                str((values.get("usage") or {}).get("total_tokens", "")),
                str(values.get("finish_reason") or ""),
                (snapshot.created_at or "")[:19].replace("T", " "),
                snapshot.config["configurable"]["checkpoint_id"][-8:],
            )
        console.print(table)
    return 0


def _reader(saver: Any) -> Any:
    """The agent's graph on `saver`, for reading saved threads: the topology needs no model or tools."""
    from reinloop import build_agent
    from reinloop.testing import ScriptedChatModel

    return build_agent(ScriptedChatModel(), [], checkpointer=saver)


def _show(args: argparse.Namespace, console: Any) -> int:
    from rich.text import Text

    with _saver(args.db, must_exist=True) as saver:
        snapshot = _reader(saver).get_state({"configurable": {"thread_id": args.thread}})
        if not snapshot.values:
            raise CommandError(f"unknown thread {args.thread!r} in {saver.db_path}")
        values = snapshot.values
        if args.json:
            console.print_json(json.dumps(_plain(values), default=str))
            return 0
        console.rule(Text(f"thread {args.thread}"))
        # Saved text comes from the model and the tools: printed as plain text, never read as rich markup.
        for key in ("task", "finish_reason", "final_answer", "iteration", "consecutive_errors", "usage"):
            console.print(Text.assemble((key, "bold"), f": {values.get(key)}"), soft_wrap=True)
        if snapshot.next:
            console.print(f"[bold]stopped before[/]: {', '.join(snapshot.next)} (resume continues from there)")
        for call in values.get("in_doubt") or []:
            args = json.dumps(call["args"], ensure_ascii=False)
            detail = (
                f": {call['name']}({_short(args)}) was in flight when the run stopped and was not run again "
                f"(the tool is not idempotent); key {call['key']}"
            )
            console.print(Text.assemble(("outcome unknown", "bold red"), detail), soft_wrap=True)
        for summary in values.get("summaries") or []:
            console.print(Text.assemble(("summary", "bold"), f": {_short(summary)}"))
        console.print("[bold]window[/]:")
        for message in values.get("messages", []):
            label = message.name or message.type
            calls = getattr(message, "tool_calls", None)
            text = message.text or (json.dumps([[c["name"], c["args"]] for c in calls]) if calls else "")
            console.print(Text.assemble("  ", (label, "cyan"), f" {_short(text)}"), soft_wrap=True)
    return 0


def _plain(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        return {"type": value.type, "name": value.name, "content": value.content,
                "tool_calls": getattr(value, "tool_calls", None)}  # fmt: skip
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _eval(args: argparse.Namespace, console: Any) -> int:
    from rich.progress import Progress

    from reinloop.eval import AGENTS, SUITE, FaultProfile, evaluate_suite, write_report
    from reinloop.eval.run import markdown_table

    for name in ("fault_rate", "tool_fault_rate", "correct_rate"):
        if not 0 <= getattr(args, name) <= 1:
            raise CommandError(f"--{name.replace('_', '-')} must be between 0 and 1")
    if not 1 <= args.tasks <= len(SUITE):
        raise CommandError(f"--tasks must be between 1 and {len(SUITE)}")
    profile = FaultProfile(
        fault_rate=args.fault_rate,
        correct_rate=args.correct_rate,
        tool_fault_rate=args.tool_fault_rate,
        latency_s=args.latency,
    )
    with ExitStack() as stack:
        real, agents = None, AGENTS
        if args.model or args.base_url or args.local:
            from reinloop.models import LOCAL, model_from_settings

            model = LOCAL if args.local else args.model
            real = stack.enter_context(model_from_settings(model, args.base_url, None))
            profile = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0, correct_rate=1.0)
            # The others need native tool calls; a json-protocol model runs with reinloop only.
            agents = AGENTS if real.protocol == "tool_calling" else ("reinloop",)
        with Progress(console=console, transient=True) as progress:
            bar = progress.add_task("evaluating", total=args.tasks * len(agents))

            def advance(agent: str, task: str) -> None:
                progress.update(bar, advance=1, description=f"{agent}: {task}")

            records = evaluate_suite(
                profile=profile, seed=args.seed, tasks=args.tasks, agents=agents, progress=advance, real=real
            )
    summary = write_report(records, profile, args.seed, args.out)
    console.print(markdown_table(summary), markup=False, highlight=False)
    written = [
        str(args.out / name) for name in ("report.md", "report.json", "report.png") if (args.out / name).exists()
    ]
    console.print(f"report: {', '.join(written)}")
    if not (args.out / "report.png").exists():
        console.print("[dim]no chart: pip install 'reinloop[eval]' for report.png[/]")
    return 0


def _graph(args: argparse.Namespace, console: Any) -> int:
    from reinloop import draw

    if args.format in ("png", "svg") and args.output is None:
        raise CommandError(f"--format {args.format} writes a file: give it with -o FILE")
    result = draw(_reader(None), args.format, args.output)
    if args.output is None:
        console.print(result, markup=False, highlight=False)
    else:
        console.print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
