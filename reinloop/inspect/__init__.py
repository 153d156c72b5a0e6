"""`reinloop inspect`: a local web page over a runs database, to see each thread's path through the graph,
its rounds, its guards' events and its tokens as it runs, and (with --allow-actions) to resume a break or
answer an approval through the code `reinloop resume` runs.

`app` builds the Starlette app, `reading` reads the database, `timeline` turns a thread's history into
rounds, `actions` runs the page's buttons. It needs the `inspect` extra: starlette, uvicorn and jinja2.
"""

from reinloop.inspect.app import inspect_app

__all__ = ["inspect_app"]
