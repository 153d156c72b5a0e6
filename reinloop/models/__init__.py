"""Chat model backends: any LangChain chat model, or an `init_chat_model`-style string."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel

from reinloop.config import DEFAULT_REPLY_TOKENS
from reinloop.errors import ConfigurationError

__all__ = [
    "DEFAULT_MODEL",
    "LOCAL",
    "ChosenModel",
    "is_transient",
    "model_from_settings",
    "openai_compatible_model",
    "resolve_model",
]

DEFAULT_MODEL = "openai:gpt-4o-mini"  # when OPENAI_API_KEY is set and no model is named
LOCAL = "local"  # the embedded model
# The init_chat_model keyword that caps a reply's tokens, by provider where it is not `max_tokens`, the one
# init_chat_model documents: a chat model ignores keywords it does not know (ChatOllama would ignore max_tokens).
CAP_KEYWORDS = {"ollama": "num_predict"}
# The host of OpenAI's own API: a ChatOpenAI pointed anywhere else talks to an OpenAI-compatible server.
OPENAI_API_HOST = "api.openai.com"


def resolve_model(
    model: BaseChatModel | str, *, max_reply_tokens: int | None = DEFAULT_REPLY_TOKENS, **kwargs: Any
) -> BaseChatModel:
    """The chat model itself, or the model a string such as ``"openai:gpt-4o-mini"`` names, its replies capped
    at `max_reply_tokens` (`AgentConfig.max_reply_tokens`; None: no cap); `kwargs` go to `init_chat_model`.

    A model object is returned as it is: its own output limit, if any, holds."""
    if isinstance(model, BaseChatModel):
        return model
    if isinstance(model, str):
        from langchain.chat_models import init_chat_model

        try:
            chosen: BaseChatModel = init_chat_model(model, **_capped(model, max_reply_tokens, kwargs))
            return _server_capped(chosen)
        except ImportError as exc:
            raise ConfigurationError(f"model {model!r} needs a package that is not installed: {exc}") from None
        except Exception as exc:  # missing keys, unknown providers: say which model and why, once
            reason = " ".join(str(exc).split())  # one line: provider errors come with paragraphs
            raise ConfigurationError(f"cannot set up model {model!r}: {reason}") from None
    raise ConfigurationError(
        f"model must be a LangChain chat model or a model string like 'openai:gpt-4o-mini', got {model!r}"
    )


def _capped(model: str, max_reply_tokens: int | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` for `init_chat_model(model, ...)` with the cap in the provider's keyword, unless given."""
    if max_reply_tokens is None:
        return kwargs
    provider = kwargs.get("model_provider") or (model.split(":", 1)[0] if ":" in model else "")
    return {CAP_KEYWORDS.get(provider, "max_tokens"): max_reply_tokens, **kwargs}


def _server_capped(model: BaseChatModel) -> BaseChatModel:
    """`model`, with its cap also sent as max_tokens when it is a ChatOpenAI talking to another server (a base
    URL given, or OPENAI_BASE_URL): langchain-openai sends the cap as max_completion_tokens, which OpenAI reads
    but llama.cpp's server ignores, and OpenAI's API refuses the pair."""
    from langchain_openai import ChatOpenAI

    if not isinstance(model, ChatOpenAI) or model.max_tokens is None or model.root_client is None:
        return model
    if model.root_client.base_url.host == OPENAI_API_HOST:
        return model
    extra_body = {"max_tokens": model.max_tokens, **(model.extra_body or {})}
    return model.model_copy(update={"extra_body": extra_body})


def openai_compatible_model(
    base_url: str, model: str, *, max_reply_tokens: int | None = DEFAULT_REPLY_TOKENS, **kwargs: Any
) -> BaseChatModel:
    """A `ChatOpenAI` for the model `model` on the OpenAI-compatible server at `base_url` (Ollama's /v1, vLLM,
    llama.cpp), its replies capped at `max_reply_tokens` in both ways servers read a cap: max_completion_tokens
    (what langchain-openai sends for `max_tokens`) and max_tokens (in the request body, for servers that
    ignore the other, as llama.cpp's does). `kwargs` go to `ChatOpenAI` (api_key, timeout, temperature, ...)."""
    from langchain_openai import ChatOpenAI

    if max_reply_tokens is not None:
        kwargs["max_tokens"] = max_reply_tokens
    return _server_capped(ChatOpenAI(model=model, base_url=base_url, **kwargs))


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
def model_from_settings(
    model: str | None,
    base_url: str | None,
    protocol: str | None,
    *,
    max_reply_tokens: int | None = DEFAULT_REPLY_TOKENS,
) -> Iterator[ChosenModel]:
    """The model that `--model` / `--base-url` name, its replies capped at `max_reply_tokens`, or the embedded
    local model when neither is given and no OPENAI_API_KEY is set (its server runs for the duration of the
    `with` block; its replies are capped for its small context, `REPLY_TOKENS`). The cap is in the
    `ChosenModel`'s config too, so that the AgentConfig built from it says what the model sends."""
    if base_url:
        yield _server_model(model, base_url, protocol, max_reply_tokens)
    elif model == LOCAL or (model is None and not os.environ.get("OPENAI_API_KEY")):
        from reinloop.models.local import INPUT_TOKENS, REPLY_TOKENS, LocalModelServer, local_protocol

        transcript = local_protocol(protocol)  # before the server starts: a wrong protocol fails at once
        # The budget its profile gives too, set here so that it holds over a preset's (layered_config).
        suited = {"context_token_budget": INPUT_TOKENS, "max_reply_tokens": REPLY_TOKENS}
        with LocalModelServer() as server:
            yield ChosenModel(server.chat_model(), LOCAL, transcript.name, suited, transcript)
    else:
        name = model or DEFAULT_MODEL
        chosen = resolve_model(name, max_reply_tokens=max_reply_tokens)
        yield ChosenModel(chosen, name, protocol or "tool_calling", {"max_reply_tokens": max_reply_tokens})


def _server_model(model: str | None, base_url: str, protocol: str | None, max_reply_tokens: int | None) -> ChosenModel:
    import httpx

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
    chat = openai_compatible_model(base_url, model, max_reply_tokens=max_reply_tokens, max_retries=1, timeout=120,
                                   api_key=os.environ.get("OPENAI_API_KEY") or "not-needed")  # fmt: skip
    return ChosenModel(chat, model, protocol or "tool_calling", {"max_reply_tokens": max_reply_tokens})
