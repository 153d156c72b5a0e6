"""What the agent does: one node per phase, each `state -> partial update`."""

from reinloop.nodes.check_finish import check_finish
from reinloop.nodes.circuit_break import circuit_break
from reinloop.nodes.compress_memory import compress_memory
from reinloop.nodes.decide import decide
from reinloop.nodes.execute_tool import execute_tool
from reinloop.nodes.observe import observe
from reinloop.nodes.validate_args import validate_args

__all__ = [
    "check_finish",
    "circuit_break",
    "compress_memory",
    "decide",
    "execute_tool",
    "observe",
    "validate_args",
]
