"""translate: text into a target language, by a chat model (the agent's own, by default)."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import BaseTool
from pydantic import BaseModel, Field

from reinloop.tools.registry import POLICY_KEY

__all__ = ["TranslateTool"]

MAX_TEXT_CHARS = 2_000
TRANSLATE_PROMPT = (
    "You are a professional translator. Translate the user's text into {language}. Keep names, numbers and "
    "formatting. Reply with the translation only, without quotes or comments."
)


class TranslateInput(BaseModel):
    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS, description="The text to translate.")
    target_language: str = Field(
        min_length=2, max_length=40, description="The language to translate into, e.g. 'French' or 'zh-CN'."
    )


class TranslateTool(BaseTool):
    """Translate text with a chat model."""

    name: str = "translate"
    description: str = "Translate a text into another language."
    args_schema: type[BaseModel] = TranslateInput
    # A model call changes nothing but the bill: safe to retry in place.
    metadata: dict[str, Any] | None = Field(default_factory=lambda: {POLICY_KEY: {"retryable": True}})
    model: BaseChatModel

    def _run(self, text: str, target_language: str, **_: Any) -> str:
        reply = self.model.invoke(
            [SystemMessage(TRANSLATE_PROMPT.format(language=target_language)), HumanMessage(text)]
        )
        return reply.text.strip()
