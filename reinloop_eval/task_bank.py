"""The task bank: hundreds of tasks drawn from the suite's families (calculations, unit conversions found by search
then computed, company figures and their growth, files, database rows, a file written then read back) with
other numbers, names and contents, each with its plan and the same kind of check as `SUITE`'s. Generated from a
fixed seed, so `task_bank(n)` is the same n tasks everywhere; the families take turns, so any first n mix them."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import random
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any

from reinloop.tools.calculator import evaluate, format_number
from reinloop_eval.tasks import EvalTask, Step

__all__ = ["BANK_SIZE", "task_bank"]

BANK_SIZE = 240  # tasks the bank holds: the real-model benchmark's 200 and more
BANK_SEED = 46  # the draws of every family; changing it changes every task

# Conversions the bundled search corpus states (reinloop/tools/data/corpus/units.md): (unit, plural, target,
# query, factor).
CONVERSIONS = (
    ("mile", "miles", "kilometres", "mile kilometres", "1.609344"),
    ("inch", "inches", "centimetres", "inch centimetres", "2.54"),
    ("foot", "feet", "metres", "foot metres", "0.3048"),
    ("nautical mile", "nautical miles", "metres", "nautical mile metres", "1852"),
)
OPERATIONS = ("{a} * {b}", "{a} + {b}", "{a} - {b}", "({a} + {b}) * {c}", "{a} * {b} - {c}", "{a} // {c}", "{a} % {c}")
WORDS = ("amber", "birch", "cedar", "delta", "ember", "fjord", "glade", "harbor", "indigo", "juniper", "kestrel",
         "lagoon", "meadow", "nectar", "orchid", "pebble", "quartz", "raven", "saffron", "tundra")  # fmt: skip
NAMES = ("Ada Byron", "Alan Kay", "Barbara Liskov", "Claude Shannon", "Donald Knuth", "Edsger Dijkstra",
         "Frances Allen", "Grace Murray", "Hedy Lamarr", "John Backus", "Ken Thompson", "Leslie Lamport",
         "Margaret Hamilton", "Niklaus Wirth", "Radia Perlman", "Tony Hoare")  # fmt: skip
ITEMS = ("coffee", "lunch", "taxi", "notebook", "train ticket", "museum entry", "bus pass", "umbrella")
CURRENCIES = ("EUR", "GBP", "USD")


def task_bank(count: int = BANK_SIZE) -> tuple[EvalTask, ...]:
    """The bank's first `count` tasks (at most `BANK_SIZE`)."""
    if not 0 <= count <= BANK_SIZE:
        raise ValueError(f"the task bank holds {BANK_SIZE} tasks; asked for {count}")
    return _bank()[:count]


@functools.cache
def _bank() -> tuple[EvalTask, ...]:
    rng = random.Random(BANK_SEED)
    families = {name: _numbered(name, make, rng) for name, make in FAMILIES.items()}
    tasks: list[EvalTask] = []
    seen: set[str] = set()
    for name in itertools.cycle(TURNS):
        task = next(families[name])
        if task.prompt not in seen:  # a draw that repeats a prompt is drawn again, so every task is distinct
            seen.add(task.prompt)
            tasks.append(task)
        if len(tasks) == BANK_SIZE:
            return tuple(tasks)
    raise AssertionError("unreachable: itertools.cycle never ends")


def _numbered(name: str, make: Callable[[random.Random], EvalTask], rng: random.Random) -> Iterator[EvalTask]:
    """The family `name`'s tasks, each given the id `bank-<name>-<n>`."""
    for number in itertools.count(1):
        yield dataclasses.replace(make(rng), id=f"bank-{name}-{number:03d}")


def _calc(rng: random.Random) -> EvalTask:
    expression = rng.choice(OPERATIONS).format(a=rng.randint(12, 999), b=rng.randint(2, 99), c=rng.randint(2, 19))
    value = format_number(evaluate(expression))
    return EvalTask("", f"Compute {expression}.", (Step("calculator", {"expression": expression}),),
                    f"The result is {value}.", expect=value)  # fmt: skip


def _convert(rng: random.Random) -> EvalTask:
    _, plural, target, query, factor = rng.choice(CONVERSIONS)
    amount = rng.randint(2, 250)
    expression = f"{amount} * {factor}"
    value = format_number(evaluate(expression))
    return EvalTask(
        "",
        f"How many {target} are {amount} {plural}?",
        (Step("web_search", {"query": query, "max_results": 3}), Step("calculator", {"expression": expression})),
        f"That is {value}.",
        expect=value,
    )


