"""What each `reinloop` command does: it opens the runs database, builds or reads the agent, and hands what to
print to `display`. Each returns the exit code; a problem the user fixes raises `CommandError`.

The commands are in modules by concept: `runs` (run and resume, and what Ctrl-C reports), `inspection`
(tools, graph, history, show, prune and mark), `browse` (inspect, the web page) and `evaluation`
(eval); `opening` opens what they use, the
runs database and the agent. Their names are imported from here as before."""

from reinloop.cli.browse import inspect
from reinloop.cli.evaluation import RATES as RATES
from reinloop.cli.evaluation import evaluate
from reinloop.cli.inspection import PRUNE_DAMAGED_TEMPLATE as PRUNE_DAMAGED_TEMPLATE
from reinloop.cli.inspection import graph, history, mark, prune, show, tools
from reinloop.cli.opening import DEFAULT_APPROVALS as DEFAULT_APPROVALS
from reinloop.cli.opening import LIMITS as LIMITS
from reinloop.cli.opening import MEMORY_TEMPLATE as MEMORY_TEMPLATE
from reinloop.cli.opening import NEW_DATABASE_TEMPLATE as NEW_DATABASE_TEMPLATE
from reinloop.cli.opening import WORKSPACE_TEMPLATE as WORKSPACE_TEMPLATE
from reinloop.cli.opening import default_db
from reinloop.cli.runs import CONTINUE_TEMPLATE as CONTINUE_TEMPLATE
from reinloop.cli.runs import INTERRUPTS_KEY as INTERRUPTS_KEY
from reinloop.cli.runs import NOTHING_NEW_TEMPLATE as NOTHING_NEW_TEMPLATE
from reinloop.cli.runs import NOTHING_SAVED_TEMPLATE as NOTHING_SAVED_TEMPLATE
from reinloop.cli.runs import SAVED_TEMPLATE as SAVED_TEMPLATE
from reinloop.cli.runs import SETTINGS as SETTINGS
from reinloop.cli.runs import UNREAD_TEMPLATE as UNREAD_TEMPLATE
from reinloop.cli.runs import resume, run

__all__ = [
    "default_db",
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
