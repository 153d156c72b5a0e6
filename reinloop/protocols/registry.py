"""The protocol registry: `PROTOCOLS` maps each `ProtocolName` (what `AgentConfig.protocol` accepts) to its
class, checked when this module loads, and `get_protocol` is the one place that picks an agent's protocol,
from the config or a custom `DecisionProtocol` object.
"""

from __future__ import annotations

from typing import get_args

from reinloop.config import AgentConfig, ProtocolName
from reinloop.errors import ConfigurationError
from reinloop.protocols.interface import DecisionProtocol
from reinloop.protocols.text_protocols import CallToolProtocol, ReactProtocol
from reinloop.protocols.tool_calling import ToolCallingProtocol
from reinloop.protocols.written import JsonProtocol

# The protocols `AgentConfig.protocol` names. A new one is a class here and a name in `ProtocolName`; the
# CLI's --protocol choices follow.
PROTOCOLS: dict[ProtocolName, type[DecisionProtocol]] = {
    "tool_calling": ToolCallingProtocol,
    "json": JsonProtocol,
    "react": ReactProtocol,
    "call_tool": CallToolProtocol,
}

PROTOCOL_MISMATCH_TEMPLATE = (
    "the protocol object {custom!r} is named {name!r}, but the config names protocol={configured!r}: "
    "leave AgentConfig.protocol unset to use the object, or pass an object whose name is {configured!r}"
)


def get_protocol(choice: AgentConfig | ProtocolName, custom: DecisionProtocol | None = None) -> DecisionProtocol:
    """The protocol an agent uses: `custom` when given, else a new instance of the class `PROTOCOLS`
    registers under the name (`choice`, or `choice.protocol` for a config).

    A custom protocol must agree with a name set explicitly: with a name, or a config whose `protocol` was
    given, its `name` must be that name, else `ConfigurationError`. A config that leaves `protocol` at its
    default accepts any protocol object (e.g. one with a new name).
    """
    if isinstance(choice, AgentConfig):
        name, named = choice.protocol, "protocol" in choice.model_fields_set
    else:
        name, named = choice, True
    if custom is None:
        if name not in PROTOCOLS:
            raise ConfigurationError(f"unknown protocol {name!r}; use one of {list(PROTOCOLS)}")
        return PROTOCOLS[name]()
    if not isinstance(custom, DecisionProtocol):
        raise ConfigurationError(
            f"protocol must be a DecisionProtocol instance, got {custom!r}; e.g. protocol=JsonProtocol()"
        )
    custom_name = getattr(custom, "name", None)
    if named and custom_name != name:
        raise ConfigurationError(
            PROTOCOL_MISMATCH_TEMPLATE.format(custom=type(custom).__name__, name=custom_name, configured=name)
        )
    return custom


def _check_registry() -> None:
    # A developer error in this module, caught at import rather than as a KeyError when an agent is built.
    names = get_args(ProtocolName)
    if sorted(PROTOCOLS) != sorted(names) or any(cls.name != key for key, cls in PROTOCOLS.items()):
        raise ConfigurationError(
            f"PROTOCOLS must register one class per ProtocolName {list(names)} under its own name, got "
            f"{ {key: cls.name for key, cls in PROTOCOLS.items()} }"
        )


_check_registry()
