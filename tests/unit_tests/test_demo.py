from __future__ import annotations

import copy
import dataclasses
import io
import json
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.core.pricing import (
    PRICING_MODELS,
    PromptRequest,
    encode_request,
    price_requests,
)
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.edge.extraction import build_extraction_prompt
from langchain_histcompress.edge.summary_prompt import build_summary_prompt
from langchain_histcompress.workbench import demo
from langchain_histcompress.workbench.cli import main
from langchain_histcompress.workbench.demo import (
    DemoReport,
    ScriptedChatModel,
    UsageMeter,
    check_script,
    load_script,
    replay_conversation,
    run_demo,
)
from langchain_histcompress.workbench.demo_report import _problems
from tests import fakes

SAVINGS = re.compile(r"^savings: (-?\d+\.\d)% \(([\d,]+) vs ([\d,]+) billed tokens, (\d+) turns\)$")
RESUME = re.compile(
    r"^resumed from checkpoint: (?:summary v(\d+)|no summary), (\d+) facts, (\d+) extra "
    r"summarizer calls$"
)


def raw_script() -> dict[str, Any]:
    text = (
        resources.files("langchain_histcompress.workbench")
        .joinpath("demo_data/conversation.json")
        .read_text("utf-8")
    )
    data: dict[str, Any] = json.loads(text)
    return data


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_demo(argv, writer=out, errors=err)
    return code, out.getvalue(), err.getvalue()


def line_matching(pattern: re.Pattern[str], text: str) -> re.Match[str]:
    found = [m for m in (pattern.match(line) for line in text.splitlines()) if m]
    assert len(found) == 1, text[-2000:]
    return found[0]


@pytest.fixture(scope="module")
def full_demo() -> tuple[tuple[int, str, str], DemoReport]:
    """One run of the whole demo: its exit code and output, and the report it printed."""
    reports: list[DemoReport] = []

    def keep(*args: Any, **kwargs: Any) -> DemoReport:
        report = replay_conversation(*args, **kwargs)
        reports.append(report)
        return report

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(demo, "replay_conversation", keep)
        result = run([])
    assert len(reports) == 1, result[2]
    return result, reports[0]


@pytest.fixture(scope="module")
def full_run(full_demo: tuple[tuple[int, str, str], DemoReport]) -> tuple[int, str, str]:
    return full_demo[0]


@pytest.fixture(scope="module")
def full_report(full_demo: tuple[tuple[int, str, str], DemoReport]) -> DemoReport:
    return full_demo[1]


# --------------------------------------------------------------------------- the data file


def test_packaged_script_is_valid_and_rich() -> None:
    data = raw_script()
    assert check_script(data) == []
    script = load_script()
    assert len(script.turns) >= 60
    assert len(script.sessions) >= 5
    follow_ups = [t for t in script.turns if t.standalone_question]
    assert len(follow_ups) >= 5
    assert any("second city" in t.user_text for t in follow_ups)
    ops = [op for batch in data["fact_batches"] for op in batch["operations"]]
    assert sum(1 for op in ops if op["op"] == "UPDATE" and op["key"] == "dates") >= 2
    assert any(op["op"] == "DELETE" for op in ops)
    turns = [t for s in data["sessions"] for t in s["turns"]]
    variables = {v["name"] for t in turns for v in t.get("variables", ())}
    assert {"df", "monthly_totals", "trip_log"} <= variables
    assert set(data["summary_layout"]) == {n for t in turns for n in t.get("summary_sections", {})}


def test_every_scripted_id_exists() -> None:
    data = raw_script()
    turns = [t for s in data["sessions"] for t in s["turns"]]
    ids = [t[role]["id"] for t in turns for role in ("user", "assistant")]
    assert len(ids) == len(set(ids))
    known = set(ids)
    for batch in data["fact_batches"]:
        assert batch["through"] in known
        for op in batch["operations"]:
            assert set(op.get("source_ids", [])) <= known, op


def test_script_times_increase() -> None:
    script = load_script()
    moments = [m for t in script.turns for m in (t.user_at, t.reply_at)]
    assert moments == sorted(moments)
    assert len(set(moments)) == len(moments)


def corrupt(mutate: Any) -> list[str]:
    data = copy.deepcopy(raw_script())
    mutate(data)
    return check_script(data)


