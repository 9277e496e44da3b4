from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.workbench.locomo import find_locomo_files, load_locomo, parse_locomo


def tiny_locomo_data() -> dict[str, Any]:
    """A small invented conversation in the LoCoMo format (no text from the real data)."""
    return {
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_1_date_time": "9:00 am on 1 March, 2024",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "Hi Ben, I started the cello last week."},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Great! Who is your teacher?"},
            {"speaker": "Ana", "dia_id": "D1:3", "text": "Mrs Olsen, near the harbour."},
            {
                "speaker": "Ben",
                "dia_id": "D1:4",
                "text": "I adopted a cat named Pixel.",
                "img_url": ["https://example.invalid/cat.jpg"],
                "blip_caption": "a photo of a grey cat on a sofa",
                "query": "grey cat",
            },
        ],
        "session_2_date_time": "6:30 pm on 9 March, 2024",
        "session_2": [
            {"speaker": "Ben", "dia_id": "D2:1", "text": "Hey Ana, how was the concert?"},
            {"speaker": "Ana", "dia_id": "D2:2", "text": "Loud! I bought a new bow."},
            {"speaker": "Ana", "dia_id": "D2:3", "text": "Also, I move to Bergen in May."},
            {"speaker": "Ben", "dia_id": "D2:4", "text": "Bergen is rainy but lovely."},
            {"speaker": "Ben", "dia_id": "D2:5", "text": "Pixel says hi."},
        ],
        "session_3_date_time": "a date without a session",
        "events_session_1": {"Ana": ["Ana starts the cello."], "Ben": [], "date": "1 March"},
        "session_1_observation": {
            "Ana": [
                ["Ana started learning the cello last week.", "D1:1"],
                ["Ana's cello teacher is Mrs Olsen.", "D1:3"],
            ],
            "Ben": [["Ben adopted a grey cat named Pixel.", "D1:4"]],
        },
        "session_2_observation": {
            "Ana": [
                ["Ana bought a new bow.", "D2:2"],
                ["Ana is moving to Bergen in May.", ["D2:3"]],
            ],
            "Ben": [["Ben finds Bergen rainy but lovely and Pixel greets Ana.", "D2:4; D2:5"]],
        },
        "session_1_summary": "Ana told Ben about her cello lessons with Mrs Olsen; "
        "Ben adopted a cat called Pixel.",
        "session_2_summary": "Ana bought a bow and will move to Bergen in May; "
        "Ben sent greetings from Pixel.",
        "qa": [
            {
                "question": "Who teaches Ana?",
                "answer": "Mrs Olsen",
                "evidence": ["D1:3"],
                "category": 4,
            },
            {
                "question": "What did Ana start before moving?",
                "answer": "cello",
                "evidence": ["D2:3; D1:1"],
                "category": 1,
            },
            {
                "question": "What colour is the cat?",
                "answer": "grey",
                "evidence": ["D1:4", "D9:9"],
                "category": 2,
            },
            {
                "question": "What did Ben sell?",
                "evidence": ["D1:2"],
                "category": 5,
                "adversarial_answer": "a bike",
            },
            {"question": "Is Ana musical?", "answer": "yes", "evidence": [], "category": 3},
        ],
    }


def write_tiny(path: Path, data: dict[str, Any] | None = None) -> Path:
    path.write_text(json.dumps(data if data is not None else tiny_locomo_data()), "utf-8")
    return path


def test_turns_become_messages_with_ids_and_captions() -> None:
    conversation = parse_locomo(tiny_locomo_data(), source="tiny.json", name="tiny")
    messages = conversation.messages()
    assert [m.id for m in messages] == [
        "D1:1",
        "D1:2",
        "D1:3",
        "D1:4",
        "D2:1",
        "D2:2",
        "D2:3",
        "D2:4",
        "D2:5",
    ]
    assert [type(m) for m in messages[:2]] == [HumanMessage, AIMessage]
    assert messages[3].content == (
        "I adopted a cat named Pixel. [shared a photo: a photo of a grey cat on a sofa]"
    )
    assert [s.number for s in conversation.sessions] == [1, 2]
    assert conversation.sessions[0].date_time == "9:00 am on 1 March, 2024"
    assert conversation.name == "tiny"
    assert conversation.system_message().type == "system"


