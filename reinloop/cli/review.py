"""Asking the person at the terminal about a call that waits for approval (`reinloop.approvals`).

`run` and `resume` stream the run until it stops at an approval, ask here, and resume it with the answer:
approve, edit (the arguments as one line of JSON) or reject (with a reason the model is told). With `--yes`
every call is approved without asking. A closed input (a script, a pipe that ends) asks nothing: the run
stays saved, waiting, and `reinloop resume THREAD` asks again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from langgraph.types import Interrupt
from pydantic import ValidationError
from rich.console import Console
from rich.text import Text

from reinloop.approvals import APPROVAL_REQUEST_TYPE, InvalidAnswerError
from reinloop.cli import CommandError

__all__ = ["APPROVE", "Reviewer", "approve_all", "ask", "invalid_answer", "reviewer"]

Reviewer = Callable[[Interrupt], dict[str, Any]]
APPROVE: dict[str, Any] = {"action": "approve"}
CHOICES = {"a": "approve", "approve": "approve", "e": "edit", "edit": "edit", "r": "reject", "reject": "reject"}
NO_ANSWER_TEMPLATE = (
    "no answer on the terminal for the {name!r} call: thread {thread!r} is saved, waiting for it; answer with "
    "'reinloop resume {thread}', or run with --yes to approve every call"
)


def reviewer(console: Console, thread: str, *, yes: bool) -> Reviewer:
    """What answers each approval of the run on `thread`: the person at the terminal, or `--yes`."""
    if yes:
        return lambda waiting: approve_all(console, waiting)
    return lambda waiting: ask(console, thread, waiting)


def approve_all(console: Console, waiting: Interrupt) -> dict[str, Any]:
    request = _request(waiting)
    console.print(Text.assemble(("approved", "green"), f" {_call(request)} ", ("(--yes)", "dim")), soft_wrap=True)
    return APPROVE


def ask(console: Console, thread: str, waiting: Interrupt) -> dict[str, Any]:
    """The person's answer about the call `waiting` is for, asked until it can be sent."""
    request = _request(waiting)
    console.print(Text.assemble(("approval", "bold yellow"), f" {_call(request)}"), soft_wrap=True)
    if request.get("thought"):
        console.print(Text.assemble(("  thought", "dim"), f" {request['thought']}"), soft_wrap=True)

    def line(prompt: str) -> str:
        try:
            return console.input(Text(prompt)).strip()
        except EOFError:
            raise CommandError(NO_ANSWER_TEMPLATE.format(name=request["name"], thread=thread)) from None

    while True:
        choice = CHOICES.get(line("  approve, edit or reject? [a/e/r] ").lower())
        if choice == "approve":
            return APPROVE
        if choice == "reject":
            return {"action": "reject", "reason": line("  reason (the model is told): ")}
        if choice == "edit" and (args := _json_object(console, line("  arguments as JSON: "))) is not None:
            return {"action": "edit", "args": args}
        if choice is None:
            console.print(Text("  answer a (approve), e (edit) or r (reject)", "yellow"))


def invalid_answer(console: Console, error: ValidationError) -> None:
    """An answer the run refused (an edit whose arguments fail the tool's schema): the same call is asked again."""
    cause = next((item.get("ctx", {}).get("error") for item in error.errors()), None)
    problem = cause.problem if isinstance(cause, InvalidAnswerError) else str(error)
    console.print(Text(f"  not accepted: {problem}", "red"), soft_wrap=True)


def _json_object(console: Console, text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        console.print(Text(f"  not JSON ({exc}); write the arguments as one JSON object", "red"))
        return None
    if not isinstance(value, dict):
        console.print(Text('  the arguments must be a JSON object, e.g. {"path": "notes.txt"}', "red"))
        return None
    return value


def _request(waiting: Interrupt) -> Mapping[str, Any]:
    value = waiting.value
    if not isinstance(value, Mapping) or value.get("type") != APPROVAL_REQUEST_TYPE:
        raise CommandError(f"the run stopped at an interrupt the command line cannot answer: {value!r:.200}")
    return value


def _call(request: Mapping[str, Any]) -> str:
    return f"{request['name']}({json.dumps(request['args'], ensure_ascii=False)})"