@functools.cache
def _companies() -> dict[str, Any]:
    text = (resources.files("reinloop.tools") / "data" / "financials.json").read_text(encoding="utf-8")
    companies: dict[str, Any] = json.loads(text)["companies"]
    return companies


def _figure(rng: random.Random) -> tuple[str, str, str]:
    company = rng.choice(sorted(_companies()))
    year = rng.choice(sorted(_companies()[company]["years"]))
    metric = rng.choice(sorted(_companies()[company]["years"][year]))
    return company, metric, year


def _metric(metric: str) -> str:
    return "number of employees" if metric == "employees" else metric.replace("_", " ")


def _finance(rng: random.Random) -> EvalTask:
    company, metric, year = _figure(rng)
    while isinstance(figure := _companies()[company]["years"][year][metric], float) and figure.is_integer():
        # The tool states 22.0, an answer says 22: no figure one of them would fail on.
        company, metric, year = _figure(rng)
    value = format_number(_companies()[company]["years"][year][metric])
    return EvalTask(
        "",
        f"What was the {_metric(metric)} of {company} in {year}?",
        (Step("financial_data", {"company": company, "metric": metric, "year": int(year)}),),
        f"It was {value}.",
        expect=value,
    )


def _growth(rng: random.Random) -> EvalTask:
    company, metric, _ = _figure(rng)
    first, last = sorted(rng.sample(sorted(_companies()[company]["years"]), 2))
    years = _companies()[company]["years"]
    # The larger minus the smaller, so the answer is never a negative number stated as a fall.
    high, low = sorted((years[first][metric], years[last][metric]), reverse=True)
    expression = f"{format_number(high)} - {format_number(low)}"
    value = format_number(evaluate(expression))
    return EvalTask(
        "",
        f"How large is the difference between the {_metric(metric)} of {company} in {first} and in {last}?",
        (
            Step("financial_data", {"company": company, "metric": metric, "year": int(first)}),
            Step("financial_data", {"company": company, "metric": metric, "year": int(last)}),
            Step("calculator", {"expression": expression}),
        ),
        f"It changed by {value}.",
        expect=value,
    )


def _file(rng: random.Random) -> EvalTask:
    path = f"{rng.choice(WORDS)}/{rng.choice(WORDS)}.txt"
    content = f"{rng.choice(WORDS)} {rng.choice(WORDS)} {rng.randint(1, 99)}"
    return EvalTask(
        "",
        f"Write exactly this text to the file {path}: {content}",
        (Step("file_write", {"path": path, "content": content}),),
        f"I wrote the text to {path}.",
        file=(path, content),
    )


def _row(rng: random.Random) -> EvalTask:
    kind = rng.randrange(3)
    if kind == 0:
        values: dict[str, Any] = {
            "title": rng.choice(WORDS).title(),
            "body": f"{rng.choice(WORDS)}, {rng.choice(WORDS)}",
        }
        table, prompt = "notes", f"Add a note titled {values['title']} saying: {values['body']}."
    elif kind == 1:
        name = rng.choice(NAMES)
        values = {"name": name, "email": f"{name.split()[0].lower()}{rng.randint(1, 99)}@example.com"}
        table, prompt = "contacts", f"Save the contact {name}, {values['email']}."
    else:
        values = {"item": rng.choice(ITEMS), "amount": rng.randint(2, 120), "currency": rng.choice(CURRENCIES)}
        table, prompt = "expenses", f"Record an expense: {values['item']}, {values['amount']} {values['currency']}."
    return EvalTask("", prompt, (Step("db_insert", {"table": table, "values": values}),),
                    f"I added the row to {table}.", row=(table, values))  # fmt: skip


def _write_read(rng: random.Random) -> EvalTask:
    path, word = f"{rng.choice(WORDS)}.txt", f"{rng.choice(WORDS)}{rng.randint(1, 99)}"
    return EvalTask(
        "",
        f"Write '{word}' to {path}, then read the file back and tell me what it says.",
        (Step("file_write", {"path": path, "content": word}), Step("file_read", {"path": path})),
        f"The file says: {word}.",
        expect=word,
        file=(path, word),
    )


FAMILIES: dict[str, Callable[[random.Random], EvalTask]] = {
    "calc": _calc,
    "convert": _convert,
    "finance": _finance,
    "file": _file,
    "db": _row,
    "growth": _growth,
    "write-read": _write_read,
}
# The order the families take turns in: the suite's mix, calculations (its largest family) twice a cycle.
TURNS = ("calc", "convert", "finance", "file", "db", "calc", "growth", "write-read")
