"""A bounded runs database: delete the checkpoints a thread no longer needs, keeping the latest ones and those
a user marked.

Every step of a run saves a checkpoint, so a thread's rows grow with its rounds and never shrink. Only the
latest checkpoint (with its pending writes) is needed to resume or inspect a thread; older ones serve
history and time travel. `prune` deletes the older ones, `mark` keeps a chosen one through every prune.

The SQL is written here for the two savers `open_checkpointer` opens, LangGraph's `SqliteSaver` and
`PostgresSaver`: LangGraph 1.2 offers `prune(thread_ids, strategy="keep_latest")` on `PostgresSaver` only,
and keeps neither more than one checkpoint nor marked ones.

The modules: `pruning` (the public functions and each thread's plan), `tables` (the interface both
databases implement, the marks table, the column checks), `sqlite_tables` and `postgres_tables`. Every
name is imported from here.
"""

from reinloop.pruning.pruning import PruneReport, latest_checkpoints, mark, marks, prune, unmark
from reinloop.pruning.tables import MARKS_TABLE, Mark

__all__ = ["MARKS_TABLE", "Mark", "PruneReport", "latest_checkpoints", "mark", "marks", "prune", "unmark"]
