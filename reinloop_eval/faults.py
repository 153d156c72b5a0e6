"""The simulated faults: what they are (`FAULT_MODEL`, `COSTLY_FAULT_MODEL`), their rates (`FaultProfile`, and
`COSTLY_FAULTS` read from costly_faults.toml), and the seeded draws that decide them, per decision and per tool
call, the same for every agent on a task at a seed."""

from __future__ import annotations

import random
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "COSTLY_FAULTS",
    "COSTLY_FAULTS_FILE",
    "COSTLY_FAULT_MODEL",
    "EXTRA_FAULTS",
    "EXTRA_FAULT_RATE",
    "FAULT_MODEL",
    "TOOL_TIMEOUT_S",
    "CostlyFaults",
    "DecisionDraws",
    "ExtraDraws",
    "FaultProfile",
    "costly_profile",
    "decision_draws",
    "extra_draws",
    "lost_reply_draw",
    "tool_draws",
]

FAULT_MODEL = """\
Model faults: at each decision, with probability `fault_rate`, the model makes one mistake, drawn uniformly
from those that apply: malformed tool-call JSON; missing or mistyped arguments; an unknown tool name;
repeating its previous call; when the answer is known, not stopping (calling a tool again); a wrong final
answer. Recovery: the model reacts to the outcome of its own last action, whatever the agent appends after it
(a note as a human, system, AI or tool message changes nothing) and whether the agent kept or dropped that
action: a call whose observation failed (an error or an empty result), or a malformed reply (which fails
whatever answers it, and also when the agent drops it and asks again). After a failure it corrects itself
with probability `correct_rate`, else it repeats the failed action (the same call, or the same malformed
one). A fix is less likely when the feedback does not say what was wrong: after a mistake the feedback could
name (malformed arguments: that they must be JSON; an unknown tool: the right tool's name, as one of the
allowed values; a missing argument: its field; a mistyped one: its expected type, as JSON Schema or Python
names it), the chance is `correct_rate` if the feedback (what the agent sent after the model's last reply,
results and notes alike) names it, and `correct_rate` x `unnamed_fix_factor` (0.5: half) if it does not;
the same rule reads every agent's messages. After any other failure (a tool fault on the plan's own call) it
is `correct_rate`. Tool faults: each tool call, with probability `tool_fault_rate`, raises an exception, does its
work and then hangs for `slow_s` simulated seconds (four times the tool timeout reinloop and the presets have
in the evaluation), or returns an empty result (one of the three, uniformly). Time is simulated, so that no
figure depends on the machine's load: a model's latency, a timer's wait and a slow call's hang advance the
run's clock without sleeping; an agent with no tool timeout (or a longer one) waits the hang out and gets
the result, one whose timeout is shorter than the hang gets a timeout, since such a call hangs until the run
ends (its timeout, a real one, is then the only real wait, and no load makes a hang that never ends finish
within it, nor makes a normal call, milliseconds long, outlast it).

Draws are shared by the agents: each decision draws from a generator seeded by (seed, task, decision index),
each tool call from one seeded by (seed, task, tool-call index), with a fixed number of draws each, so every
agent meets the same faults at the same decision (and the same tool faults at the same tool call), and a run
is the same every time for a given seed.

Two more faults, off by default, use draws of their own (the runaway one per run, the stubborn loop one per
decision), so that with both off every run is the same as without them. Runaway (`runaway_rate`,
AutoGPT-style): at the first decision at which the answer is known, with probability `runaway_rate` the
model does not answer; from then on every decision is a new tool call, whatever it was sent: the n-th (n =
1, 2, ...) is `web_search` for one of eight topics of the search corpus followed by n when n is odd,
`calculator` with "n * (n + 1)" when n is even: valid, read-only calls, never the same twice, that succeed
unless a tool fault hits them. With `runaway_width` above 1, each such decision makes that many of them at
once (parallel tool calls: the n-th decision the calls numbered (n - 1) * width + 1 to n * width). It keeps
going for `runaway_rounds` decisions and then answers, or, by default, until the agent stops it. Stubborn
loop (`stubborn_rate`): at a decision that follows a successful tool observation, with probability
`stubborn_rate` the model calls the same tool with the same arguments again instead of moving on (or
answering); at each later decision it stops repeating with probability `correct_rate`, else repeats the call
again, whatever the agent answered (the tool's result, an earlier result, a refusal). A model that has run
away repeats nothing.

Five more faults have a rate each (`wrong_args_rate`, `near_repeat_rate`, `premature_rate`,
`text_call_rate`, `empty_rate`; 0 in `FaultProfile`, 0.02 each per decision in `reinloop eval` unless told
otherwise) and draws of their own: at a decision with no other fault, one draw picks at most one of them, each
by its rate. Wrong arguments: the plan's next call with one value changed (a digit, a number off by one, a
word added): valid, so it runs; the model takes it as the step done and its final answer is wrong (only the
task's check catches it). Near-repeat loop: after a successful `calculator` or `web_search` call, the same tool
with its argument changed once more each time (" + 0", " again"), valid and never identical, left with
probability `correct_rate` at each later decision. Premature answer: an answer before the plan is done, which
cannot hold the task's value. A call written as plain text: the plan's next call as the reply's text, a JSON
object `{"name": ..., "arguments": ...}` for native tool calls (what an open model writes when its server's
tool-call template fails), "I will use <tool> with <arguments>." in a text protocol. An empty reply. The last
two are unreadable replies: unless the agent read the call from the text (its next prompt shows that call),
the reply failed, and the model repeats it or corrects itself by `correct_rate`, as after a malformed call.

The model writes in the agent's protocol (`protocol`): native tool calls, or the text of the json, react or
call_tool protocol, the same decisions and the same faults in each; a malformed call is the call with the same
unterminated arguments in that format. It reads its prompt back through the protocol, each `Observation:`
turn as the result of the decision before it, so what it sees does not depend on the format either."""