def test_rounds_follow_speaker_a_turns() -> None:
    conversation = parse_locomo(tiny_locomo_data())
    rounds = [[m.id for m in r.messages] for r in conversation.rounds()]
    # a session opening with speaker_b joins the previous round; two speaker_a turns in a
    # row open two rounds
    assert rounds == [
        ["D1:1", "D1:2"],
        ["D1:3", "D1:4", "D2:1"],
        ["D2:2"],
        ["D2:3", "D2:4", "D2:5"],
    ]


def test_observations_and_evidence_ids_are_split() -> None:
    conversation = parse_locomo(tiny_locomo_data())
    sources = {o.text: o.source_ids for o in conversation.observations}
    assert sources["Ana is moving to Bergen in May."] == ("D2:3",)
    assert sources["Ben finds Bergen rainy but lovely and Pixel greets Ana."] == ("D2:4", "D2:5")
    qa = conversation.qa
    assert qa[1].evidence == ("D2:3", "D1:1")
    assert qa[2].evidence == ("D1:4",)
    assert qa[2].unknown_evidence == ("D9:9",)
    assert qa[3].answer is None


def test_recall_questions_leave_out_adversarial_and_evidence_free() -> None:
    conversation = parse_locomo(tiny_locomo_data())
    assert [q.question for q in conversation.recall_questions()] == [
        "Who teaches Ana?",
        "What did Ana start before moving?",
        "What colour is the cat?",
    ]


def _broken(path: list[Any], value: Any = None, *, delete: bool = False) -> dict[str, Any]:
    data = copy.deepcopy(tiny_locomo_data())
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (_broken(["speaker_a"], delete=True), "bad.json: speaker_a: missing key"),
        (
            _broken(["session_1", 0, "dia_id"], delete=True),
            "bad.json: session_1[0].dia_id: missing key",
        ),
        (_broken(["session_1", 1, "text"], 42), "session_1[1].text: expected a string, got int"),
        (_broken(["session_1", 0, "speaker"], "Zoe"), "session_1[0].speaker: 'Zoe' is neither"),
        (_broken(["session_2", 0, "dia_id"], "D1:1"), "session_2[0].dia_id: duplicate turn id"),
        (_broken(["session_2"], {"not": "a list"}), "session_2: expected a list of turns"),
        (_broken(["qa"], delete=True), "bad.json: qa: missing key"),
        (_broken(["qa"], {}), "qa: expected a list"),
        (_broken(["qa", 0, "category"], "four"), "qa[0].category: expected an integer"),
        (_broken(["qa", 0, "evidence"], "D1:3"), "qa[0].evidence: expected a list of turn ids"),
        (_broken(["session_1_observation", "Ana", 0], "text only"), "session_1_observation.Ana[0]"),
        (_broken(["session_1_summary"], ["x"]), "session_1_summary: expected a string"),
        (_broken(["session_1", 3, "blip_caption"], 7), "session_1[3].blip_caption"),
    ],
)
def test_format_errors_name_the_file_and_key(data: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_locomo(data, source="bad.json")
    assert expected in str(info.value)


def test_top_level_and_session_errors() -> None:
    with pytest.raises(ConfigurationError, match=r"x\.json: top level: expected a JSON object"):
        parse_locomo([1, 2], source="x.json")
    data = {k: v for k, v in tiny_locomo_data().items() if not k.startswith("session_")}
    with pytest.raises(ConfigurationError, match="no session with turns"):
        parse_locomo(data, source="x.json")


def test_load_locomo_reports_missing_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no such file"):
        load_locomo(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"speaker_a": "A",', "utf-8")
    with pytest.raises(ConfigurationError, match=r"bad\.json: not valid JSON: .* line 1"):
        load_locomo(bad)
    with pytest.raises(ConfigurationError, match="is a directory"):
        load_locomo(tmp_path)
    good = load_locomo(write_tiny(tmp_path / "77.json"))
    assert good.name == "77"
    assert good.source.endswith("77.json")


def test_find_locomo_files_expands_folders(tmp_path: Path) -> None:
    write_tiny(tmp_path / "b.json")
    write_tiny(tmp_path / "a.json")
    (tmp_path / "notes.txt").write_text("x", "utf-8")
    assert [p.name for p in find_locomo_files([tmp_path])] == ["a.json", "b.json"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigurationError, match=r"holds no \.json file"):
        find_locomo_files([empty])
