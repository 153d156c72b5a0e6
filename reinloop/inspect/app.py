"""The web app of `reinloop inspect`: a Starlette app over one runs database, its pages rendered on the server
by Jinja2 (every text escaped), its CSS and script shipped in the package.

Pages: the threads, newest first (``/?page=N``); one thread (``/thread/ID``: graph, timeline, tokens per
round), whose script polls ``/status/ID`` and redraws from ``/fragment/ID`` when the thread moves on. With
`allow_actions` only, ``POST /resume/ID`` and ``POST /approve/ID`` (forms carrying the app's token, from a
page of the same origin) run `reinloop.inspect.actions`; otherwise they answer 403. Pages open the database
read-only for each request (`read_only_checkpointer`), so a run in progress, a missing file or a damaged one
is seen as it is now, and a page never waits for a writer.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

import reinloop.inspect.reading as reading
from reinloop.inspect.actions import ActionError, Jobs, answer_from_form
from reinloop.text import truncate

__all__ = ["LOOPBACK", "POLL_MS", "Problem", "inspect_app"]

HERE = Path(__file__).parent
# The names a page served on this machine only is reached by. Requests naming another host are refused: a
# site whose name is made to point at 127.0.0.1 (DNS rebinding) must not read the pages or their token.
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# How often a thread's page asks whether the thread moved on.
POLL_MS = 1500
NO_DATABASE_TEMPLATE = (
    "There is no runs database at {location}. Start a run that saves there, e.g. "
    'reinloop run "What is 2 + 3?" --db {location}, or give the database with --db.'
)
NOT_TEXT_NOTE = " A thread whose id is not UTF-8 text is listed as unreadable: no address can name it."
READ_ONLY = (
    "This page is read-only: start it with 'reinloop inspect --allow-actions' to resume runs and answer approvals."
)


class Problem(Exception):
    """What a page says instead of its content: a missing database or thread, a damaged file, a refused action."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail = status, title, detail


@dataclass(frozen=True)
class _Settings:
    db: str | None  # as given: a SQLite path, a postgresql:// URL, or None for REINLOOP_DB / the default
    location: str  # as it may be shown (a URL's password hidden)
    allow_actions: bool
    token: str  # carried by the action forms
    page_size: int  # threads listed to a page
    max_rounds: int  # the most extra iterations a resume takes (MAX_ITERATIONS)
    history_window: int  # the most checkpoints a thread's page reads


def inspect_app(
    db: str | None = None,
    *,
    allow_actions: bool = False,
    no_memory: bool = False,
    hosts: Sequence[str] = LOOPBACK,
    page_size: int = reading.PAGE_SIZE,
    model: str | None = None,
    base_url: str | None = None,
    history_window: int = reading.HISTORY_WINDOW,
) -> Starlette:
    """The app over the runs database `db` (a SQLite path or a ``postgresql://`` URL; None: REINLOOP_DB, else
    the user data folder), read-only unless `allow_actions`; runs resumed from it have no long-term memory
    store with `no_memory`, and threads that saved no model (started from Python) are resumed with `model`
    and `base_url` (as ``reinloop resume --model/--base-url``). It answers requests for the host names in
    `hosts` only (``["*"]``: any), lists `page_size` threads to a page, and shows a thread's latest
    `history_window` checkpoints."""
    from reinloop.checkpoint import database_label
    from reinloop.config import MAX_ITERATIONS
    from reinloop.runs import default_db

    location = database_label(db or default_db())
    settings = _Settings(db, location, allow_actions, secrets.token_urlsafe(24), page_size, MAX_ITERATIONS,
                         history_window)  # fmt: skip
    jobs = Jobs(db, no_memory=no_memory, model=model, base_url=base_url)
    pages = _Pages(settings, jobs, _templates())
    routes = [
        Route("/", pages.threads),
        Route("/thread/{thread:path}", pages.thread),
        Route("/fragment/{thread:path}", pages.fragment),
        Route("/status/{thread:path}", pages.status),
        Route("/resume/{thread:path}", pages.resume, methods=["POST"]),
        Route("/approve/{thread:path}", pages.approve, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    handlers: dict[Any, Any] = {Problem: pages.problem, HTTPException: pages.http_error, Exception: pages.failure}
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts))]
    return Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)


def _templates() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True, undefined=jinja2.StrictUndefined
    )
    environment.filters["short"] = _short
    return environment


def _short(text: Any, length: int = 200) -> str:
    """`text` on one line, cut to `length` characters with reinloop's marker of cut text."""
    return truncate(" ".join(str(text).split()), length)