# The faults with draws of their own, one rate each (`FaultProfile`), and the rate `reinloop eval` gives each
# unless told otherwise (FaultProfile's own default is 0: off).
EXTRA_FAULTS = ("wrong_args", "near_repeat", "premature", "text_call", "empty")
EXTRA_FAULT_RATE = 0.02

# The tool timeout of reinloop and the presets in the evaluation (real seconds): a normal call takes
# milliseconds, and a slow call longer than it hangs until the run ends, so no load crosses this margin.
TOOL_TIMEOUT_S = 0.5


@dataclass(frozen=True)
class FaultProfile:
    fault_rate: float = 0.2
    correct_rate: float = 0.7
    tool_fault_rate: float = 0.1
    slow_s: float = 4 * TOOL_TIMEOUT_S  # simulated seconds a slow call hangs
    latency_s: float = 0.0  # simulated model latency per call (simulated seconds)
    runaway_rate: float = 0.0  # per run: once the answer is known, the chance it calls tools instead, on and on
    runaway_rounds: int | None = None  # runaway decisions before it answers after all; None: it never does
    runaway_width: int = 1  # new calls each runaway decision makes at once (parallel tool calls)
    stubborn_rate: float = 0.0  # per decision after a successful call: the chance it repeats that call
    # The faults below use draws of their own (`extra_draws`), at a decision with no other fault: each is one
    # mistake with its own rate per decision (see FAULT_MODEL).
    wrong_args_rate: float = 0.0  # valid arguments with a wrong value: only the task's check catches it
    near_repeat_rate: float = 0.0  # after a success, the same tool with slightly changed arguments, on and on
    premature_rate: float = 0.0  # an answer before the plan is done (a wrong one)
    text_call_rate: float = 0.0  # the plan's next call written as plain text instead of a tool call
    empty_rate: float = 0.0  # an empty reply
    # The recovery model (issue 46, set before any run with it): after a mistake the feedback could name and
    # did not, the chance of a fix is correct_rate times this. 1.0: recovery ignores what the feedback says.
    unnamed_fix_factor: float = 0.5
    # The costly faults of costly_faults.toml (`COSTLY_FAULTS`): the payments and hopeless tasks, a payment's
    # reply lost after its effect, invalid arguments reaching the tools; `costly_profile` also sets the runaway
    # rate. False: none of them, every run as before.
    costly: bool = False

    def extra_rates(self) -> tuple[tuple[str, float], ...]:
        """The rates of the faults with draws of their own, in the order `extra_draws` tries them."""
        return tuple((fault, getattr(self, f"{fault}_rate")) for fault in EXTRA_FAULTS)


class DecisionDraws(NamedTuple):
    """The draws of one decision, all made whether used or not, so that the n-th decision of every agent on a
    (seed, task) meets the same faults."""

    correct: float  # below correct_rate: it corrects itself after a failure
    fault: float  # below fault_rate: it makes a mistake
    which: float  # which of the mistakes that apply
    detail: float  # a bad argument: missing (below 0.5) or mistyped
    stubborn: float  # a stubborn loop: starts below stubborn_rate, ends below correct_rate


class ExtraDraws(NamedTuple):
    """The draws of one decision for the faults with their own rates, from a generator of their own, so that
    with those rates at 0 every run is the same as without them."""

    which: float  # which of them, if any: each takes its rate's share of [0, 1)
    end: float  # a near-repeat loop ends below correct_rate
    detail: float  # a wrong argument: which value it gets


