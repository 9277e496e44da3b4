from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.edge.extraction import FactExtractor
from langchain_histcompress.workbench.agent import (
    TAU_BENCH_FILE,
    AgentReplayModel,
    load_tau_bench,
    run_agent_workload,
    tool_pairing_violations,
)
from langchain_histcompress.workbench.bench_config import BenchConfig
from langchain_histcompress.workbench.bench_result import BenchResult
from langchain_histcompress.workbench.cost_report import (
    agent_rows,
    agent_to_dict,
    format_agent_table,
)
from langchain_histcompress.workbench.costs import REPORTED_PRICINGS
from langchain_histcompress.workbench.report import result_to_dict
from langchain_histcompress.workbench.runner import run_benchmark
from langchain_histcompress.workbench.strategy import StrategyEnv
from tests.fakes import ScriptedChatModel
from tests.unit_tests.test_bench_locomo import write_tiny

TAU_BENCH = Path(__file__).resolve().parents[3] / "shared" / "data" / "tau-bench"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def _call(call_id: str, name: str = "get_user") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": '{"user_id": "u1"}'},
    }


def _trajectory(reuse: bool = False) -> list[dict[str, Any]]:
    second = "call_1" if reuse else "call_2"
    return [
        {"role": "system", "content": "# Policy\n" + "Be careful. " * 50},
        {"role": "user", "content": "I want to change my flight."},
        {"role": "assistant", "content": None, "tool_calls": [_call("call_1")]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_user", "content": "{}"},
        {"role": "assistant", "content": "Which flight?"},
        {"role": "user", "content": "The one on May 20th."},
        {"role": "assistant", "content": None, "tool_calls": [_call(second)]},
        {"role": "tool", "tool_call_id": second, "name": "get_user", "content": "{}"},
        {"role": "assistant", "content": "Done."},
    ]


def write_tau(folder: Path, count: int = 3) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = {
        "tools": [{"type": "function", "function": {"name": "get_user", "parameters": {}}}],
        "trajectories": [
            {"task_id": i, "trial": 0, "reward": 1.0, "traj": _trajectory(reuse=i == 0)}
            for i in range(count)
        ],
    }
    (folder / TAU_BENCH_FILE).write_text(json.dumps(data), encoding="utf-8")
    return folder


def test_trajectories_get_uuid_ids_and_the_tools_text(tmp_path: Path) -> None:
    trajectories, tools = load_tau_bench(write_tau(tmp_path), limit=2)
    assert [t.name for t in trajectories] == ["task0-0", "task1-0"]
    ids = [m.id for t in trajectories for m in t.messages]
    assert all(UUID.match(str(i)) for i in ids)
    assert len(set(ids)) == len(ids)
    assert json.loads(tools)[0]["function"]["name"] == "get_user"
    again, _ = load_tau_bench(tmp_path, limit=2)
    assert [m.id for m in again[0].messages] == [m.id for m in trajectories[0].messages]


def test_missing_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="cannot read tau-bench trajectories"):
        load_tau_bench(tmp_path)


def test_pairing_checker_follows_the_openai_rules() -> None:
    call = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c1"}])
    reply = ToolMessage("ok", tool_call_id="c1")
    assert tool_pairing_violations([HumanMessage("q"), call, reply, AIMessage("a")]) == []
    assert tool_pairing_violations([call]) == []  # in flight at the end
    assert tool_pairing_violations([call, HumanMessage("q")]) == [
        "messages[1]: calls left unanswered before this message"
    ]
    assert tool_pairing_violations([call, reply, reply]) == ["messages[2]: call answered twice"]
    reused = [call, reply, AIMessage("x"), call, reply]
    assert tool_pairing_violations(reused) == []


def test_agent_replay_model_answers_summaries_and_fact_extraction() -> None:
    model = AgentReplayModel(summary_token_cap=10)
    prompt = [
        SystemMessage('Answer as {"ConversationSummary": "..."}'),
        HumanMessage(
            '<message id="m1" role="user">Change my flight to Boston please now.</message>\n'
            '<message id="m2" role="assistant">Sure, which date?</message>'
        ),
    ]
    summary = json.loads(model.invoke(prompt).text)["ConversationSummary"]
    assert summary.startswith("Earlier: Change my")
    assert model.counter.count_text(summary) <= 10
    facts = model.reply_for([prompt[1], HumanMessage('Return [{"op": "ADD"}]')])
    assert [f["source_ids"] for f in json.loads(facts)] == [["m1"]]


def test_agent_replay_model_extracts_facts_beside_an_assistant_tool_call() -> None:
    # the real extraction prompt: the assistant's call is a "[calls ...]" line in its element
    model = AgentReplayModel()
    messages = [
        HumanMessage("Book the flight to Houston on May 27.", id="m1"),
        AIMessage(
            "Searching.",
            id="m2",
            tool_calls=[
                {"name": "search_direct_flight", "args": {"date": "2024-05-27"}, "id": "c9"}
            ],
        ),
        ToolMessage("[]", tool_call_id="c9", id="m3"),
    ]
    result = FactExtractor(model).extract(messages)
    assert result.report.status == "ok"
    assert [(f.content, list(f.source_ids)) for f in result.facts.values()] == [
        ("Book the flight to Houston on May 27.", ["m1"])
    ]


