"""What a run of the evaluation measures: its model calls and their tokens (`Meter`, `message_tokens`,
`reply_tokens`), its simulated time (`SimulatedClock`), and its tool executions (`ToolStats`)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage

from reinloop.memory.tokens import TokenCounter

__all__ = ["Meter", "SimulatedClock", "ToolStats", "message_tokens", "reply_tokens"]


class Meter:
    """Every model call of a run, whatever made it (a decision, a summary, the translate tool), and its
    tokens: what it was sent (the messages, malformed calls' arguments included, and the tool schemas bound
    beside them) and what it wrote (the reply's text, calls and malformed calls)."""

    def __init__(self) -> None:
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.tool_schema_tokens = 0  # the tool schemas' part of prompt_tokens


def message_tokens(counter: TokenCounter, messages: Sequence[BaseMessage]) -> int:
    """`counter`'s count of `messages` as a prompt, with the malformed calls' names and arguments, which a
    provider bills but `TokenCounter` leaves out (reinloop never sends one)."""
    return counter.messages(messages) + sum(_malformed_tokens(counter, message) for message in messages)


def reply_tokens(counter: TokenCounter, reply: BaseMessage) -> int:
    """`counter`'s count of `reply` as what a model wrote: the message alone (a prompt's count adds the tokens
    that open the reply), its malformed calls included."""
    return counter.message(reply) + _malformed_tokens(counter, reply)


def _malformed_tokens(counter: TokenCounter, message: BaseMessage) -> int:
    if not isinstance(message, AIMessage):
        return 0
    calls = message.invalid_tool_calls
    return sum(counter.text(call["name"] or "") + counter.text(call["args"] or "") for call in calls)


class SimulatedClock:
    """A run's simulated time: what the model's latency, the timer's waits and slow calls add, in seconds."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.released = threading.Event()  # set when the run ends: the calls that hang return then

    def advance(self, seconds: float) -> None:
        self.seconds += seconds


class ToolStats:
    """Counts tool executions across the wrapped tools of one run, and those that succeeded."""

    def __init__(self) -> None:
        self.executed = 0
        self.succeeded = 0  # ran to a result: no exception and no injected empty result (slow ones count)

    def wasted(self, plan_steps: int) -> int:
        """Executions that did not serve the task: all of them but the successful ones, counted up to the
        number of steps in the task's reference plan."""
        return self.executed - min(plan_steps, self.succeeded)
