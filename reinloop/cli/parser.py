"""The command line of `reinloop`: one subcommand per command in `commands`, each option defined once."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from reinloop.cli import commands
from reinloop.cli.batches import add_batch_options
from reinloop.cli.browse import DEFAULT_PORT
from reinloop.presets import PRESETS, canonical_name
from reinloop.protocols import PROTOCOLS

__all__ = ["DRAW_FORMATS", "PRESET_CHOICES", "PROTOCOL_CHOICES", "build_parser", "rounds"]

PROTOCOL_CHOICES = list(PROTOCOLS)
PRESET_CHOICES = list(PRESETS)
DRAW_FORMATS = ["mermaid", "ascii", "png", "svg", "dot"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reinloop", description="A tool-using LLM agent with guard rails.")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    database, agent = _database_options(), _agent_options()

    run = subcommands.add_parser("run", parents=[database, agent], help="run a task")
    run.add_argument("task", help="what the agent should do")
    run.add_argument("--thread", help="thread id to save the run under (default: a new one)")
    run.add_argument("--workspace", type=Path, default=Path("reinloop-workspace"), help="folder the tools work in")
    run.set_defaults(handler=commands.run)

    resume = subcommands.add_parser(
        "resume", parents=[database, agent], help="continue a thread after a circuit break or a crash"
    )
    resume.add_argument("thread")
    resume.add_argument("--extra-iterations", type=rounds, help="rounds to add (default: max_iterations)")
    resume.add_argument("--hint", help="a hint for the model")
    resume.add_argument("--workspace", type=Path, help="folder the tools work in (default: the run's)")
    resume.set_defaults(handler=commands.resume)

    batch = subcommands.add_parser(
        "batch", parents=[database, agent], help="run an agent over the tasks of a JSONL file, resumably"
    )
    add_batch_options(batch)
    batch.add_argument("--workspace", type=Path, default=Path("reinloop-workspace"), help="folder the tools work in")
    batch.set_defaults(handler=commands.batch)

    history = subcommands.add_parser("history", parents=[database], help="the steps and checkpoints of a thread")
    history.add_argument("thread")
    history.set_defaults(handler=commands.history)

    show = subcommands.add_parser("show", parents=[database], help="the current state of a thread")
    show.add_argument("thread")
    show.add_argument("--json", action="store_true", help="print the state as JSON")
    show.set_defaults(handler=commands.show)

    inspect = subcommands.add_parser(
        "inspect", parents=[database], help="serve a local web page of the threads: graph, timeline, live updates"
    )
    inspect.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default: {DEFAULT_PORT}")
    inspect.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)"
    )
    inspect.add_argument(
        "--allow-actions",
        action="store_true",
        help="let the page resume a break and answer approvals, as 'reinloop resume' does (default: read-only)",
    )
    inspect.add_argument("--no-memory", action="store_true", help="runs resumed from the page get no long-term memory")
    inspect.add_argument(
        "--model", help="the model that resumes threads saved without one (started from Python, not by 'reinloop run')"
    )
    inspect.add_argument("--base-url", help="an OpenAI-compatible server for those threads, as 'reinloop run' takes it")
    inspect.set_defaults(handler=commands.inspect)

    prune = subcommands.add_parser(
        "prune", parents=[database], help="delete superseded checkpoints: keep each thread's latest and marked ones"
    )
    prune.add_argument(
        "--thread", action="append", dest="threads", metavar="ID", help="a thread to prune (repeat; default: all)"
    )
    prune.add_argument("--keep", type=int, default=1, help="latest checkpoints to keep per thread (default: 1)")
    prune.add_argument(
        "--keep-id",
        action="append",
        default=[],
        dest="keep_ids",
        metavar="ID",
        help="a checkpoint to keep, its id as 'history' shows it (repeat for more; needs --thread)",
    )
    prune.add_argument(
        "--vacuum", action="store_true", help="shrink the SQLite file afterwards (PostgreSQL: VACUUM the tables)"
    )
    prune.add_argument("--dry-run", action="store_true", help="report what would be deleted; delete nothing")
    prune.set_defaults(handler=commands.prune)

    mark = subcommands.add_parser("mark", parents=[database], help="keep a checkpoint through every prune")
    mark.add_argument("thread")
    mark.add_argument("--checkpoint", metavar="ID", help="its id as 'history' shows it (default: the latest)")
    mark.add_argument("--label", default="", help="why it is kept, shown by 'history'")
    mark.add_argument("--remove", action="store_true", help="unmark it: prune may delete it again")
    mark.set_defaults(handler=commands.mark)

    evaluation = subcommands.add_parser(
        "eval", help="run the fault-injection benchmark: five agents, 50 tasks", later=_eval_options
    )
    evaluation.set_defaults(handler=commands.evaluate)

    tools = subcommands.add_parser("tools", help="list the tools a run gets: each one's arguments and source")
    tools.add_argument("--workspace", type=Path, default=Path("reinloop-workspace"), help="folder the tools work in")
    _mcp_options(tools, "")
    tools.set_defaults(handler=commands.tools)

    graph = subcommands.add_parser("graph", help="draw the agent's graph")
    graph.add_argument("--format", choices=DRAW_FORMATS, default="ascii")
    graph.add_argument("-o", "--output", type=Path, help="file to write (needed for png and svg)")
    graph.set_defaults(handler=commands.graph)
    return parser


def rounds(text: str) -> int:
    """A count of rounds as `reinloop.resume` takes it (`reinloop.runs.check_rounds`), for argparse."""
    from reinloop.runs import check_rounds

    try:
        return check_rounds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class _Parser(argparse.ArgumentParser):
    """A command's parser, whose options may come when it first reads a command line (`later`)."""

    def __init__(self, *args: Any, later: Callable[[argparse.ArgumentParser], None] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.later = later

    def parse_known_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> tuple[Any, list[str]]:
        later, self.later = self.later, None  # the subcommands action reads the chosen command's arguments here
        if later is not None:
            later(self)
        return super().parse_known_args(args, namespace)


def _eval_options(evaluation: argparse.ArgumentParser) -> None:
    """The options of `eval`, whose seeds and faults the evaluation defines: added when the command line names
    `eval` (`_Parser`), so that no other command loads `reinloop_eval`."""
    from reinloop_eval.run import REPORTING_SEEDS
    from reinloop_eval.simulated import EXTRA_FAULT_RATE, EXTRA_FAULTS

    evaluation.add_argument("--fault-rate", type=float, default=0.2, help="model mistakes per decision (0-1)")
    evaluation.add_argument("--tool-fault-rate", type=float, default=0.1, help="tool faults per call (0-1)")
    evaluation.add_argument("--correct-rate", type=float, default=0.7, help="chance the model fixes an error")
    evaluation.add_argument("--latency", type=float, default=0.0, help="simulated model latency per call (s)")
    evaluation.add_argument(
        "--seed", type=int, default=REPORTING_SEEDS[0], help=f"default: {REPORTING_SEEDS[0]} (a reporting seed)"
    )
    evaluation.add_argument("--tasks", type=int, default=50, help="how many of the 50 tasks")
    evaluation.add_argument("--out", type=Path, default=Path("reinloop-eval"), help="folder for the report")
    evaluation.add_argument("--model", help="evaluate a real model instead of the simulated one (no faults)")
    evaluation.add_argument("--base-url", help="a real model on an OpenAI-compatible server (no faults)")
    evaluation.add_argument("--local", action="store_true", help="the embedded local model (no faults)")
    evaluation.add_argument("--protocol", choices=PROTOCOL_CHOICES, help="the real model's protocol")
    evaluation.add_argument(
        "--presets", action="store_true", help="the seed presets as more rows, each in its own protocol (simulated)"
    )
    evaluation.add_argument(
        "--runaway-rate", type=float, default=0.0, help="chance a run's model runs away once it knows the answer"
    )
    evaluation.add_argument(
        "--runaway-rounds", type=int, help="decisions a runaway makes, then answers (default: no end)"
    )
    evaluation.add_argument(
        "--runaway-width", type=int, default=1, help="new calls each runaway decision makes at once (default: 1)"
    )
    evaluation.add_argument(
        "--stubborn-rate", type=float, default=0.0, help="chance the model repeats a call that just succeeded"
    )
    evaluation.add_argument(
        "--costly",
        action="store_true",
        help="the costly faults of reinloop_eval/costly_faults.toml: payments, hopeless tasks, runaways at its "
        "rate (replacing --runaway-rate), invalid arguments reaching the tools (simulated)",
    )
    extra = {
        "wrong_args": "valid arguments with a wrong value",
        "near_repeat": "after a success, the same tool with slightly changed arguments, on and on",
        "premature": "an answer before the plan is done",
        "text_call": "the next call written as plain text",
        "empty": "an empty reply",
    }
    for fault in EXTRA_FAULTS:
        evaluation.add_argument(
            f"--{fault.replace('_', '-')}-rate",
            type=float,
            default=EXTRA_FAULT_RATE,
            help=f"per decision: {extra[fault]} (default: {EXTRA_FAULT_RATE})",
        )
    _grid_options(evaluation, REPORTING_SEEDS)


def _grid_options(evaluation: argparse.ArgumentParser, seeds: tuple[int, ...]) -> None:
    grid = evaluation.add_argument_group(
        "fault grid", "with --grid, these replace --fault-rate, --correct-rate, --seed"
    )
    grid.add_argument("--grid", action="store_true", help="run every fault rate x correct rate x seed")
    grid.add_argument("--fault-rates", type=float, nargs="+", default=[0.1, 0.3, 0.5], metavar="R",
                      help="default: 0.1 0.3 0.5")  # fmt: skip
    grid.add_argument("--correct-rates", type=float, nargs="+", default=[0.3, 0.7], metavar="R",
                      help="default: 0.3 0.7")  # fmt: skip
    grid.add_argument("--seeds", type=int, nargs="+", default=list(seeds), metavar="N",
                      help=f"default: {' '.join(map(str, seeds))} (the reporting seeds)")  # fmt: skip
    grid.add_argument("--workers", type=int, default=1, help="processes to run the grid in (default: 1)")


def _database_options() -> _Parser:
    options = _Parser(add_help=False)
    # A string, not a Path: a Path would fold the // of a postgresql:// URL.
    options.add_argument(
        "--db",
        default=None,
        help="runs database: a SQLite file or a postgresql:// URL (default: REINLOOP_DB, else the user data folder)",
    )
    return options


def _limit_help(field: str) -> str:
    """The help of the option that sets AgentConfig's `field`: the field's own description and default."""
    from reinloop.config import AgentConfig

    info = AgentConfig.model_fields[field]
    default = format(info.default, "g") if isinstance(info.default, float) else str(info.default).lower()
    # argparse reads % as a format: the descriptions are text.
    text = f"{info.description} (default: {default}, unless the --preset or the model sets its own)"
    return text.replace("%", "%%")


def _mcp_options(options: argparse.ArgumentParser, resumed: str) -> None:
    """The MCP servers whose tools join the toolset; `resumed` says what resume does without them."""
    options.add_argument(
        "--mcp-config",
        metavar="FILE",
        help='an MCP client config file ({"mcpServers": {...}}): its servers\' tools join the toolset' + resumed,
    )
    options.add_argument(
        "--mcp-prefix",
        action="store_true",
        help="name each MCP tool after its server (time_get_current_time), for servers whose tool names clash"
        + resumed,
    )


def _agent_options() -> _Parser:
    """The model, its limits and the run's extras, shared by run and resume."""
    options = _Parser(add_help=False)
    options.add_argument("--model", help="a model string such as openai:gpt-4o-mini, or the model's name at --base-url")
    options.add_argument(
        "--base-url", help="an OpenAI-compatible server (Ollama, vLLM, llama.cpp), e.g. http://127.0.0.1:8080/v1"
    )
    options.add_argument(
        "--preset",
        type=canonical_name,
        choices=PRESET_CHOICES,
        help="a seed article's loop (reinloop.presets) as the base settings, which the other options override "
        "(resume keeps the run's)",
    )
    options.add_argument("--protocol", choices=PROTOCOL_CHOICES, help="how the model states decisions")
    options.add_argument("--max-iterations", type=int, metavar="N", help=_limit_help("max_iterations"))
    options.add_argument("--error-threshold", type=int, metavar="N", help=_limit_help("error_threshold"))
    options.add_argument("--max-replans", type=int, metavar="N", help=_limit_help("max_replans"))
    options.add_argument("--tool-timeout", type=float, dest="tool_timeout_s", metavar="S",
                         help=_limit_help("tool_timeout_s"))  # fmt: skip
    options.add_argument("--context-token-budget", type=int, metavar="N", help=_limit_help("context_token_budget"))
    options.add_argument("--run-token-budget", type=int, metavar="N", help=_limit_help("run_token_budget"))
    options.add_argument("--max-tools", type=int, metavar="N", help=_limit_help("max_tools"))
    options.add_argument("--thread-wait", type=float, dest="thread_wait_s", metavar="S",
                         help="seconds to wait while another process runs the thread, then exit with code 75 "
                         "(busy; default: 0, at once)")  # fmt: skip
    options.add_argument("--no-memory", action="store_true", help="no long-term memory store")
    options.add_argument(
        "--approve",
        action="append",
        metavar="TOOL",
        help="ask on the terminal before each call of TOOL: approve, edit its arguments, or reject it with a "
        "reason for the model (repeat for more tools; default: file_write and db_insert, which change files "
        "and data; resume keeps the run's)",
    )
    options.add_argument("--yes", action="store_true", help="approve every call without asking")
    options.add_argument("--quiet", action="store_true", help="print only the final answer")
    _mcp_options(options, " (resume keeps the run's)")
    return options
