from __future__ import annotations

import json
from pathlib import Path

import pytest

from langchain_histcompress.workbench.bench_diff import figure_differences, is_run_dependent
from langchain_histcompress.workbench.cli import main


def _run(tokens: int, ms: float, stamp: str) -> dict[str, object]:
    return {
        "generated_at": stamp,
        "config": {"data": [f"/tmp/{stamp}/locomo"], "quick": True},
        "totals": {
            "round_compression": {
                "billed_tokens": tokens,
                "overhead_ms": {"1000": ms},
                "figures": {"overhead_ms_mean": ms, "recall": 0.5},
            }
        },
        "overhead": [{"strategy": "full", "ms_per_turn": ms, "samples_ms": [ms, ms]}],
        "faces": [{"face": "reducer", "mean_ms": ms, "alloc_kib": ms * 10, "folds": 3}],
    }


def test_timings_allocations_and_stamps_never_count_as_differences() -> None:
    assert figure_differences(_run(100, 1.0, "a"), _run(100, 9.0, "b")) == []


def test_a_changed_figure_is_reported_with_both_values() -> None:
    before, after = _run(100, 1.0, "a"), _run(101, 1.0, "a")
    after["faces"][0]["folds"] = 4  # type: ignore[index]
    assert figure_differences(before, after) == [
        ("faces[0].folds", 3, 4),
        ("totals.round_compression.billed_tokens", 100, 101),
    ]
    assert figure_differences({"a": 1}, {}) == [("a", 1, None)]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("totals.full.overhead_ms.1000", True),
        ("faces[3].fold_alloc_kib", True),
        ("incremental_counting.recount_s", True),
        ("per_conversation.26.full.figures.overhead_ms_mean", True),
        ("totals.full.billed_tokens", False),
        ("costs.agent_workload.strategies.facts.answering_calls", False),
        ("totals.round_compression.figures.recall", False),
    ],
)
def test_run_dependent_keys(path: str, expected: bool) -> None:
    assert is_run_dependent(path) is expected


def test_the_command_exits_1_on_a_difference_and_0_without(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = {}
    for name, tokens in (("a", 100), ("b", 100), ("c", 120)):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(_run(tokens, 1.0 + tokens, name)), encoding="utf-8")
    assert main(["bench-diff", str(paths["a"]), str(paths["b"])]) == 0
    assert "0 differ" in capsys.readouterr().out
    assert main(["bench-diff", str(paths["a"]), str(paths["c"])]) == 1
    out = capsys.readouterr().out
    assert "totals.round_compression.billed_tokens: 100 -> 120" in out and "1 differ" in out
    assert main(["bench-diff", str(paths["a"]), str(tmp_path / "missing.json")]) == 2
    assert "cannot read the benchmark JSON" in capsys.readouterr().err
