"""What each `reinloop` command does: it opens the runs database, builds or reads the agent, and hands what to
print to `display`. Each returns the exit code; a problem the user fixes raises `CommandError`.

The commands are in modules by concept: `runs` (run and resume, and what Ctrl-C reports), `batches` (batch),
`inspection` (tools, graph, history, show, prune and mark), `browse` (inspect, the web page) and `evaluation`
(eval), over `reinloop.runs` (the runs database, the settings a thread saved, the agent they rebuild)."""

from reinloop.cli.batches import batch
from reinloop.cli.browse import inspect
from reinloop.cli.evaluation import evaluate
from reinloop.cli.inspection import graph, history, mark, prune, show, tools
from reinloop.cli.runs import resume, run

__all__ = [
    "batch",
    "evaluate",
    "graph",
    "history",
    "inspect",
    "mark",
    "prune",
    "resume",
    "run",
    "show",
    "tools",
]
