"""financial_data: a company's yearly figures from a small dataset shipped with reinloop.

The companies and figures are fictional (Microsoft's sample company names): realistic enough for demos,
evaluations and tests, and never mistaken for market data.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any, Literal

from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, Field

from reinloop.tools.registry import POLICY_KEY

__all__ = ["FinancialDataTool", "load_financials"]

Metric = Literal["revenue", "net_income", "operating_income", "employees", "total_assets"]


@cache
def load_financials() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (resources.files("reinloop.tools") / "data" / "financials.json").read_text(encoding="utf-8")
    )
    return data


class FinancialDataInput(BaseModel):
    company: str = Field(min_length=1, max_length=80, description="The company's name or ticker.")
    metric: Metric = Field(description="The figure: money metrics are in millions of the company's currency.")
    year: int | None = Field(None, ge=1900, le=2100, description="The fiscal year; the latest when omitted.")


class FinancialDataTool(BaseTool):
    """Yearly financial figures of a company."""

    name: str = "financial_data"
    description: str = (
        "Look up a company's yearly financial figure (revenue, net_income, operating_income, employees, "
        "total_assets). Money is in millions of the company's currency."
    )
    args_schema: type[BaseModel] = FinancialDataInput
    # A look-up in bundled data: safe to retry in place.
    metadata: dict[str, Any] | None = Field(default_factory=lambda: {POLICY_KEY: {"retryable": True}})

    def _run(self, company: str, metric: str, year: int | None = None, **_: Any) -> dict[str, Any]:
        companies = load_financials()["companies"]
        wanted = company.strip().lower()
        name = next(
            (name for name, data in companies.items() if wanted in (name.lower(), data["ticker"].lower())), None
        )
        if name is None:
            known = ", ".join(f"{name} ({data['ticker']})" for name, data in companies.items())
            raise ToolException(f"unknown company {company!r}; known companies: {known}")
        years = companies[name]["years"]
        chosen = str(year) if year is not None else max(years)
        if chosen not in years:
            raise ToolException(f"no {chosen} figures for {name}; years available: {', '.join(sorted(years))}")
        value = years[chosen][metric]
        unit = "people" if metric == "employees" else f"million {companies[name]['currency']}"
        return {"company": name, "year": int(chosen), "metric": metric, "value": value, "unit": unit}
