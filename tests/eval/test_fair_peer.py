"""The fair peer (create_agent + the standard middleware + re-ask + recovery of every unreadable reply): a call
written as JSON text becomes a native call, an empty reply and a malformed call are asked again with what was
wrong, within reinloop's parse-retry budget; runs that end the re-asking peer's succeed with it."""

import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from reinloop.testing import ScriptedChatModel, tool_call
from reinloop.tools.toolset import default_toolset
from reinloop_eval import SUITE, FaultProfile, evaluate_suite
from reinloop_eval.agents import (
    EMPTY_REPLY_NOTE,
    FAIR_PEER,
    MALFORMED_NOTE,
    REASK_RETRIES,
    REASKING,
    _runners,
)
from reinloop_eval.grid import REFERENCE
from reinloop_eval.run import paired

TASK = SUITE[0]  # calc-01: one calculator call, then the answer
STEP = TASK.plan[0]
WRITTEN = json.dumps({"name": STEP.tool, "arguments": STEP.args})
MALFORMED = AIMessage(
    "", invalid_tool_calls=[{"type": "invalid_tool_call", "id": "m1", "name": STEP.tool, "args": '{"ex', "error": None}]
)


def run(agent, replies, tmp_path):
    model = ScriptedChatModel(replies=replies)
    outcome = _runners(FaultProfile())[agent](model, default_toolset(tmp_path), TASK, {})
    return outcome, model


def test_the_fair_peer_is_the_grids_reference():
    assert REFERENCE == FAIR_PEER


def test_a_call_written_as_json_text_is_run_as_a_native_call_where_the_reasking_peer_answers_with_the_text(tmp_path):
    outcome, model = run(FAIR_PEER, [AIMessage(WRITTEN), AIMessage(TASK.answer)], tmp_path)
    assert outcome.finish == "answered" and TASK.check(tmp_path, outcome.final) and outcome.reasks == 0
    result = model.calls[1].messages[-1]
    assert isinstance(result, ToolMessage) and result.name == STEP.tool and result.status != "error"

    outcome, model = run(REASKING, [AIMessage(WRITTEN), AIMessage(TASK.answer)], tmp_path)
    assert outcome.final == WRITTEN and not TASK.check(tmp_path, outcome.final) and model.remaining == 1


def test_an_empty_reply_is_asked_again_with_a_note_where_the_reasking_peer_answers_nothing(tmp_path):
    replies = [AIMessage(""), tool_call(STEP.tool, STEP.args), AIMessage(TASK.answer)]
    outcome, model = run(FAIR_PEER, replies, tmp_path)
    assert TASK.check(tmp_path, outcome.final) and outcome.reasks == 1
    assert model.calls[1].messages[-1] == HumanMessage(EMPTY_REPLY_NOTE)

    outcome, _ = run(REASKING, replies, tmp_path)
    assert outcome.final == "" and not TASK.check(tmp_path, outcome.final)


def test_a_malformed_call_is_asked_again_with_what_was_wrong_within_the_parse_retry_budget(tmp_path):
    replies = [MALFORMED] * (REASK_RETRIES + 1) + [tool_call(STEP.tool, STEP.args), AIMessage(TASK.answer)]
    outcome, model = run(FAIR_PEER, replies, tmp_path)
    assert TASK.check(tmp_path, outcome.final) and outcome.reasks == REASK_RETRIES
    asked = model.calls[1].messages  # the re-ask: the reply, and its call answered with what was wrong
    assert asked[-2].invalid_tool_calls and asked[-1].tool_call_id == "m1" and "JSON object" in asked[-1].text
    # still malformed after the retries: the reply stays with a note, and a new step is a round (as reinloop)
    note = model.calls[REASK_RETRIES + 1].messages[-1]
    assert isinstance(note, HumanMessage) and note.text == MALFORMED_NOTE


@pytest.mark.parametrize("rates", [{"text_call_rate": 0.2}, {"empty_rate": 0.2}], ids=["text-calls", "empty-replies"])
def test_the_fair_peer_solves_the_runs_the_reasking_peer_loses_to_unreadable_replies_and_loses_none(rates):
    profile = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0, correct_rate=0.5, **rates)
    records = evaluate_suite(profile=profile, seed=100, tasks=12, agents=(REASKING, FAIR_PEER))
    comparison = paired(records, REASKING, baseline=FAIR_PEER)
    assert comparison["wins"] > 0 and comparison["losses"] == 0
