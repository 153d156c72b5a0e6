"""LangChain's standard tool tests, unit and integration, for every tool of the default toolset."""

from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.tools import BaseTool
from langchain_tests.integration_tests import ToolsIntegrationTests
from langchain_tests.unit_tests import ToolsUnitTests

from reinloop.testing import ScriptedChatModel
from reinloop.tools import (
    CalculatorTool,
    CurrentTimeTool,
    Database,
    DbInsertTool,
    DbQueryTool,
    FileReadTool,
    FileWriteTool,
    FinancialDataTool,
    LocalCorpusSearch,
    TimerTool,
    TranslateTool,
    WeatherTool,
    WebSearchTool,
    Workspace,
)
from reinloop.tools.search import BUNDLED_CORPUS


def _file_reader(request: pytest.FixtureRequest) -> BaseTool:
    workspace = Workspace(request.getfixturevalue("tmp_path"))
    (workspace.root / "hello.txt").write_text("hello")
    return FileReadTool(workspace=workspace)


Factory = Callable[[pytest.FixtureRequest], BaseTool]
# name -> (how to build the tool, the arguments of an example call)
SPECS: dict[str, tuple[Factory, dict[str, Any]]] = {
    "Calculator": (lambda request: CalculatorTool(), {"expression": "(2 + 3) * 4"}),
    "WebSearch": (
        lambda request: WebSearchTool(backend=LocalCorpusSearch(BUNDLED_CORPUS)),
        {"query": "speed of light", "max_results": 2},
    ),
    "Translate": (
        lambda request: TranslateTool(model=ScriptedChatModel(respond=lambda messages: "Bonjour")),
        {"text": "Hello", "target_language": "French"},
    ),
    "FileRead": (_file_reader, {"path": "hello.txt"}),
    "FileWrite": (
        lambda request: FileWriteTool(workspace=Workspace(request.getfixturevalue("tmp_path"))),
        {"path": "out/hello.txt", "content": "hello"},
    ),
    "CurrentTime": (lambda request: CurrentTimeTool(), {"timezone": "Europe/Paris"}),
    "Timer": (lambda request: TimerTool(sleep=lambda seconds: None), {"seconds": 1.5}),
    "DbInsert": (
        lambda request: DbInsertTool(Database(request.getfixturevalue("tmp_path") / "a.sqlite")),
        {"table": "notes", "values": {"title": "t", "body": "b"}},
    ),
    "DbQuery": (
        lambda request: DbQueryTool(Database(request.getfixturevalue("tmp_path") / "a.sqlite")),
        {"sql": "SELECT count(*) AS n FROM notes", "max_rows": 5},
    ),
    "FinancialData": (
        lambda request: FinancialDataTool(),
        {"company": "Contoso Ltd", "metric": "revenue", "year": 2023},
    ),
    "Weather": (
        lambda request: WeatherTool(base_url=request.getfixturevalue("weather_server"), timeout_s=2),
        {"city": "Paris"},
    ),
}


class _Built:
    """Builds the tool under test for each test; the suites read it through `tool_constructor`."""

    factory: Factory
    example: dict[str, Any]

    @pytest.fixture(autouse=True)
    def _build(self, request: pytest.FixtureRequest) -> None:
        self._tool = type(self).factory(request)

    @property
    def tool_constructor(self) -> BaseTool:
        return self._tool

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return self.example


for _name, (_factory, _example) in SPECS.items():
    for _suite in (ToolsUnitTests, ToolsIntegrationTests):
        _cls = type(
            f"Test{_name}{_suite.__name__}",
            (_Built, _suite),
            {"factory": staticmethod(_factory), "example": _example, "__module__": __name__},
        )
        globals()[_cls.__name__] = _cls
