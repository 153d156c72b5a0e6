"""default_toolset: the seeds' tools, real and safe, ready for `build_agent`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool

from reinloop.tools.calculator import CalculatorTool
from reinloop.tools.clock import CurrentTimeTool, TimerTool
from reinloop.tools.database import DEFAULT_TABLES, Database, DbInsertTool, DbQueryTool
from reinloop.tools.files import FileReadTool, FileWriteTool, Workspace
from reinloop.tools.financial import FinancialDataTool
from reinloop.tools.search import BUNDLED_CORPUS, LocalCorpusSearch, SearchBackend, WebSearchTool
from reinloop.tools.translate import TranslateTool
from reinloop.tools.weather import WeatherTool

__all__ = ["DATABASE_FILE", "default_toolset"]

DATABASE_FILE = "agent.sqlite"


def default_toolset(
    workspace: str | Path,
    *,
    model: BaseChatModel | None = None,
    weather_base_url: str | None = None,
    search_corpus: str | Path | SearchBackend | None = None,
    tables: Mapping[str, Sequence[str]] = DEFAULT_TABLES,
) -> list[BaseTool]:
    """web_search, calculator, translate, file_read, file_write, current_time, timer, db_insert, db_query,
    weather and financial_data, working inside the `workspace` folder (created if missing).

    `translate` needs a chat `model` (usually the agent's own) and `weather` a `weather_base_url`; each is
    left out without it. `search_corpus` is a folder of documents or a `SearchBackend`; by default a small
    corpus shipped with reinloop. The database is `workspace/agent.sqlite` with the declared `tables`.
    """
    folder = Workspace(workspace)
    if search_corpus is None or isinstance(search_corpus, str | Path):
        backend: SearchBackend = LocalCorpusSearch(search_corpus or BUNDLED_CORPUS)
    else:
        backend = search_corpus
    database = Database(folder.root / DATABASE_FILE, tables)
    tools: list[BaseTool] = [
        WebSearchTool(backend=backend),
        CalculatorTool(),
        FileReadTool(workspace=folder),
        FileWriteTool(workspace=folder),
        CurrentTimeTool(),
        TimerTool(),
        DbInsertTool(database),
        DbQueryTool(database),
        FinancialDataTool(),
    ]
    if model is not None:
        tools.insert(2, TranslateTool(model=model))
    if weather_base_url is not None:
        tools.append(WeatherTool(base_url=weather_base_url))
    return tools