def extra_draws(seed: int, index: int) -> ExtraDraws:
    """The extra draws of decision `index` (1, 2, ...) of a run seeded `seed`: the same for every agent."""
    rng = random.Random(f"{seed}/extra/{index}")
    return ExtraDraws(*(rng.random() for _ in ExtraDraws._fields))


def decision_draws(seed: int, index: int) -> DecisionDraws:
    """The draws of decision `index` (1, 2, ...) of a run seeded `seed`: the same for every agent."""
    rng = random.Random(f"{seed}/decision/{index}")
    return DecisionDraws(*(rng.random() for _ in DecisionDraws._fields))


def tool_draws(seed: int, index: int) -> tuple[float, float]:
    """The draws of tool call `index` (0, 1, ...) of a run seeded `seed`: whether it fails, and how."""
    rng = random.Random(f"{seed}/tool/{index}")
    return rng.random(), rng.random()


COSTLY_FAULTS_FILE = Path(__file__).with_name("costly_faults.toml")


@dataclass(frozen=True)
class CostlyFaults:
    """The parameters of the costly faults, as costly_faults.toml fixed them before any run (see that file)."""

    runaway_rate: float  # per run: the model never answers once it knows the answer
    non_idempotent_tools: tuple[str, ...]  # a second run of the same call is a second effect
    lost_reply_share: float  # of such a tool's injected exceptions, those raised after its effect
    invalid_args_reach_tools: bool  # a tool receives the arguments as the agent passes them

    @classmethod
    def read(cls, path: Path = COSTLY_FAULTS_FILE) -> CostlyFaults:
        with path.open("rb") as file:
            data = tomllib.load(file)
        return cls(
            runaway_rate=float(data["runaway"]["rate"]),
            non_idempotent_tools=tuple(data["non_idempotent"]["tools"]),
            lost_reply_share=float(data["non_idempotent"]["lost_reply_share"]),
            invalid_args_reach_tools=bool(data["invalid_args"]["reach_tools"]),
        )


COSTLY_FAULTS = CostlyFaults.read()


def costly_profile(profile: FaultProfile | None = None) -> FaultProfile:
    """`profile` (the default one if None) with the costly faults on, its runaway rate the file's and its
    runaways never ending by themselves."""
    base = profile or FaultProfile()
    return replace(base, costly=True, runaway_rate=COSTLY_FAULTS.runaway_rate, runaway_rounds=None)


def runaway_draw(seed: int) -> float:
    """The draw that makes a run seeded `seed` a runaway (below `runaway_rate`), once it knows the answer: the
    same for every agent, so the runs that run away are a fixed set, paired across agents."""
    return random.Random(f"{seed}/runaway").random()


def lost_reply_draw(seed: int, index: int) -> float:
    """Whether tool call `index` of a run seeded `seed`, if an injected exception hits a non-idempotent tool,
    comes after the effect (below `lost_reply_share`): a generator of its own, so the other draws stay."""
    return random.Random(f"{seed}/lost/{index}").random()


COSTLY_FAULT_MODEL = f"""\
Costly faults (`FaultProfile.costly`, parameters in reinloop_eval/costly_faults.toml, fixed before any run with
them). Every agent gets one more tool, `send_payment`, which pays once more at each run, and the suite
gets twelve more tasks: eight payments (four alone, four beside a calculation, a receipt file or an expense
row) and four hopeless tasks, which no agent can do (a company and a year the data does not hold, a file that
does not exist, a payee whose account is closed, so that the payment is always declined). The model meets them
with the same faults as any task: after a failure it calls the same step again (or repeats the failed call), so
on a hopeless task it never gives up by itself. Non-idempotent tools ({", ".join(COSTLY_FAULTS.non_idempotent_tools)}):
each agent declares them as a careful user would, reinloop with `{{"reinloop": {{"idempotent": False}}}}` in the
tool's metadata (so it is not retried in place, a timeout or lost connection of it is reported in doubt, and an
identical call after its success is answered from the earlier result), the LangChain agents with nothing, as
LangChain has no such declaration. Of their injected exceptions, a share of {COSTLY_FAULTS.lost_reply_share:g}
(a draw of its own) is raised after the payment was made, a reply lost on its way back. Invalid arguments
reach the tools: {"yes" if COSTLY_FAULTS.invalid_args_reach_tools else "no"}: a tool receives the arguments as
the agent passes them, unvalidated (reinloop validates before any tool runs, the LangChain agents do not): a tool
with its own schema check refuses them as a failed run, while `send_payment`, a plain function over a payments
API, checks nothing: a missing argument fails, a mistyped one is sent on and pays what was not asked. Runaways:
the runaway rate is {COSTLY_FAULTS.runaway_rate:g} per run, and a runaway never ends by itself."""
