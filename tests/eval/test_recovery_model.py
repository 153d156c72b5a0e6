"""The recovery model: a fix after a mistake is likelier when the feedback names what was wrong (the field, the
expected type, the allowed values, the arguments' format), by one rule for every agent's messages, decided by
the seeded draws; and an empty reply after a call written as text and read is still an unread reply."""

import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from reinloop_eval import SUITE, FaultProfile
from reinloop_eval.conversation import feedback, names_the_mistake
from reinloop_eval.faults import decision_draws
from reinloop_eval.simulated import SimulatedModel

TASK = SUITE[0]  # calc-01: calculator(expression)
STEP = TASK.plan[0]
CORRECT, FACTOR = 0.8, 0.5


def call(name, args, id="c1"):
    return {"name": name, "args": args, "id": id, "type": "tool_call"}


MISSING = call("calculator", {})
MISTYPED = call("calculator", {"expression": [STEP.args["expression"]]})
UNKNOWN = call("calculator_tool", dict(STEP.args))
MALFORMED = {"type": "invalid_tool_call", "id": "m1", "name": "calculator", "args": '{"expr', "error": None}
PLAN_CALL = call("calculator", dict(STEP.args))

# What agents answer each mistake with (reinloop's templates and LangChain's, as the evaluation's runs show them),
# and feedback that names nothing.
CASES = [
    (MISSING, "Error: invalid arguments for 'calculator': expression: missing (required).", True),
    (MISSING, "Error invoking tool 'calculator' with kwargs {} with error:\n expression: Field required", True),
    (MISSING, "Error: not run: this call came 3 times in 3 decisions. Change the arguments.", False),
    (MISTYPED, "Error: invalid arguments for 'calculator': expression: Input should be a valid string.", True),
    (MISTYPED, "Expected calculator(expression: string).", True),
    (MISTYPED, "Error invoking tool 'calculator' with kwargs {'expression': ['23 * 19']}: failed", False),
    (UNKNOWN, "Error: 'calculator_tool' is not a valid tool. Did you mean 'calculator'?", True),
    (UNKNOWN, "Error: calculator_tool is not a valid tool, try one of [web_search, calculator].", True),
    (UNKNOWN, "Error: calculator_tool is not a valid tool.", False),
    (MALFORMED, "Your reply could not be read (the tool call's arguments are not a valid JSON object)", True),
    (MALFORMED, "Tool call calculator could not be executed - arguments were malformed or truncated.", False),
    (PLAN_CALL, "Error: 'calculator' failed: simulated internal error.", None),
]


@pytest.mark.parametrize(
    "failed, text, named",
    CASES,
    ids=[
        "missing-field-named-by-reinloop", "missing-field-named-by-langchain", "missing-field-not-named",
        "mistyped-type-named", "mistyped-type-in-a-signature", "mistyped-field-only-echoed",
        "unknown-tool-named-as-a-close-match", "unknown-tool-named-among-the-allowed", "unknown-tool-not-named",
        "malformed-json-named", "malformed-format-not-named", "tool-fault-on-the-plans-call",
    ],
)  # fmt: skip
def test_the_feedback_names_the_mistake_by_its_field_type_allowed_values_or_format(failed, text, named):
    assert names_the_mistake(failed, STEP, text) is named


def test_the_feedback_is_what_came_after_the_last_call_and_never_the_instructions_or_the_task():
    system = SystemMessage("Reply with JSON arguments; calculator takes an expression string.")
    first = [system, HumanMessage(TASK.prompt), HumanMessage("Your reply was not valid JSON.")]
    assert feedback(first) == "Your reply was not valid JSON."
    after = [*first, AIMessage("", tool_calls=[MISSING]), ToolMessage("expression: missing", tool_call_id="c1")]
    assert feedback([*after, AIMessage("a note")]) == "expression: missing\na note"


def failed_then(text):
    return [HumanMessage(TASK.prompt), AIMessage("", tool_calls=[MISSING]), ToolMessage(text, tool_call_id="c1")]


def model(seed, factor=FACTOR):
    profile = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0, correct_rate=CORRECT, unnamed_fix_factor=factor)
    return SimulatedModel(task=TASK, profile=profile, seed=seed)


def fixed(reply):
    return reply.tool_calls[0]["args"] == STEP.args


NAMED = failed_then("Error: invalid arguments for 'calculator': expression: missing (required).")
UNNAMED = failed_then("Error: the call failed.")


def test_between_the_two_probabilities_the_named_feedback_is_fixed_and_the_unnamed_repeated_the_same_each_time():
    seed = next(s for s in range(1000) if CORRECT * FACTOR <= decision_draws(s, 1).correct < CORRECT)
    for _ in range(2):  # decided by the seed's draw, not by chance
        assert fixed(model(seed).invoke(NAMED))
        assert model(seed).invoke(UNNAMED).tool_calls[0]["args"] == {}  # the same failed call again
    assert fixed(model(seed, factor=1.0).invoke(UNNAMED))  # a model that ignores the feedback fixes both


def test_feedback_naming_the_field_raises_the_fix_rate_from_correct_rate_times_the_factor_to_correct_rate():
    seeds = range(400)
    named = sum(fixed(model(seed).invoke(NAMED)) for seed in seeds) / len(seeds)
    unnamed = sum(fixed(model(seed).invoke(UNNAMED)) for seed in seeds) / len(seeds)
    assert named == pytest.approx(CORRECT, abs=0.06)
    assert unnamed == pytest.approx(CORRECT * FACTOR, abs=0.06)


def test_an_empty_reply_after_a_call_written_as_text_and_read_is_still_unread():
    # The call a text reply wrote was kept after it was read: the next empty reply looked read as well (the
    # prompt's last call is that call) and went on without its draw.
    task = next(t for t in SUITE if t.id == "search-calc-01")
    step = task.plan[0]
    profile = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0, correct_rate=0.0, text_call_rate=1.0)
    model = SimulatedModel(task=task, profile=profile, seed=11)
    text = model.invoke([HumanMessage(task.prompt)])
    assert json.loads(text.text) == {"name": step.tool, "arguments": step.args}
    read = [HumanMessage(task.prompt), AIMessage("", tool_calls=[call(step.tool, step.args, "r1")])]
    read.append(ToolMessage("found it", tool_call_id="r1"))
    model.profile = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0, correct_rate=0.0, empty_rate=1.0)
    assert model.invoke(read).text == ""
    model.profile = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0, correct_rate=0.0)
    again = model.invoke(read)  # the agent asked again without reading anything: it does not learn
    assert again.text == "" and not again.tool_calls
