"""Memory: the bounded short-term window."""

from reinloop.memory.window import pairing_violations, window_entries

__all__ = ["pairing_violations", "window_entries"]
