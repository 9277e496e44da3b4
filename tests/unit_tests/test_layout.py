from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_histcompress.context.builder import ContextBuilder, is_context_message
from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.core.pricing import encode_request
from langchain_histcompress.core.rounds import validate_history
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.tokens import TiktokenCounter

COUNTER = TiktokenCounter()
FACTS = [
    Fact(id=f"f-{i}", content=f"{topic} fact number {i}", source_ids=[f"old-{i}"])
    for i, topic in enumerate(["Ann likes tea", "Ann lives in Oslo", "Ann plays cello"] * 3)
]
SUMMARY = RunningSummary(
    content="x", text="Ann and Bob talked about music.", covered_ids=frozenset({"gone-1"})
)


def _history(question: str) -> list[BaseMessage]:
    out: list[BaseMessage] = [SystemMessage("You are Bob. " * 20, id="s")]
    for i in range(9):
        out += [HumanMessage(f"turn {i} from Ann", id=f"h{i}"), AIMessage(f"reply {i}", id=f"a{i}")]
    return [*out, HumanMessage(question, id="q")]


def _lcp(a: list[int], b: list[int]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def _build(layout: str, question: str) -> list[BaseMessage]:
    builder = ContextBuilder(
        max_context_tokens=4000, token_counter=COUNTER, layout=layout, top_k_facts=2
    )
    return builder.build(_history(question), summary=SUMMARY, facts=FACTS)


def test_unknown_layout_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="layout must be one of cache_stable, data_first"):
        ContextBuilder(max_context_tokens=100, layout="facts_last")  # type: ignore[arg-type]


def test_cache_stable_layout_keeps_the_prefix_across_questions() -> None:
    shared = {}
    for layout in ("data_first", "cache_stable"):
        one = encode_request(_build(layout, "Does Ann like tea?"), COUNTER)
        two = encode_request(_build(layout, "Where does Ann play cello?"), COUNTER)
        shared[layout] = _lcp(one, two)
    verbatim = encode_request(_history("x")[:-1], COUNTER)
    assert shared["cache_stable"] >= len(verbatim) - 3  # all rounds before the facts
    assert shared["data_first"] < shared["cache_stable"] / 2


def test_cache_stable_context_puts_facts_next_to_the_question_and_stays_valid() -> None:
    out = _build("cache_stable", "Does Ann like tea?")
    assert out[0].id == "s"
    assert is_context_message(out[1]) and "Ann and Bob talked" in str(out[1].content)
    assert is_context_message(out[-2]) and isinstance(out[-2], HumanMessage)
    assert "fact number" in str(out[-2].content)
    assert out[-1].id == "q"
    assert validate_history(out, allow_in_flight=True) == []


def test_verbatim_ids_leave_out_both_data_messages() -> None:
    builder = ContextBuilder(
        max_context_tokens=4000, token_counter=COUNTER, layout="cache_stable", top_k_facts=2
    )
    built = builder.assemble(_history("Does Ann like tea?"), summary=SUMMARY, facts=FACTS)
    assert built.verbatim_ids[0] == "h0"
    assert built.verbatim_ids[-1] == "q"
    assert not any(i.startswith("histcompress-context") for i in built.verbatim_ids)
