"""Decision protocols: how the model states a decision, and how reinloop reads it.

A protocol binds the model, adds its instructions to the system prompt, renders the window for the model,
and parses each reply into a `Decision`. Replies are stored in one normal form whatever the protocol: an
`AIMessage` whose text is the model's reasoning and whose `tool_calls` hold the requested calls, answered by
one `ToolMessage` each; a final answer is an `AIMessage` holding the answer. The modules: `interface`
(`DecisionProtocol`, `read_reply`), `extraction`, `tool_calling`, `written` (json), `text_protocols` (react,
call_tool) and `registry` (`PROTOCOLS`, `get_protocol`); every name is imported from here.
"""

from reinloop.protocols.extraction import extract_json_object
from reinloop.protocols.interface import CUT_REPLY_QUOTED_CHARS as CUT_REPLY_QUOTED_CHARS
from reinloop.protocols.interface import CUT_REPLY_TEMPLATE, DecisionProtocol, cut_off, read_reply
from reinloop.protocols.interface import new_call_id as new_call_id
from reinloop.protocols.registry import PROTOCOLS, get_protocol
from reinloop.protocols.text_protocols import CallToolProtocol, ReactProtocol
from reinloop.protocols.tool_calling import ToolCallingProtocol
from reinloop.protocols.written import FINAL_ANSWER_ACTION, OBSERVATION_LABEL, JsonProtocol, WrittenProtocol

__all__ = [
    "CUT_REPLY_TEMPLATE",
    "FINAL_ANSWER_ACTION",
    "OBSERVATION_LABEL",
    "PROTOCOLS",
    "CallToolProtocol",
    "DecisionProtocol",
    "JsonProtocol",
    "ReactProtocol",
    "ToolCallingProtocol",
    "WrittenProtocol",
    "cut_off",
    "extract_json_object",
    "get_protocol",
    "read_reply",
]
