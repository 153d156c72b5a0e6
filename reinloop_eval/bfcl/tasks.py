"""BFCL's tasks as the evaluation runs them: the user's request of each turn, the functions as LangChain tools
described by JSON schema, and the ground truth as a replay plan; and the tools that record the calls a run
executes, which the AST categories only record and the multi-turn ones run in BFCL's environments."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from langchain_core.tools import BaseTool, StructuredTool

from reinloop.tools.registry import POLICY_KEY
from reinloop_eval.bfcl.bridge import Bfcl
from reinloop_eval.tasks import Step

__all__ = [
    "AST_CATEGORIES",
    "AST_RESULT",
    "CATEGORIES",
    "SHOWN_EMPTY",
    "BfclTask",
    "Category",
    "Executed",
    "call_text",
    "load_tasks",
]

Category = Literal["simple_python", "multiple", "parallel", "parallel_multiple", "multi_turn_base"]
CATEGORIES: tuple[Category, ...] = get_args(Category)
AST_CATEGORIES: tuple[Category, ...] = CATEGORIES[:4]
SAMPLE_SEED = "bfcl-sample"  # the sample of a category is drawn from this and the category's name, not a run's seed

# What a function of an AST category answers: BFCL scores the calls made, nothing runs.
AST_RESULT = '{"status": "done"}'
# How a multi-turn call's empty result is shown: BFCL shows a method that returns nothing (mkdir, touch, echo) as
# "None" and cd(folder='..') as "{}", which reinloop's default result check and the simulated model alike read as
# an empty result, a failed call, when the call did its work.
SHOWN_EMPTY = {"None": '{"result": null}', "{}": '{"result": {}}', "[]": '{"result": []}', "": '{"result": ""}'}
# Multi-turn methods change their environment: a repeat must run again, never be answered from a cache.
STATEFUL_POLICY = {POLICY_KEY: {"cacheable": False, "idempotent": False}}
# The multi-turn methods that only read their environment or compute, declared idempotent as a careful user
# would (running one again after a lost connection is harmless); their repeats still run, never from a cache.
# The rest change something (files, orders, messages, the car, a login, the working folder) or are left
# undeclared where one call twice might (echo writes a file; a login counts).
READ_ONLY = frozenset(
    {
        # math and units
        "absolute_value", "add", "divide", "logarithm", "max_value", "mean", "min_value", "multiply",
        "percentage", "power", "round_number", "square_root", "standard_deviation", "subtract", "sum_values",
        "imperial_si_conversion", "si_unit_conversion", "gallon_to_liter", "liter_to_gallon",
        "compute_exchange_rate", "estimate_distance", "estimate_drive_feasibility_by_mileage",
        # the file system's reads
        "cat", "diff", "du", "find", "grep", "ls", "pwd", "sort", "tail", "wc",
        # getters and searches
        "check_tire_pressure", "displayCarStatus", "display_log", "filter_stocks_by_price",
        "find_nearest_tire_shop", "get_account_info", "get_all_credit_cards", "get_available_stocks",
        "get_booking_history", "get_budget_fiscal_year", "get_credit_card_balance", "get_current_speed",
        "get_current_time", "get_flight_cost", "get_message_stats", "get_nearest_airport_by_city",
        "get_order_details", "get_order_history", "get_outside_temperature_from_google",
        "get_outside_temperature_from_weather_com", "get_stock_info", "get_symbol_by_name", "get_ticket",
        "get_transaction_history", "get_tweet", "get_tweet_comments", "get_user_id", "get_user_stats",
        "get_user_tickets", "get_user_tweets", "get_watchlist", "get_zipcode_based_on_city", "list_all_airports",
        "list_all_following", "list_users", "message_get_login_status", "posting_get_login_status",
        "retrieve_invoice", "search_messages", "search_tweets", "ticket_get_login_status",
        "trading_get_login_status", "travel_get_login_status", "view_messages_sent",
    }
)  # fmt: skip
READ_ONLY_POLICY = {POLICY_KEY: {"cacheable": False, "idempotent": True}}


@dataclass(frozen=True)
class BfclTask:
    """A BFCL entry: its requests (one per turn), its functions (OpenAI-style specs as BFCL converts them, their
    names with "." written "_", beside BFCL's own names) and its ground truth, as a replay plan per turn."""

    id: str
    category: Category
    turns: tuple[str, ...]
    tools: tuple[dict[str, Any], ...]
    functions: tuple[str, ...]  # BFCL's name of each tool
    plan: tuple[tuple[Step, ...], ...]  # the calls of each turn, by tool name

    @property
    def multi_turn(self) -> bool:
        return self.category not in AST_CATEGORIES

    def function_of(self, tool: str) -> str:
        return self.functions[[spec["name"] for spec in self.tools].index(tool)]

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> BfclTask:
        tools = tuple({key: spec[key] for key in ("name", "description", "parameters")} for spec in entry["tools"])
        named = dict(zip(entry["functions"], (spec["name"] for spec in tools), strict=True))
        plan = tuple(tuple(Step(named[call["name"]], call["args"]) for call in turn) for turn in entry["plan"])
        turns = tuple("\n".join(messages) for messages in entry["turns"])
        return cls(entry["id"], entry["category"], turns, tools, tuple(entry["functions"]), plan)


def load_tasks(bfcl: Bfcl, categories: Sequence[Category], sample: int | None = None) -> list[BfclTask]:
    """The entries of `categories`, each category's a seeded sample of `sample` of them (all with None), in
    BFCL's order; the same sample for every run."""
    tasks = []
    for category in categories:
        entries = bfcl.load(category)
        if sample is not None and sample < len(entries):
            chosen = set(random.Random(f"{SAMPLE_SEED}/{category}").sample(range(len(entries)), sample))
            entries = [entry for index, entry in enumerate(entries) if index in chosen]
        tasks += [BfclTask.from_entry(entry) for entry in entries]
    return tasks


@dataclass
class Executed:
    """The calls a run executed, turn by turn, and, for the multi-turn categories, their results: what BFCL's
    checkers score and the recap of the earlier turns shows."""

    turns: list[list[tuple[str, dict[str, Any], str]]] = field(default_factory=list)  # (function, args, result)

    def record(self, function: str, args: dict[str, Any], result: str) -> None:
        self.turns[-1].append((function, args, result))

    def ast_calls(self) -> list[dict[str, Any]]:
        return [{function: args} for turn in self.turns for function, args, _ in turn]

    def multi_turn_calls(self, turns: int) -> list[list[list[str]]]:
        """The calls of each of `turns` turns as one step of call text; a turn without calls (or not run: the
        agent crashed before it) has no step."""
        padded = self.turns + [[] for _ in range(turns - len(self.turns))]
        return [[[call_text(function, args) for function, args, _ in turn]] if turn else [] for turn in padded]


def call_text(function: str, args: dict[str, Any]) -> str:
    """A call as Python, as BFCL executes it: `mv(source='a.txt', destination='b')`."""
    return f"{function}({', '.join(f'{key}={value!r}' for key, value in args.items())})"


def bfcl_tools(task: BfclTask, executed: Executed, bfcl: Bfcl, run: str) -> list[BaseTool]:
    """`task`'s functions as tools whose arguments are described by JSON schema: each records its call in
    `executed` as it runs; a multi-turn one runs it in the environments BFCL keeps for `run`."""
    return [_tool(task, spec, executed, bfcl, run) for spec in task.tools]


def _tool(task: BfclTask, spec: dict[str, Any], executed: Executed, bfcl: Bfcl, run: str) -> BaseTool:
    function = task.function_of(spec["name"])

    def record(**args: Any) -> str:
        executed.record(function, args, AST_RESULT)
        return AST_RESULT

    def run_in_environment(**args: Any) -> str:
        [result] = bfcl.execute(run, task.id, [call_text(function, args)])
        result = SHOWN_EMPTY.get(result, result)
        executed.record(function, args, result)
        return result

    return StructuredTool.from_function(
        func=run_in_environment if task.multi_turn else record,
        name=spec["name"],
        description=spec["description"],
        args_schema=json.loads(json.dumps(spec["parameters"])),  # a copy: a tool owns its schema
        metadata=None if not task.multi_turn else READ_ONLY_POLICY if function in READ_ONLY else STATEFUL_POLICY,
    )
