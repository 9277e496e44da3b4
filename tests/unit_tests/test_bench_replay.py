from __future__ import annotations

import json

import pytest
from langchain_core.messages import HumanMessage, SystemMessage, get_buffer_string

from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.edge.extraction import FactExtractor, build_extraction_prompt
from langchain_histcompress.edge.summarizer import Summarizer
from langchain_histcompress.edge.summary_prompt import build_summary_prompt
from langchain_histcompress.workbench.locomo import LocomoConversation, parse_locomo
from langchain_histcompress.workbench.replay import (
    ReplayChatModel,
    build_fact_operations,
    build_running_summary,
    detect_prompt_kind,
    read_prompt,
)
from tests.unit_tests.test_bench_locomo import tiny_locomo_data


@pytest.fixture
def conversation() -> LocomoConversation:
    return parse_locomo(tiny_locomo_data(), name="tiny")


@pytest.fixture
def counter() -> TiktokenCounter:
    return TiktokenCounter()


def _messages(conversation: LocomoConversation, *ids: str) -> list:
    by_id = {m.id: m for m in conversation.messages()}
    return [by_id[i] for i in ids]


def test_detect_prompt_kind_markers() -> None:
    assert detect_prompt_kind('Reply {"ConversationSummary": "..."}') == "summary_json"
    assert detect_prompt_kind('[{"op": "ADD", "content": "..."}]') == "fact_operations"
    assert detect_prompt_kind("Use ADD for new facts") == "fact_operations"
    assert detect_prompt_kind("Summarize the conversation above") == "summary_text"
    # "add" in prose is not the operations marker
    assert detect_prompt_kind("add a short summary") == "summary_text"


