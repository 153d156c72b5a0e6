"""Decision protocols: how the model states a decision, and how reinloop reads it.

A protocol binds the model, adds its instructions to the system prompt, renders the window for the model,
and parses each reply into a `Decision`. Replies are stored in one normal form whatever the protocol: an
`AIMessage` whose text is the model's reasoning and whose `tool_calls` hold the requested calls, answered
by one `ToolMessage` each; a final answer is an `AIMessage` holding the answer.

`PROTOCOLS` maps each `ProtocolName` (what `AgentConfig.protocol` accepts) to its class, and `get_protocol`
is the one place that picks an agent's protocol, from the config or a custom `DecisionProtocol` object.
`read_reply` is how decide reads every reply, whatever the protocol: a reply cut at the output limit is
unparsable, never handed to the protocol.

The modules: `interface` (`DecisionProtocol`, `read_reply`), `extraction` (the JSON object and the tool name
in a reply's text), `tool_calling`, `written` (`WrittenProtocol` and the json protocol), `text_protocols`
(react, call_tool) and `registry` (`PROTOCOLS`, `get_protocol`). Every name is imported from here.
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
