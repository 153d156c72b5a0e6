"""What the agent does: one node per phase, each `state -> partial update`.

The nodes that wait on I/O have an async form beside their sync one, the same logic under another driver
(`reinloop.drivers`): `adecide`, `acompress_memory`, `aexecute_tool`.
"""

from reinloop.nodes.check_finish import acheck_finish, check_finish
from reinloop.nodes.circuit_break import circuit_break
from reinloop.nodes.compress_memory import acompress_memory, compress_memory
from reinloop.nodes.decide import adecide, decide
from reinloop.nodes.execute_tool import aexecute_tool, execute_tool
from reinloop.nodes.observe import observe
from reinloop.nodes.validate_args import validate_args

__all__ = [
    "acheck_finish",
    "acompress_memory",
    "adecide",
    "aexecute_tool",
    "check_finish",
    "circuit_break",
    "compress_memory",
    "decide",
    "execute_tool",
    "observe",
    "validate_args",
]
