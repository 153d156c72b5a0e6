"""Chat model backends: any LangChain chat model, or an `init_chat_model`-style string."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel

from reinloop.errors import ConfigurationError

__all__ = ["DEFAULT_MODEL", "LOCAL", "ChosenModel", "is_transient", "model_from_settings", "resolve_model"]

DEFAULT_MODEL = "openai:gpt-4o-mini"  # when OPENAI_API_KEY is set and no model is named
LOCAL = "local"  # the embedded model


def resolve_model(model: BaseChatModel | str, **kwargs: Any) -> BaseChatModel:
    """The chat model itself, or the model a string such as ``"openai:gpt-4o-mini"`` names."""
    if isinstance(model, BaseChatModel):
        return model
    if isinstance(model, str):
        from langchain.chat_models import init_chat_model

        try:
            chosen: BaseChatModel = init_chat_model(model, **kwargs)
            return chosen
        except ImportError as exc:
            raise ConfigurationError(f"model {model!r} needs a package that is not installed: {exc}") from None
        except Exception as exc:  # missing keys, unknown providers: say which model and why, once
            reason = " ".join(str(exc).split())  # one line: provider errors come with paragraphs
            raise ConfigurationError(f"cannot set up model {model!r}: {reason}") from None
    raise ConfigurationError(
        f"model must be a LangChain chat model or a model string like 'openai:gpt-4o-mini', got {model!r}"
    )


def is_transient(exc: Exception) -> bool:
    """Whether a failed model call is worth retrying: network trouble, rate limits, server errors.

    Model mistakes never get here (they are data), and developer errors (bad key, bad request) fail fast.
    """
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    import httpx
    import openai  # langchain-openai, a dependency, depends on it

    if isinstance(exc, openai.APIConnectionError | openai.RateLimitError | openai.InternalServerError):
        return True

    if isinstance(exc, httpx.TransportError):
        return True
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code == 429 or exc.response.status_code >= 500
    return False


@dataclass(frozen=True)
class ChosenModel:
    """A chat model picked from command-line style settings, with what suits it."""

    model: BaseChatModel
    label: str  # saved with the run (never a key), so a resume picks the same model
    protocol: str
    config: dict[str, Any] = field(default_factory=dict)  # AgentConfig values suited to the model
    decision_protocol: Any = None  # a custom DecisionProtocol, or None for the config's


@contextmanager
def model_from_settings(model: str | None, base_url: str | None, protocol: str | None) -> Iterator[ChosenModel]:
    """The model that `--model` / `--base-url` name, or the embedded local model when neither is given and
    no OPENAI_API_KEY is set (its server runs for the duration of the `with` block)."""
    if base_url:
        yield _server_model(model, base_url, protocol)
    elif model == LOCAL or (model is None and not os.environ.get("OPENAI_API_KEY")):
        from reinloop.models.local import LocalModelServer, local_protocol

        transcript = local_protocol(protocol)  # before the server starts: a wrong protocol fails at once
        with LocalModelServer() as server:
            yield ChosenModel(server.chat_model(), LOCAL, transcript.name, {"context_token_budget": 3_400}, transcript)
    else:
        name = model or DEFAULT_MODEL
        yield ChosenModel(resolve_model(name), name, protocol or "tool_calling")


def _server_model(model: str | None, base_url: str, protocol: str | None) -> ChosenModel:
    import httpx
    from langchain_openai import ChatOpenAI

    try:
        listed = httpx.get(f"{base_url.rstrip('/')}/models", timeout=5)
        listed.raise_for_status()
    except httpx.HTTPError as exc:
        raise ConfigurationError(f"cannot reach the model server at {base_url}: {exc or type(exc).__name__}") from None
    if model is None:
        try:
            model = listed.json()["data"][0]["id"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ConfigurationError(f"the server at {base_url} lists no model; name one with --model") from None
    chat = ChatOpenAI(model=model, base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY") or "not-needed",
                      max_retries=1, timeout=120)  # fmt: skip
    return ChosenModel(chat, model, protocol or "tool_calling")