class _Pages:
    """The app's endpoints."""

    def __init__(self, settings: _Settings, jobs: Jobs, templates: jinja2.Environment) -> None:
        self.settings, self.jobs, self.templates = settings, jobs, templates
        self.histories = reading.Histories(window=settings.history_window)

    # reading ------------------------------------------------------------------------------------------

    def threads(self, request: Request) -> Response:
        page = _number(request.query_params.get("page")) or 1
        with self._saver() as saver:
            listed = reading.thread_page(saver, page, self.settings.page_size)
        return self._page("threads.html", listed=listed)

    def thread(self, request: Request) -> Response:
        view = self._view(request.path_params["thread"])
        return self._page("thread.html", poll_ms=POLL_MS, **self._thread_context(view))

    def fragment(self, request: Request) -> Response:
        return self._page("_body.html", **self._thread_context(self._view(request.path_params["thread"])))

    def _thread_context(self, view: reading.ThreadView) -> dict[str, Any]:
        thread = view.thread_id
        return {"view": view, "job": self.jobs.get(thread), "answered": self.jobs.answered(thread)}

    def status(self, request: Request) -> Response:
        thread = request.path_params["thread"]
        with self._saver() as saver:
            found = reading.status(saver, thread)
        if found is None:
            raise self._unknown(thread)
        job = self.jobs.get(thread)
        said = None if job is None else f"{job.state} {job.message}"
        return JSONResponse(
            {"checkpoint": found.checkpoint, "finish_reason": found.finish_reason, "next": found.next, "job": said}
        )

    def _view(self, thread: str) -> reading.ThreadView:
        with self._saver() as saver:
            view = reading.view(saver, thread, self.histories)
        if view is None:
            raise self._unknown(thread)
        return view

    # acting -------------------------------------------------------------------------------------------

    async def resume(self, request: Request) -> Response:
        thread, form = request.path_params["thread"], await self._form(request)
        given = str(form.get("extra_iterations") or "").strip()
        extra = _rounds(given) if given else None
        self._act(lambda: self.jobs.resume(thread, extra, str(form.get("hint") or "").strip() or None))
        return RedirectResponse(f"/thread/{quote(thread)}", status_code=303)

    async def approve(self, request: Request) -> Response:
        thread, form = request.path_params["thread"], await self._form(request)
        with self._saver() as saver:
            waiting = [approval.interrupt_id for approval in reading.approvals(saver, thread)]
        interrupt = str(form.get("interrupt_id", ""))
        self._act(lambda: self.jobs.answer(thread, interrupt, answer_from_form(form), waiting))
        return RedirectResponse(f"/thread/{quote(thread)}", status_code=303)

    async def _form(self, request: Request) -> Any:
        """The action's form, once the request may act: actions allowed, its origin this page's, its token ours."""
        if not self.settings.allow_actions:
            raise Problem(403, "Read-only", READ_ONLY)
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
            raise Problem(403, "Refused", f"An action from another site ({origin}) is refused.")
        form = await request.form()
        if not secrets.compare_digest(str(form.get("token", "")), self.settings.token):
            raise Problem(403, "Refused", "The form's token is not this server's: reload the page and try again.")
        return form

    def _act(self, start: Callable[[], object]) -> None:
        try:
            start()
        except ActionError as exc:
            raise Problem(exc.status, "Not done", str(exc)) from None

    # errors -------------------------------------------------------------------------------------------

    def problem(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Problem)
        return self._page("error.html", status_code=exc.status, title=exc.title, detail=exc.detail)

    def http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return self._page("error.html", status_code=exc.status_code, title=str(exc.status_code), detail=exc.detail)

    def failure(self, request: Request, exc: Exception) -> Response:
        """Any other failure: one line, no traceback."""
        detail = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        return self._page("error.html", status_code=500, title="Unexpected error", detail=detail)

    # helpers ------------------------------------------------------------------------------------------

    @contextmanager
    def _saver(self) -> Iterator[Any]:
        """The runs database's checkpointer, opened read-only for one request."""
        from reinloop.checkpoint import is_postgres_url, read_only_checkpointer
        from reinloop.errors import ReinloopError
        from reinloop.runs import default_db

        where = self.settings.db or default_db()
        if not is_postgres_url(where) and not Path(where).exists():
            raise Problem(404, "No runs database", NO_DATABASE_TEMPLATE.format(location=self.settings.location))
        try:
            with read_only_checkpointer(where) as saver:
                yield saver
        except ReinloopError as exc:
            raise Problem(500, "The runs database cannot be read", str(exc)) from None

    def _unknown(self, thread: str) -> Problem:
        # A path's %-escapes that are not UTF-8 arrive as U+FFFD: no page can name a thread whose id is not text.
        note = NOT_TEXT_NOTE if "\ufffd" in thread else ""
        return Problem(404, "Unknown thread", f"There is no thread {thread!r} in {self.settings.location}.{note}")

    def _page(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        html = self.templates.get_template(name).render(settings=self.settings, **context)
        return HTMLResponse(html, status_code=status_code)


def _rounds(given: str) -> int:
    """The form's extra iterations, checked as `reinloop resume --extra-iterations` checks them."""
    from reinloop.runs import check_rounds

    try:
        return check_rounds(given)
    except ValueError as exc:
        raise Problem(400, "Not done", f"Extra iterations {exc}.") from None


def _number(text: object) -> int | None:
    """`text` as a positive whole number; None if it is not one."""
    try:
        number = int(str(text))
    except ValueError:
        return None
    return number if number > 0 else None
