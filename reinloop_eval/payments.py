"""The costly faults' non-idempotent tool: `send_payment`, which pays once more at each run and writes each
payment to the workspace's ledger (`PAYMENTS_FILE`, read by `payments_made`). It checks no arguments, as a
plain function over a payments API does not; some payees' accounts are closed (`CLOSED_ACCOUNTS`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, Field

from reinloop.tools.registry import POLICY_KEY
from reinloop_eval.faults import FaultProfile
from reinloop_eval.tool_faults import UncheckedTool

__all__ = ["CLOSED_ACCOUNTS", "PAYMENTS_FILE", "PaymentInput", "costly_tools", "payment_tool", "payments_made"]

PAYMENTS_FILE = "payments.jsonl"
# Payees whose account is closed: every payment to them is declined, before any effect (a hopeless task's).
CLOSED_ACCOUNTS = ("Initech Ltd",)


class PaymentInput(BaseModel):
    payee: str = Field(min_length=1, max_length=80, description="Who is paid: a person's or a company's name.")
    amount: float = Field(gt=0, le=10_000, description="How much, in `currency`.")
    currency: Literal["EUR", "GBP", "USD"] = Field(description="The currency of `amount`.")
    reference: str = Field(min_length=1, max_length=80, description="What it pays for, e.g. an invoice number.")


def payment_tool(workspace: Path) -> BaseTool:
    """`send_payment`, writing its payments to `workspace`'s ledger."""
    ledger = workspace / PAYMENTS_FILE

    def send_payment(payee: Any, amount: Any, currency: Any, reference: Any) -> str:
        if payee in CLOSED_ACCOUNTS:
            raise ToolException(f"payment declined: the account of {payee!r} is closed")
        ledger.parent.mkdir(parents=True, exist_ok=True)
        payment = {"payee": payee, "amount": amount, "currency": currency, "reference": reference}
        with ledger.open("a", encoding="utf-8") as file:
            file.write(json.dumps(payment, ensure_ascii=False) + "\n")
        number = len(payments_made(workspace))
        return f"Paid {amount} {currency} to {payee} ({reference}): payment P-{number:04d}."

    return UncheckedTool.from_function(
        func=send_payment,
        name="send_payment",
        description="Send a payment from the user's account. Every call pays once more: a payment cannot be undone.",
        args_schema=PaymentInput,
        # As a careful reinloop user declares a payment: not safe to repeat (so never retried in place, and a
        # timeout or lost connection reported in doubt). Its result may be given again for an identical call
        # (the default cacheable=True): answering a repeat with the earlier receipt is what saves a second payment.
        metadata={POLICY_KEY: {"idempotent": False}},
    )


def payments_made(workspace: Path) -> list[dict[str, Any]]:
    """The payments `send_payment` made in `workspace`, in order."""
    ledger = workspace / PAYMENTS_FILE
    if not ledger.is_file():
        return []
    return [json.loads(line) for line in ledger.read_text(encoding="utf-8").splitlines() if line]


def costly_tools(profile: FaultProfile, workspace: Path) -> list[BaseTool]:
    """The tools the costly faults add to every run's toolset: `send_payment` with them on, none without."""
    return [payment_tool(workspace)] if profile.costly else []
