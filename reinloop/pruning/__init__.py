"""A bounded runs database: delete the checkpoints a thread no longer needs, keeping the latest ones and those
a user marked.

Only the latest checkpoint (with its pending writes) is needed to resume or inspect a thread: `prune` deletes
the older ones, `mark` keeps a chosen one through every prune. The SQL is written here for LangGraph's
`SqliteSaver` and `PostgresSaver`: LangGraph 1.2's own `prune` is on `PostgresSaver` only and keeps neither
more than one checkpoint nor marked ones. The modules: `pruning` (the public functions and each thread's
plan), `tables`, `sqlite_tables` and `postgres_tables`; every name is imported from here.
"""

from reinloop.pruning.pruning import PruneReport, latest_checkpoints, mark, marks, prune, unmark
from reinloop.pruning.tables import MARKS_TABLE, Mark

__all__ = ["MARKS_TABLE", "Mark", "PruneReport", "latest_checkpoints", "mark", "marks", "prune", "unmark"]