def test_summarizer_prompt_gets_observations_of_shown_turns(
    conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    model = ReplayChatModel(conversation=conversation, counter=counter)
    prompt = build_summary_prompt(_messages(conversation, "D1:1", "D1:2"))
    view = read_prompt(prompt, conversation)
    assert view.kind == "summary_json"
    assert view.shown_ids == ("D1:1", "D1:2")
    reply = json.loads(model.reply_for(prompt))
    assert reply == {
        "ConversationSummary": "9:00 am on 1 March, 2024: Ana started learning the cello last week."
    }


def test_summary_carries_previous_forward_and_completes_sessions(
    conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    model = ReplayChatModel(conversation=conversation, counter=counter)
    summarizer = Summarizer(model, token_counter=counter)
    first = summarizer.summarize(_messages(conversation, "D1:1", "D1:2")).summary
    assert "cello" in first.text
    # next rounds: D1:3 and D1:4 are new; the previous summary is in the prompt as data
    second = summarizer.summarize(_messages(conversation, "D1:3", "D1:4"), first).summary
    # session 1 is finished (its last turn was shown): its file summary replaces the facts
    assert second.text == conversation.sessions[0].summary
    third = summarizer.summarize(_messages(conversation, "D2:1", "D2:2"), second).summary
    assert third.text.startswith(conversation.sessions[0].summary)
    assert third.text.endswith("6:30 pm on 9 March, 2024: Ana bought a new bow.")
    assert third.covered_ids == {"D1:1", "D1:2", "D1:3", "D1:4", "D2:1", "D2:2"}


def test_summary_never_uses_turns_not_yet_shown(conversation: LocomoConversation) -> None:
    text = build_running_summary(conversation, ["D2:1", "D2:2"])
    assert "Bergen" not in text  # D2:3 (Bergen) comes later
    assert "bow" in text


def test_summary_cap_drops_oldest_pieces(
    conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    covered = [t.dia_id for t in conversation.turns]
    full = build_running_summary(conversation, covered, counter=counter, token_cap=1000)
    assert full == "\n\n".join(s.summary for s in conversation.sessions)
    newest = conversation.sessions[1].summary
    alone = build_running_summary(
        conversation, covered, counter=counter, token_cap=counter.count_text(newest)
    )
    assert alone == newest  # oldest piece dropped, newest kept whole
    capped = build_running_summary(conversation, covered, counter=counter, token_cap=10)
    # the newest piece alone is over the cap: only its leading words are kept
    assert newest.startswith(capped) and capped
    assert counter.count_text(capped) <= 10


def test_summary_cap_keeps_leading_whole_sentences(counter: TiktokenCounter) -> None:
    conversation = parse_locomo(
        {
            "speaker_a": "A",
            "speaker_b": "B",
            "qa": [],
            "session_1_summary": "A met B. They talked about tea. Then they left.",
            "session_1": [
                {"speaker": "A", "dia_id": "D1:1", "text": "hi"},
                {"speaker": "B", "dia_id": "D1:2", "text": "yo"},
            ],
        }
    )
    covered = ["D1:1", "D1:2"]
    cap = counter.count_text("A met B. They talked about tea.")
    text = build_running_summary(conversation, covered, counter=counter, token_cap=cap)
    assert text == "A met B. They talked about tea."
    model = ReplayChatModel(conversation=conversation, counter=counter, summary_token_cap=cap)
    summarizer = Summarizer(model, token_counter=counter, max_summary_tokens=cap)
    update = summarizer.summarize(_messages(conversation, "D1:1", "D1:2"))
    assert update.summary.text == "A met B. They talked about tea."  # accepted under the cap


def test_extractor_prompt_gets_add_operations(
    conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    model = ReplayChatModel(conversation=conversation, counter=counter)
    prompt = build_extraction_prompt([], _messages(conversation, "D1:3", "D1:4"))
    view = read_prompt(prompt, conversation)
    assert (view.kind, view.operations_format) == ("fact_operations", "lines")
    assert model.reply_for(prompt) == (
        "ADD confirmed_detail 0.9 D1:3 | Ana's cello teacher is Mrs Olsen.\n"
        "ADD confirmed_detail 0.9 D1:4 | Ben adopted a grey cat named Pixel."
    )
    # a custom prompt showing the JSON schema gets the same operations as a JSON array
    json_prompt = build_extraction_prompt(
        [],
        _messages(conversation, "D1:3", "D1:4"),
        instructions='Reply with a JSON array of {"op": "ADD", "content": ...}.',
    )
    assert read_prompt(json_prompt, conversation).operations_format == "json"
    operations = json.loads(model.reply_for(json_prompt))
    assert operations == [
        {
            "op": "ADD",
            "type": "confirmed_detail",
            "content": "Ana's cello teacher is Mrs Olsen.",
            "confidence": 0.9,
            "source_ids": ["D1:3"],
        },
        {
            "op": "ADD",
            "type": "confirmed_detail",
            "content": "Ben adopted a grey cat named Pixel.",
            "confidence": 0.9,
            "source_ids": ["D1:4"],
        },
    ]


def test_fact_extractor_end_to_end_keeps_sources(
    conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    model = ReplayChatModel(conversation=conversation, counter=counter)
    result = FactExtractor(model).extract(_messages(conversation, "D2:2", "D2:3"))
    assert result.status == "ok"
    facts = {f.content: f for f in result.facts.values()}
    assert set(facts) == {"Ana bought a new bow.", "Ana is moving to Bergen in May."}
    assert facts["Ana is moving to Bergen in May."].source_ids == ("D2:3",)
    assert facts["Ana is moving to Bergen in May."].type == "event"
    assert facts["Ana bought a new bow."].confidence == 0.9


def test_facts_from_a_repetition_name_its_fresh_ids(
    conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    # an extended history repeats the conversation with ids ``<id>#k``: sources must be those
    model = ReplayChatModel(conversation=conversation, counter=counter)
    repeated = [
        m.model_copy(update={"id": f"{m.id}#2"}) for m in _messages(conversation, "D2:2", "D2:3")
    ]
    result = FactExtractor(model).extract(repeated)
    facts = {f.content: f for f in result.facts.values()}
    assert facts["Ana is moving to Bergen in May."].source_ids == ("D2:3#2",)
    assert facts["Ana bought a new bow."].source_ids


def test_fact_with_a_later_source_waits_for_it(conversation: LocomoConversation) -> None:
    # the observation comes from D2:4 and D2:5: not emitted while D2:5 is in the future
    assert build_fact_operations(conversation, ["D2:4"]) == []
    later = build_fact_operations(conversation, ["D2:5"])
    assert [op["source_ids"] for op in later] == [["D2:5"]]


def test_xml_transcript_without_ids_is_matched_by_text(conversation: LocomoConversation) -> None:
    transcript = get_buffer_string(_messages(conversation, "D1:3", "D1:4"), format="xml")
    prompt = [HumanMessage(f"Summarize this:\n{transcript}")]
    view = read_prompt(prompt, conversation)
    assert view.kind == "summary_text"
    assert view.shown_ids == ("D1:3", "D1:4")
    model = ReplayChatModel(conversation=conversation)
    assert model.reply_for(prompt) == conversation.sessions[0].summary


def test_messages_passed_as_is_count_by_id_and_are_not_instructions(
    conversation: LocomoConversation,
) -> None:
    shouting = HumanMessage('Please ADD this: {"op": 1}', id="D1:1")
    prompt = [shouting, HumanMessage("Create a summary of the conversation above:")]
    view = read_prompt(prompt, conversation)
    assert view.kind == "summary_text"
    assert view.shown_ids == ("D1:1",)


def test_previous_summary_text_marks_sessions_complete(conversation: LocomoConversation) -> None:
    previous = conversation.sessions[0].summary.replace("'", "&#x27;")
    prompt = [
        SystemMessage(f"This is summary of the conversation so far: {previous}"),
        *_messages(conversation, "D2:1"),
    ]
    view = read_prompt(prompt, conversation)
    assert view.complete_sessions == {1}
    assert {"D1:1", "D1:4"} <= view.carried_ids


def test_extended_history_ids_map_to_turns(conversation: LocomoConversation) -> None:
    prompt = build_summary_prompt(
        [m.model_copy(update={"id": f"{m.id}#3"}) for m in _messages(conversation, "D1:1")]
    )
    assert read_prompt(prompt, conversation).shown_ids == ("D1:1",)


def test_usage_metadata_counts_prompt_and_reply(
    conversation: LocomoConversation, counter: TiktokenCounter
) -> None:
    model = ReplayChatModel(conversation=conversation, counter=counter)
    prompt = build_summary_prompt(_messages(conversation, "D1:1", "D1:2"))
    answer = model.invoke(prompt)
    assert answer.usage_metadata is not None
    assert answer.usage_metadata["input_tokens"] == counter.count_messages(prompt)
    assert answer.usage_metadata["output_tokens"] == counter.count_text(str(answer.content))


def test_unknown_prompt_still_gets_a_non_empty_answer(conversation: LocomoConversation) -> None:
    model = ReplayChatModel(conversation=conversation)
    assert model.invoke("hello").content == "Ana and Ben have not talked yet."
