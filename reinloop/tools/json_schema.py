"""The arguments of a tool described by a JSON schema, checked before the tool runs.

A tool whose `args_schema` is a JSON-schema dict (every MCP tool that langchain-mcp-adapters loads) has no
pydantic model, and its own invoke passes any arguments on unchecked. `JsonArgsValidator` checks the schema
once, when the tool is registered, then each call's arguments with the `jsonschema` package, and says what is
wrong in the words of the pydantic path (`RegisteredTool.validate`): one short line per problem, such as
``b: missing (required)`` or ``a: expected integer (got 'two')``.

Validation stays offline and cheap: a `$ref` resolves within the schema or to a JSON-schema meta-schema, never
by fetching a URL, and `format` is not checked (by default JSON schema treats it as an annotation; jsonschema's
checks of some formats depend on which optional packages happen to be installed).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import Draft202012Validator, SchemaError, ValidationError  # type: ignore[import-untyped]
from jsonschema.validators import validator_for  # type: ignore[import-untyped]
from jsonschema_specifications import REGISTRY as META_SCHEMAS  # type: ignore[import-untyped]

from reinloop.errors import ConfigurationError
from reinloop.text import counted, truncate

__all__ = ["MAX_PROBLEMS", "JsonArgsValidator"]

# A value is quoted as the pydantic path quotes it; an enum's options and a whole problem line are cut too, so
# that a huge argument, key or schema never reaches the prompt whole.
_VALUE_CHARS = 80
_OPTIONS_CHARS = 160
_PROBLEM_CHARS = 300
# The problems reported for one call: a long list of wrong items would otherwise fill the prompt.
MAX_PROBLEMS = 20


@dataclass(frozen=True, slots=True)
class JsonArgsValidator:
    """A tool's JSON schema for its arguments, checked and compiled once (`for_tool`)."""

    validator: Any  # a jsonschema validator (jsonschema has no type information)

    @classmethod
    def for_tool(cls, name: str, schema: Mapping[str, Any]) -> JsonArgsValidator:
        """The validator of tool `name`'s arguments; `ConfigurationError` when `schema` is not a valid JSON schema
        (under the draft its `$schema` names, else 2020-12) or has a `$ref` that resolves to nothing."""
        validator_class = validator_for(schema, default=Draft202012Validator)
        try:
            validator_class.check_schema(schema)
        except SchemaError as exc:
            raise ConfigurationError(
                f"tool {name!r} has an invalid JSON schema for its arguments, at {exc.json_path}: "
                f"{truncate(exc.message, _PROBLEM_CHARS)}"
            ) from None
        _check_references(name, schema, validator_class)
        # The meta-schemas as the only registry: jsonschema's default one fetches unknown `$ref` URLs.
        # No format_checker: `format` is not checked.
        return cls(validator_class(schema, registry=META_SCHEMAS))

    def problems(self, args: Mapping[str, Any]) -> list[str]:
        """What is wrong with `args`, one line per problem in the order of their fields; empty when valid."""
        found = [line for error in self.validator.iter_errors(args) for line in _describe(error)]
        found.sort(key=lambda line: [(isinstance(part, str), part) for part in line[0]])
        lines = list(dict.fromkeys(truncate(text, _PROBLEM_CHARS) for _, text in found))
        if len(lines) > MAX_PROBLEMS:
            return [*lines[:MAX_PROBLEMS], f"and {counted(len(lines) - MAX_PROBLEMS, 'more problem')}"]
        return lines


def _check_references(name: str, schema: Mapping[str, Any], validator_class: Any) -> None:
    # Each `$ref` of the schema and its subschemas, resolved in its scope as the validator resolves it, but
    # now: at a call, an unresolvable one would raise out of the run instead of naming the tool.
    specification = referencing.jsonschema.specification_with(validator_class.ID_OF(validator_class.META_SCHEMA))
    root = specification.create_resource(schema)
    pending = [(META_SCHEMAS.resolver_with_root(root), root)]
    while pending:
        resolver, resource = pending.pop()
        ref = resource.contents.get("$ref") if isinstance(resource.contents, Mapping) else None
        if isinstance(ref, str):
            try:
                resolver.lookup(ref)
            except referencing.exceptions.Unresolvable as exc:
                raise ConfigurationError(
                    f"tool {name!r} has a JSON schema for its arguments whose $ref {ref!r} cannot be resolved "
                    f"({type(exc).__name__}): a $ref must point within the schema, as reinloop never fetches one"
                ) from None
        pending += [(resolver.in_subresource(subresource), subresource) for subresource in resource.subresources()]


def _describe(error: ValidationError) -> Iterator[tuple[list[Any], str]]:
    """The problems one jsonschema error stands for, each with the path of the field it names."""
    path = list(error.absolute_path)
    field = _field(path)
    keyword, expected, value = error.validator, error.validator_value, error.instance
    if keyword == "required" and isinstance(expected, list):
        # jsonschema names a missing property only in the message of an error at the object's path: each such
        # error lists all the missing ones here, and `problems` drops the repeats.
        for missing in expected:
            if missing not in value:
                yield [*path, missing], f"{_field([*path, missing])}: missing (required)"
    elif keyword == "additionalProperties" and expected is False and "patternProperties" not in error.schema:
        known = sorted(error.schema.get("properties", {}))
        for key in value:
            if key not in known:
                yield [*path, key], f"{_field([*path, key])}: unexpected argument (expected one of {known})"
    elif keyword == "type":
        kinds = " or ".join(expected) if isinstance(expected, list) else expected
        yield path, f"{field}: expected {kinds} (got {_quoted(value)})"
    elif keyword == "enum":
        options = truncate(", ".join(_quoted(option) for option in expected), _OPTIONS_CHARS)
        yield path, f"{field}: expected one of {options} (got {_quoted(value)})"
    else:
        # jsonschema's own message, which quotes the value whole.
        yield path, f"{field}: {error.message.replace(repr(value), _quoted(value))}"


def _field(path: list[Any]) -> str:
    return ".".join(str(part) for part in path) or "arguments"


def _quoted(value: Any) -> str:
    return truncate(repr(value), _VALUE_CHARS)
