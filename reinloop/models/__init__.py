"""Chat model backends: any LangChain chat model, or an `init_chat_model`-style string."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel

from reinloop.errors import ConfigurationError

__all__ = ["is_transient", "resolve_model"]


def resolve_model(model: BaseChatModel | str, **kwargs: Any) -> BaseChatModel:
    """The chat model itself, or the model a string such as ``"openai:gpt-4o-mini"`` names."""
    if isinstance(model, BaseChatModel):
        return model
    if isinstance(model, str):
        from langchain.chat_models import init_chat_model

        try:
            return init_chat_model(model, **kwargs)
        except ImportError as exc:
            raise ConfigurationError(f"model {model!r} needs a package that is not installed: {exc}") from None
        except Exception as exc:  # missing keys, unknown providers: say which model and why, once
            raise ConfigurationError(f"cannot set up model {model!r}: {exc}") from None
    raise ConfigurationError(
        f"model must be a LangChain chat model or a model string like 'openai:gpt-4o-mini', got {model!r}"
    )


def is_transient(exc: Exception) -> bool:
    """Whether a failed model call is worth retrying: network trouble, rate limits, server errors.

    Model mistakes never get here (they are data), and developer errors (bad key, bad request) fail fast.
    """
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    try:
        import openai
    except ImportError:  # pragma: no cover - langchain-openai depends on it
        openai = None
    if openai is not None and isinstance(
        exc, openai.APIConnectionError | openai.RateLimitError | openai.InternalServerError
    ):
        return True
    import httpx

    if isinstance(exc, httpx.TransportError):
        return True
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code == 429 or exc.response.status_code >= 500
    return False