def test_check_script_reports_each_kind_of_problem() -> None:
    def first_batch_op(data: dict[str, Any]) -> dict[str, Any]:
        op: dict[str, Any] = data["fact_batches"][0]["operations"][0]
        return op

    assert corrupt(lambda d: d.update(format="other"))
    assert any(
        "repeats" in p
        for p in corrupt(
            lambda d: d["sessions"][0]["turns"][1]["user"].update(
                id=d["sessions"][0]["turns"][0]["user"]["id"]
            )
        )
    )
    assert any(
        "not a message of its batch" in p
        for p in corrupt(lambda d: first_batch_op(d).update(source_ids=["u63"]))
    )
    assert any(
        "not a current fact" in p
        for p in corrupt(
            lambda d: d["fact_batches"][1]["operations"].append(
                {"op": "DELETE", "key": "no-such-fact"}
            )
        )
    )
    assert any(
        "same batch" in p
        for p in corrupt(
            lambda d: d["fact_batches"][0]["operations"].append(
                {"op": "UPDATE", "key": "trip", "content": "x", "source_ids": ["u01"]}
            )
        )
    )
    assert any(
        "not in summary_layout" in p
        for p in corrupt(
            lambda d: d["sessions"][0]["turns"][1]["summary_sections"].update(weather="Sunny.")
        )
    )
    assert any(
        "would be empty" in p
        for p in corrupt(lambda d: d["sessions"][0]["turns"][0].pop("summary_sections"))
    )
    assert any(
        "which is not set" in p
        for p in corrupt(
            lambda d: d["sessions"][0]["turns"][1]["summary_sections"].update(porto=None)
        )
    )
    assert any(
        "variables must be objects" in p
        for p in corrupt(lambda d: d["sessions"][0]["turns"][0].update(variables=[{"name": "x"}]))
    )
    assert any("fact_batches must cover" in p for p in corrupt(lambda d: d["fact_batches"].pop(0)))
    assert any(
        "not after" in p
        for p in corrupt(
            lambda d: d["sessions"][1]["turns"][0]["user"].update(at="2024-01-01T00:00:00+00:00")
        )
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_foreign_source_id_is_caught(data: st.DataObject) -> None:
    raw = copy.deepcopy(raw_script())
    batches = [b for b in raw["fact_batches"] if any("source_ids" in op for op in b["operations"])]
    batch = data.draw(st.sampled_from(batches))
    op = data.draw(st.sampled_from([op for op in batch["operations"] if "source_ids" in op]))
    foreign = data.draw(st.sampled_from(["a64", "u64", "zz-9", "u00"]))
    op["source_ids"] = [*op["source_ids"], foreign]
    assert check_script(raw)


def test_load_script_rejects_bad_files(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{nope", "utf-8")
    with pytest.raises(ConfigurationError, match="not valid JSON"):
        load_script(broken)
    invalid = tmp_path / "invalid.json"
    invalid.write_text(json.dumps({"format": "x"}), "utf-8")
    with pytest.raises(ConfigurationError, match="not a valid demo script"):
        load_script(invalid)
    with pytest.raises(ConfigurationError, match="cannot read"):
        load_script(tmp_path / "missing.json")


# --------------------------------------------------------------------------- scripted model


def test_scripted_model_answers_each_internal_prompt() -> None:
    script = load_script()
    model = ScriptedChatModel(script=script)
    turns = script.turns
    batch: list[BaseMessage] = []
    for turn in turns[:4]:
        batch += [
            HumanMessage(turn.user_text, id=turn.user_id),
            AIMessage(turn.reply_text, id=turn.reply_id),
        ]

    summary_prompt = build_summary_prompt(batch)
    summary = json.loads(model.invoke(summary_prompt).text)
    assert summary == dict(script.summaries[turns[3].reply_id])

    extraction = json.loads(model.invoke(build_extraction_prompt([], batch)).text)
    assert [op["op"] for op in extraction] == ["ADD"] * 8
    assert all("key" not in op and "id" not in op for op in extraction)

    follow_up = next(t for t in turns if t.standalone_question)
    question = HumanMessage(
        f"<conversation>\n</conversation>\n\n<question>{follow_up.user_text}</question>"
    )
    assert model.invoke([question]).text == follow_up.standalone_question


def rounds_through(script: Any, count: int) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for turn in script.turns[:count]:
        messages += [
            HumanMessage(turn.user_text, id=turn.user_id),
            AIMessage(turn.reply_text, id=turn.reply_id),
        ]
    return messages


def test_scripted_summarizer_answers_any_fold_point() -> None:
    script = load_script()
    model = ScriptedChatModel(script=script)
    versions = []
    for count in range(1, len(script.turns) + 1):
        folded = rounds_through(script, count)
        answer = json.loads(model.invoke(build_summary_prompt(folded)).text)
        assert answer == dict(script.summaries[folded[-1].id or ""])
        assert answer["ConversationSummary"].strip()
        versions.append(answer["ConversationSummary"])
        # a later fold reads the previous summary and only the new rounds: same answer
        if count > 3:
            newer = folded[-4:]
            previous = RunningSummary(content="earlier", text="earlier")
            again = json.loads(model.invoke(build_summary_prompt(newer, previous)).text)
            assert again == answer
    assert len(set(versions)) > len(versions) // 2  # most rounds change the summary
    # a fold ending on a user message gets the summary through the round before it
    nxt = script.turns[10]
    assert script.summaries[nxt.user_id] == script.summaries[script.turns[9].reply_id]
    assert script.turns[0].user_id not in script.summaries


def _numbers(text: str) -> set[str]:
    return {re.sub(r"(?<=\d),(?=\d{3})", "", n) for n in re.findall(r"\d+(?:[.,]\d+)*", text)}


def test_scripted_summaries_only_state_what_was_said_so_far() -> None:
    script = load_script()
    said = ""
    for turn in script.turns:
        said += f"{turn.user_text}\n{turn.reply_text}\n"
        output = script.summaries[turn.reply_id]
        text = (
            output["ConversationSummary"]
            + "\n"
            + "\n".join(v["description"] for v in output["Variables"])
        )
        assert _numbers(text) <= _numbers(said), (turn.number, _numbers(text) - _numbers(said))
    late = script.summaries[script.turns[-1].reply_id]["ConversationSummary"]
    early = script.summaries[script.turns[10].reply_id]["ConversationSummary"]
    assert "12–26 May" in late and "12–26 May" not in early and "10–24 May" in early


def test_scripted_update_targets_the_fact_id_shown_in_the_prompt() -> None:
    script = load_script()
    model = ScriptedChatModel(script=script)
    batch_end = next(
        through
        for through, ops in script.fact_batches.items()
        if any(op["op"] == "UPDATE" and op["key"] == "dates" for op in ops)
    )
    end = next(i for i, t in enumerate(script.turns) if t.reply_id == batch_end)
    messages: list[BaseMessage] = []
    for turn in script.turns[end - 3 : end + 1]:
        messages += [
            HumanMessage(turn.user_text, id=turn.user_id),
            AIMessage(turn.reply_text, id=turn.reply_id),
        ]
    targets = {op["key"] for op in script.fact_batches[batch_end] if op["op"] != "ADD"}
    shown = [Fact(id=f"f-{key}", content=script.key_contents[key][0]) for key in sorted(targets)]
    ops = json.loads(model.invoke(build_extraction_prompt(shown, messages)).text)
    assert {op["id"] for op in ops if op["op"] != "ADD"} == {f"f-{key}" for key in targets}
    update = next(op for op in ops if op["op"] == "UPDATE" and op["id"] == "f-dates")
    assert "10–24 May" in update["content"]


def test_scripted_model_fails_loudly_on_unknown_prompts() -> None:
    model = ScriptedChatModel(script=load_script())
    with pytest.raises(ConfigurationError, match="no answer"):
        model.invoke([HumanMessage("hello there")])
    with pytest.raises(ConfigurationError, match="no summary"):
        model.invoke(build_summary_prompt([HumanMessage("x", id="u01")]))
    missing = build_extraction_prompt([], [HumanMessage("x", id="u03")])
    with pytest.raises(ConfigurationError, match="no fact operations"):
        model.invoke(missing)


def test_scripted_usage_metadata_matches_the_counter() -> None:
    counter = TiktokenCounter()
    model = ScriptedChatModel(script=load_script(), counter=counter)
    prompt = [SystemMessage("Be brief."), HumanMessage(load_script().turns[0].user_text, id="u01")]
    reply = model.invoke(prompt)
    assert isinstance(reply, AIMessage) and reply.usage_metadata is not None
    assert reply.usage_metadata["input_tokens"] == counter.count_messages(prompt)
    assert reply.usage_metadata["output_tokens"] == counter.count_text(reply.text)


# --------------------------------------------------------------------------- the full demo


def test_full_demo_exits_0_and_prints_the_savings(full_run: tuple[int, str, str]) -> None:
    code, out, err = full_run
    assert code == 0, err
    savings = line_matching(SAVINGS, out)
    percent, billed, full, turns = savings.groups()
    assert int(turns) == len(load_script().turns)
    assert 0 < float(percent) < 100
    assert int(billed.replace(",", "")) < int(full.replace(",", ""))
    assert (
        abs(float(percent) - 100 * (1 - int(billed.replace(",", "")) / int(full.replace(",", ""))))
        < 0.06
    )


def test_full_demo_compresses_updates_facts_and_resumes(full_run: tuple[int, str, str]) -> None:
    _, out, _ = full_run
    resume = line_matching(RESUME, out)
    version, facts, extra = resume.groups()
    assert version is not None and int(version) >= 1
    assert int(facts) > 10
    assert extra == "0"
    summary_line = next(line for line in out.splitlines() if line.startswith("running summary v"))
    assert summary_line.startswith(f"running summary v{version} ")
    assert re.search(r"facts \(\d+; [1-9]\d* updates and [1-9]\d* deletions", out)
    assert "was: Trip dates: 3–17 May 2025. → Trip dates: 10–24 May 2025." in out
    turn_lines = [line for line in out.splitlines() if line.startswith("turn ")]
    assert len(turn_lines) == len(load_script().turns)
    assert sum("summarized" in line for line in turn_lines) == int(version)
    assert sum("rephrased" in line for line in turn_lines) >= 5
    assert "Variables:" in out and "- df (DataFrame)" in out


def test_full_demo_runs_the_defaults_and_says_why_it_folds(
    full_run: tuple[int, str, str], full_report: DemoReport
) -> None:
    _, out, _ = full_run
    settings = full_report.folding
    assert settings is not None
    assert settings.pricing == "openai-50, the default pricing"
    assert settings.keep_rounds == 3 and settings.window == 128_000
    assert settings.budget_tokens == 108_800 and "ScriptedChatModel has no profile" in (
        settings.budget_source
    )
    header = " ".join(out.split("── session 1")[0].split())
    assert "RoundCompressor defaults" in header and "openai-50, the default pricing" in header
    assert "108,800 tokens" in header
    # the default folds by cost, when the cache has gone cold at the start of a session
    script = load_script()
    folds = [t for t in full_report.turns if t.folded]
    assert folds and all(t.planned_folds == t.billed["summarize"][0] for t in folds)
    for turn in folds:
        scripted = script.turns[turn.number - 1]
        before = script.turns[turn.number - 2]
        assert scripted.session != before.session  # a session start
        assert "the cache has gone cold" in turn.fold_reason
        assert "cost (openai-50, the default pricing)" in turn.fold_reason
    assert all(not t.planned_folds for t in full_report.turns if not t.folded)
    assert all(t.fold_reason for t in full_report.turns)
    # each fold's reason under its turn, the others grouped once, budget and pricing said once
    lines = out.splitlines()
    first = lines.index(next(line for line in lines if line.startswith(f"turn {folds[0].number} ")))
    assert "fold " in lines[first + 1] and "cost: the cache has gone cold" in lines[first + 1]
    report = out.split("resumed from checkpoint")[1]
    folding = next(line for line in report.splitlines() if line.startswith("folding ("))
    assert folding.startswith(
        "folding (cost under openai-50, the default pricing; budget 108,800 tokens): "
        f"{len(folds)} fold"
    )
    no_fold = [line.strip() for line in report.splitlines() if line.startswith("  no fold, ")]
    assert no_fold and any(line.endswith(": cost: no fold pays yet") for line in no_fold)
    assert sum("(default window (128,000 tokens" in line for line in lines) == 0
    assert sum("the default pricing" in line for line in lines) == 2  # header and report


def test_report_accounting(full_report: DemoReport) -> None:
    report = full_report
    assert report.offline and len(report.turns) == len(load_script().turns)
    by_kind = report.billed_by_kind()
    assert set(by_kind) == {"answer", "summarize", "extract", "rephrase"}
    assert by_kind["answer"][0] == len(report.turns)
    assert by_kind["summarize"][0] == sum(t.planned_folds for t in report.turns)
    assert report.billed_tokens == sum(tokens for _, tokens in by_kind.values())
    assert report.savings == pytest.approx(1 - report.billed_tokens / report.full_history_tokens)
    assert report.summary is not None and report.summary.version >= 1
    assert report.updates_applied > 0
    dates = next(f for f in report.facts.values() if f.content.startswith("Trip dates"))
    assert dates.content.startswith("Trip dates: 12–26 May 2025")
    assert len(dates.supersedes) == 2
    assert all(t.extraction_status != "failed" for t in report.turns)
    assert all(t.rephrase_fallback is None for t in report.turns)
    assert all(t.fold_failed is None for t in report.turns)
    assert _problems(report) == []


def test_full_history_baseline_is_recomputed_independently(full_report: DemoReport) -> None:
    script = load_script()
    counter = TiktokenCounter()
    history: list[BaseMessage] = [SystemMessage(script.system_prompt)]
    expected = 0
    for turn in script.turns:
        question = HumanMessage(turn.user_text)
        expected += counter.count_messages([*history, question]) + counter.count_text(
            turn.reply_text
        )
        history += [question, AIMessage(turn.reply_text)]
    assert full_report.full_history_tokens == expected


def test_calls_are_priced_with_the_prompt_cache_of_the_pricing_folds_use(
    full_run: tuple[int, str, str], full_report: DemoReport
) -> None:
    priced = full_report.priced
    assert priced is not None and priced.pricing == "openai-50"
    assert set(priced.by_kind) == set(full_report.billed_by_kind())
    # the baseline, priced independently: the full history on every turn, one cold cache
    script = load_script()
    counter = TiktokenCounter()
    history: list[BaseMessage] = [SystemMessage(script.system_prompt)]
    requests = []
    for turn, record in zip(script.turns, full_report.turns, strict=True):
        history.append(HumanMessage(turn.user_text))
        prompt = encode_request(history, counter)
        requests.append(PromptRequest(prompt, record.reply_tokens, at=turn.user_at.timestamp()))
        history.append(AIMessage(turn.reply_text))
    full = price_requests(requests, PRICING_MODELS["openai-50"])
    assert priced.full_cost == pytest.approx(full.cost)
    assert priced.full_cached_share == pytest.approx(full.cached_share)
    # what the defaults decide pays under their pricing: answering and folding cost less
    assert priced.by_kind["answer"] + priced.by_kind["summarize"] < priced.full_cost
    out = " ".join(full_run[1].split())
    assert f"price: ${priced.cost:.4f} instead of ${priced.full_cost:.4f}" in out
    assert "as openai-50 bills them" in out


def test_turns_after_a_fold_send_far_less_than_the_full_history(full_report: DemoReport) -> None:
    first = next(t.number for t in full_report.turns if t.folded)
    after = [t for t in full_report.turns if t.number >= first]
    assert all(t.sent_tokens < 0.6 * t.full_tokens for t in after)
    before = [t for t in full_report.turns if t.number < first]
    assert all(t.sent_tokens == t.full_tokens for t in before)  # nothing folded, nothing cut


def test_resume_restores_the_stored_state(full_report: DemoReport) -> None:
    resume = full_report.resume
    assert resume is not None
    assert resume.matches_before
    assert resume.messages == 1 + 2 * (len(full_report.turns) - 1)
    assert resume.summarizer_calls == resume.expected_summarizer_calls
    assert resume.extra_summarizer_calls == 0
    assert full_report.turns[-1].resumed and not full_report.turns[-2].resumed


def test_a_failed_or_missing_fold_is_a_problem_of_an_offline_run(
    full_report: DemoReport,
) -> None:
    fold = next(t for t in full_report.turns if t.folded)
    failed = dataclasses.replace(fold, billed={"answer": (1, 10)}, fold_failed="SummarizationError")
    skipped = dataclasses.replace(fold, billed={"answer": (1, 10)})
    for record, expected in (
        (failed, f"turn {fold.number}: the planned fold failed (SummarizationError)"),
        (skipped, f"turn {fold.number}: 1 summarizer calls planned, 0 made"),
    ):
        turns = tuple(record if t.number == fold.number else t for t in full_report.turns)
        assert _problems(dataclasses.replace(full_report, turns=turns)) == [expected]
    out = io.StringIO()
    from langchain_histcompress.workbench.demo_report import _Printer, _turn_line

    _turn_line(_Printer(out, quiet=False), failed, full_report.folding)
    assert "fold FAILED (SummarizationError)" in out.getvalue()


def test_usage_meter_notes_failed_folds_per_turn() -> None:
    from uuid import uuid4

    meter = UsageMeter(TiktokenCounter())
    meter.turn = 7
    meter.on_custom_event(
        "histcompress_fold_failed", {"error": "SummarizationError"}, run_id=uuid4()
    )
    meter.on_custom_event("something_else", {"error": "x"}, run_id=uuid4())
    assert meter.fold_failures == {7: "SummarizationError"}


# --------------------------------------------------------------------------- options


def test_small_turns_and_quiet() -> None:
    code, out, err = run(["--turns", "8", "--quiet"])
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 2
    assert RESUME.match(lines[0]) and lines[0].startswith(
        "resumed from checkpoint: no summary, 8 facts"
    )
    assert SAVINGS.match(lines[1]) and lines[1].endswith("8 turns)")


def test_turn_count_is_validated() -> None:
    for bad in (["--turns", "1"], ["--turns", "999"]):
        code, _, err = run(bad)
        assert code == 2
        assert "turns must be an integer from 2 to 64" in err
    code, _, err = run(["--turns", "many"])
    assert code == 2 and "invalid int value" in err


def test_db_option_keeps_the_file_and_uses_a_fresh_thread(tmp_path: Path) -> None:
    db = tmp_path / "demo.sqlite"
    assert run(["--turns", "3", "--db", str(db)])[0] == 0
    assert db.is_file()
    code, out, _ = run(["--turns", "3", "--db", str(db)])
    assert code == 0
    assert "(thread histcompress-demo-2)" in out
    assert (
        "folding (cost under openai-50, the default pricing; budget 108,800 tokens): 0 folds" in out
    )
    assert "  no fold, turns 1-3: cost: nothing old enough to fold" in out


def test_db_in_a_missing_folder_exits_2(tmp_path: Path) -> None:
    code, _, err = run(["--turns", "3", "--db", str(tmp_path / "nope" / "demo.sqlite")])
    assert code == 2 and "does not exist" in err


def test_model_without_key_exits_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code, out, err = run(["--model", "openai:gpt-4o-mini"])
    assert code == 2
    assert "OPENAI_API_KEY" in err and err.startswith("histcompress demo: error:")
    assert out == ""


def test_malformed_or_unknown_model_exits_2() -> None:
    code, _, err = run(["--model", "gpt-4o-mini"])
    assert code == 2 and "provider:model" in err
    code, _, err = run(["--model", "no-such-provider:some-model"])
    assert code == 2 and "unknown model provider 'no-such-provider'" in err


def test_real_model_failure_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        demo,
        "_make_model",
        lambda spec: fakes.ScriptedChatModel(fail_with=RuntimeError("the provider is down")),
    )
    code, _, err = run(["--model", "fake:broken", "--turns", "3"])
    assert code == 1
    assert "the model call failed (RuntimeError: the provider is down)" in err


def test_offline_replay_that_drifts_from_the_script_exits_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = load_script()
    contents = {**script.key_contents, "dates": ("a content no prompt ever shows",)}
    drifted = dataclasses.replace(script, key_contents=contents)
    monkeypatch.setattr(demo, "load_script", lambda: drifted)
    code, out, err = run(["--turns", "14"])
    assert code == 1
    assert "did not go as scripted" in err and "turn 13: fact extraction failed" in err
    assert "extraction FAILED" in out


def test_a_given_model_answers_extracts_and_rephrases() -> None:
    script = load_script()
    out = io.StringIO()
    report = replay_conversation(
        script, model=ScriptedChatModel(script=script), turns=8, writer=out
    )
    assert not report.offline
    assert set(report.billed_by_kind()) == {"answer", "extract", "rephrase"}
    # eight turns of one evening: no fold pays yet, and the report says so
    assert report.summary is None
    assert all(not t.planned_folds and t.fold_reason for t in report.turns)
    assert report.folding is not None and report.folding.pricing.startswith("openai-50")


def test_ascii_terminal_gets_plain_bars() -> None:
    buffer = io.BytesIO()
    writer = io.TextIOWrapper(buffer, encoding="ascii", errors="strict")
    assert run_demo(["--turns", "3"], writer=writer, errors=io.StringIO()) == 0
    writer.flush()
    text = buffer.getvalue().decode("ascii")
    assert "############ 100%" in text


def test_cli_runs_the_demo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--turns", "3", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert SAVINGS.match(out.strip().splitlines()[-1])


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import socket

    def refuse(*args: Any, **kwargs: Any) -> None:
        msg = "network access in a unit test"
        raise AssertionError(msg)

    monkeypatch.setattr(socket.socket, "connect", refuse)
    yield
