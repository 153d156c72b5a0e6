"""`reinloop eval`: the fault profile and the options read from the command line and checked, then the
benchmark (`run_benchmark`) or the fault grid (`run_grid`) run behind a progress bar, and their report shown.
The evaluation, `reinloop_eval`, loads only when the command runs."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console

from reinloop.cli import CommandError, display

__all__ = ["evaluate"]


def evaluate(args: argparse.Namespace, console: Console) -> int:
    from reinloop_eval import run_benchmark

    profile = _fault_profile(args)
    if args.protocol and not _real_model(args):
        raise CommandError(
            "--protocol is a real model's (--model, --base-url or --local); the simulated one writes each agent's"
        )
    if args.presets and (_real_model(args) or args.grid):
        raise CommandError(
            "--presets runs the simulated model on one profile: leave out --model, --base-url, --local and --grid"
        )
    if args.costly and _real_model(args):
        raise CommandError("--costly runs the simulated model: leave out --model, --base-url and --local")
    if args.grid:
        return _grid(args, profile, console)
    with _progress_bar(console) as advance:

        def after_run(done: int, total: int, agent: str, task: str) -> None:
            advance(done, total, f"{agent}: {task}")

        result = run_benchmark(profile, seed=args.seed, tasks=args.tasks, out=args.out, model=args.model,
                               base_url=args.base_url, local=args.local, protocol=args.protocol,
                               presets=args.presets, progress=after_run)  # fmt: skip
    display.benchmark_report(console, result)
    return 0


def _grid(args: argparse.Namespace, profile: Any, console: Console) -> int:
    from reinloop_eval import GridSpec, run_grid

    if _real_model(args):
        raise CommandError("--grid runs the simulated model: leave out --model, --base-url and --local")
    _check_rates("--fault-rates", args.fault_rates)
    _check_rates("--correct-rates", args.correct_rates)
    if args.workers < 1:
        raise CommandError("--workers must be at least 1")
    spec = GridSpec(fault_rates=tuple(args.fault_rates), correct_rates=tuple(args.correct_rates),
                    seeds=tuple(args.seeds), tasks=args.tasks, base=profile)  # fmt: skip
    with _progress_bar(console) as advance:
        result = run_grid(spec, out=args.out, workers=args.workers,
                          progress=lambda done, total: advance(done, total, "fault grid"))  # fmt: skip
    display.benchmark_report(console, result)
    return 0


def _real_model(args: argparse.Namespace) -> bool:
    """Whether `eval` runs a real model (--model, --base-url or --local) instead of the simulated one."""
    return bool(args.model or args.base_url or args.local)


def _fault_profile(args: argparse.Namespace) -> Any:
    """The simulated model's faults from the command line, checked."""
    from reinloop_eval import SUITE, FaultProfile
    from reinloop_eval.faults import costly_profile
    from reinloop_eval.simulated import EXTRA_FAULTS

    names = ["fault_rate", "tool_fault_rate", "correct_rate", "runaway_rate", "stubborn_rate"]
    names += [f"{fault}_rate" for fault in EXTRA_FAULTS]
    for name in names:
        _check_rates(f"--{name.replace('_', '-')}", [getattr(args, name)])
    if not 1 <= args.tasks <= len(SUITE):
        raise CommandError(f"--tasks must be between 1 and {len(SUITE)}")
    if args.runaway_rounds is not None and args.runaway_rounds < 1:
        raise CommandError("--runaway-rounds must be at least 1")
    if args.runaway_width < 1:
        raise CommandError("--runaway-width must be at least 1")
    rates = {name: getattr(args, name) for name in names}
    profile = FaultProfile(
        **rates, latency_s=args.latency, runaway_rounds=args.runaway_rounds, runaway_width=args.runaway_width
    )
    return costly_profile(profile) if args.costly else profile


def _check_rates(option: str, rates: list[float]) -> None:
    if not all(0 <= rate <= 1 for rate in rates):
        raise CommandError(f"{option} must be between 0 and 1")


@contextmanager
def _progress_bar(console: Console) -> Iterator[Callable[[int, int, str], None]]:
    """A progress bar for the benchmark: yields `advance(done, total, description)`."""
    from rich.markup import escape
    from rich.progress import Progress

    with Progress(console=console, transient=True) as progress:
        bar = progress.add_task("evaluating", total=None)

        def advance(done: int, total: int, description: str) -> None:
            progress.update(bar, completed=done, total=total, description=escape(description))

        yield advance