def _tiny_bench(tmp_path: Path, strategy: str, **config: Any) -> BenchResult:
    """The bench over one tiny LoCoMo file with ``strategy`` (and ``config``), quickly."""
    (tmp_path / "data").mkdir()
    write_tiny(tmp_path / "data" / "t1.json")
    settings = {"overhead_sizes": (10,), "overhead_turns": 1, "counting": False, **config}
    bench = BenchConfig(data=(tmp_path / "data",), strategies=(strategy,), **settings)
    return run_benchmark(bench, progress=io.StringIO())


def test_bench_replays_the_agent_workload_beside_locomo(tmp_path: Path) -> None:
    result = _tiny_bench(
        tmp_path, "truncation", keep_messages=2, agent_data=write_tau(tmp_path / "tau")
    )
    assert result.agent is not None
    assert result.agent.trajectories == ("task0-0", "task1-0", "task2-0")
    full = result.agent.cost("full", "openai-90")
    assert full is not None and full.savings == 0.0
    assert all(r.calls == 4 and not r.error for r in result.agent.runs)
    header, rows = agent_rows(result)
    assert header[:7] == [
        "strategy",
        *("failed", "internal", "gave up", "broken", "sys changed", "worse"),
    ]
    assert rows[0][:5] == ["full", "0/3", "0", "0", "0"]
    text = format_agent_table(result)
    assert "3 tau-bench trajectories" in text and "sys changed" in text and "openai-90" in text
    assert max(map(len, text.splitlines())) <= 100
    data = result_to_dict(result)["costs"]["agent_workload"]
    assert data["strategies"]["truncation"]["answering_calls"] == 12


def test_internal_calls_giving_up_on_the_agent_workload_fail_the_strategy(tmp_path: Path) -> None:
    result = _tiny_bench(tmp_path, "truncation")
    assert result.failed_strategies() == []
    counter = TiktokenCounter("gpt-4o-mini")
    # every extraction call fails with an error that is not retried
    unreachable = ScriptedChatModel(fail_with=RuntimeError("no route to the model"))
    rounds = _trajectory()[1:]
    tau = tmp_path / "tau"
    tau.mkdir()
    data = {
        "tools": [],
        "trajectories": [{"task_id": 0, "trial": 0, "traj": _trajectory() + rounds * 3}],
    }
    (tau / TAU_BENCH_FILE).write_text(json.dumps(data), encoding="utf-8")
    agent = run_agent_workload(
        tau,
        ["full", "facts"],
        counter=counter,
        make_env=lambda _replay: StrategyEnv(counter=counter, model=unreachable),
    )
    # the extractor gave up on every turn and the replay went on without facts
    assert all(not r.error for r in agent.runs)
    assert agent.gave_up("full") == 0
    assert agent.gave_up("facts") == len(unreachable.prompts) > 0
    assert agent.failed_strategies() == ["facts"]
    with_agent = replace(result, agent=agent)
    assert with_agent.failed_strategies() == ["facts"]
    header, rows = agent_rows(with_agent)
    assert rows[1][header.index("gave up")] == str(agent.gave_up("facts"))
    written = agent_to_dict(with_agent)
    assert written is not None
    assert written["strategies"]["facts"]["internal_calls_gave_up"] == agent.gave_up("facts")


def test_the_default_is_configured_per_pricing_and_never_costs_more(tmp_path: Path) -> None:
    result = _tiny_bench(tmp_path, "round_compression", agent_data=write_tau(tmp_path / "tau"))
    assert result.agent is not None
    for run in result.agent.runs_of("round_compression"):
        assert set(run.costs) == set(REPORTED_PRICINGS)
        # each bill comes from the replay configured for that pricing model
        assert all(c.total.pricing.name == name for name, c in run.costs.items())
        assert run.internal_calls == 0  # four short requests never repay a summarizer call
    for name in REPORTED_PRICINGS:
        assert result.agent.costlier_than_baseline("round_compression", name) == 0


def test_bench_notes_a_missing_agent_folder(tmp_path: Path) -> None:
    write_tiny(tmp_path / "t1.json")
    config = BenchConfig(
        data=(tmp_path / "t1.json",),
        strategies=("truncation",),
        overhead_sizes=(10,),
        overhead_turns=1,
        counting=False,
        agent_data=tmp_path / "absent",
    )
    result = run_benchmark(config, progress=io.StringIO())
    assert result.agent is None
    assert any("agent workload skipped" in n for n in result.notes)


@pytest.mark.skipif(not TAU_BENCH.is_dir(), reason=f"tau-bench data not found at {TAU_BENCH}")
def test_real_trajectories_load_with_their_tools() -> None:
    trajectories, tools = load_tau_bench(TAU_BENCH, limit=3)
    assert len(json.loads(tools)) == 14
    assert all(isinstance(t.messages[0], SystemMessage) for t in trajectories)
