"""An empty-string message id counts as no id, on every face.

``add_messages`` only gives an id to messages whose id is ``None``, so ``''`` reaches the
package from real threads. One rule everywhere: ``''`` is a missing id. Faces that derive
ids derive one for it, checks that need ids name it as missing (and the advised
`rounds.ensure_ids` fixes it), and no check reports ``''`` ids as duplicates.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately

from langchain_histcompress.context.builder import ContextBuilder
from langchain_histcompress.context.cache_stable import CacheStableContext
from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.rounds import ensure_ids, validate_history
from langchain_histcompress.edge.compressor import RoundCompressor
from langchain_histcompress.faces.history import CompressingChatMessageHistory
from langchain_histcompress.faces.history_adapter import CompressingHistoryAdapter
from langchain_histcompress.faces.nodes import RoundCompressionNode, summary_from_state
from langchain_histcompress.faces.reducers import SummarizationReducer
from langchain_histcompress.storage import InMemoryHistoryStore, SQLHistoryStore
from tests.fakes import ScriptedSummarizer


def blank_ids(rounds: int = 6) -> list[BaseMessage]:
    out: list[BaseMessage] = [SystemMessage("be brief")]
    for i in range(rounds):
        out += [HumanMessage(f"question {i}", id=""), AIMessage(f"answer {i}", id="")]
    return out


def compressor(**kwargs: Any) -> RoundCompressor:
    return RoundCompressor(
        ScriptedSummarizer(),
        trigger=("rounds", 3),
        keep=("rounds", 1),
        token_counter="approximate",
        **kwargs,
    )


def test_ensure_ids_gives_an_empty_id_a_real_one() -> None:
    history = blank_ids(2)
    ided = ensure_ids(history)
    assert all(m.id for m in ided[1:])
    assert len({m.id for m in ided[1:]}) == 4
    assert [m.id for m in history[1:]] == ["", "", "", ""]  # copies: nothing mutated
    assert ided == ensure_ids(history)  # deterministic


def test_validation_does_not_call_empty_ids_duplicates() -> None:
    assert validate_history(blank_ids(3)) == []


def test_the_advice_of_the_missing_id_error_works() -> None:
    history = blank_ids()
    with pytest.raises(ConfigurationError, match=r"has no id.*rounds\.ensure_ids"):
        compressor().compress(history)
    result = compressor().compress(ensure_ids(history))
    assert result.compressed and result.summary is not None


def test_the_node_derives_ids_for_empty_ones() -> None:
    update = RoundCompressionNode(compressor(), output_key="model_input").invoke(
        {"messages": blank_ids()}
    )
    summary = summary_from_state(update)
    assert summary is not None and all(summary.covered_ids)
    assert update["model_input"][-1].content == "answer 5"


def test_the_summarization_reducer_accepts_empty_ids() -> None:
    reduced = SummarizationReducer(ScriptedSummarizer(), target_count=2).reduce(blank_ids())
    assert reduced is not None
    assert [m.content for m in reduced[-2:]] == ["question 5", "answer 5"]


def test_context_builders_accept_empty_ids() -> None:
    history = [*blank_ids(), HumanMessage("last", id="")]
    builder = ContextBuilder(max_context_tokens=60, token_counter=count_tokens_approximately)
    out = builder.build(history)
    assert out[-1].content == "last" and validate_history(out) == []
    roomy = ContextBuilder(max_context_tokens=4000, token_counter=count_tokens_approximately)
    assert [m.content for m in roomy.build(history)] == [m.content for m in history]
    stable = CacheStableContext(
        ContextBuilder(
            max_context_tokens=4000,
            token_counter=count_tokens_approximately,
            layout="cache_stable",
            data_budget_ratio=1.0,
        )
    )
    assert stable.assemble(history).messages[-1].content == "last"


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_stores_give_empty_ids_a_real_one(backend: str) -> None:
    store = InMemoryHistoryStore() if backend == "memory" else SQLHistoryStore(":memory:")
    stored = store.append("s", blank_ids(2)[1:])
    assert all(m.id for m in stored) and len({m.id for m in stored}) == 4
    more = store.append("s", [HumanMessage("again", id="")])
    assert more[0].id and more[0].id not in {m.id for m in stored}
    assert [m.content for m in store.load_messages("s")][-1] == "again"


@pytest.mark.filterwarnings("ignore::langchain_core._api.deprecation.LangChainDeprecationWarning")
def test_chat_histories_accept_empty_ids() -> None:
    chat = CompressingChatMessageHistory(
        "s", connection=InMemoryHistoryStore(), compressor=compressor()
    )
    adapter = CompressingHistoryAdapter(
        InMemoryChatMessageHistory(),
        key="k",
        summary_store=InMemoryHistoryStore(),
        compressor=compressor(),
        raise_on_compression_error=True,
    )
    for face in (chat, adapter):
        for i in range(6):
            face.add_messages([HumanMessage(f"q{i}", id=""), AIMessage(f"a{i}", id="")])
        assert face.summary is not None
        assert face.messages[-1].content == "a5"
