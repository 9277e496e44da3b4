"""Thread summarization: the exchange just answered is in the summary of the next call."""

from __future__ import annotations

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately

from langchain_histcompress.edge.compressor import RoundCompressor
from langchain_histcompress.edge.thread_summary import (
    acompress_in_background,
    compress_in_background,
    thread_summarizer,
)
from tests.fakes import ScriptedSummarizer, prompt_ids

SYSTEM = SystemMessage("Be brief.", id="sys")


def answer_then_fold(compressor: RoundCompressor, turns: int) -> list[list[str]]:
    """Replay the recipe: view (no call), reply, fold in the background; ids sent per turn."""
    history: list[BaseMessage] = [SYSTEM]
    summary = None
    folding = None
    sent: list[list[str]] = []
    for n in range(turns):
        if folding is not None:
            summary = folding.result(timeout=30).summary
        history.append(HumanMessage(f"q{n}", id=f"h{n}"))
        view = compressor.view(history, summary)
        sent.append([str(m.id) for m in view if not isinstance(m, SystemMessage)])
        history.append(AIMessage(f"a{n}", id=f"a{n}"))
        folding = compress_in_background(compressor, history, summary)
    return sent


def test_each_call_sees_only_its_question_the_rest_is_in_the_summary() -> None:
    model = ScriptedSummarizer()
    compressor = thread_summarizer(model, token_counter=count_tokens_approximately)
    assert answer_then_fold(compressor, 4) == [["h0"], ["h1"], ["h2"], ["h3"]]
    assert [prompt_ids(p) for p in model.prompts[:3]] == [
        ["h0", "a0"],
        ["h1", "a1"],
        ["h2", "a2"],
    ]
    # the preset is the compressor's own setting: nothing was switched on for the background
    assert (compressor.trigger.clauses, compressor.keep) == (({"rounds": 1},), ("rounds", 0))


def test_only_an_answered_round_folds_never_a_question_or_a_tool_step() -> None:
    compressor = thread_summarizer(ScriptedSummarizer(), token_counter=count_tokens_approximately)
    asked = [SYSTEM, HumanMessage("q0", id="h0")]
    assert not compressor.compress(asked).compressed  # the question waits for its answer
    calling = AIMessage("", id="c0", tool_calls=[{"name": "t", "args": {}, "id": "call-0"}])
    future = compress_in_background(compressor, [*asked, calling])
    assert not future.result(timeout=30).compressed  # waiting for a tool result: not answered
    results = [*asked, calling, ToolMessage("r", tool_call_id="call-0", id="t0")]
    assert not compressor.compress(results).compressed  # the model has yet to answer
    answered = [*results, AIMessage("a0", id="a0")]
    folded = compress_in_background(compressor, answered).result(timeout=30)
    assert folded.summary is not None
    assert folded.summary.covered_ids == {"h0", "c0", "t0", "a0"}


def test_keep_zero_rounds_on_any_compressor_and_the_async_path() -> None:
    import asyncio

    answered = [SYSTEM, HumanMessage("q0", id="h0"), AIMessage("a0", id="a0")]
    eager = RoundCompressor(
        ScriptedSummarizer(),
        token_counter=count_tokens_approximately,
        trigger=("rounds", 1),
        keep=("rounds", 0),
    )
    assert eager.compress(answered).summary is None  # before the reply the round stays
    folded = eager.compress(answered, after_reply=True).summary
    assert folded is not None and folded.covered_ids == {"h0", "a0"}

    async def after_reply() -> frozenset[str]:
        plain = thread_summarizer(ScriptedSummarizer(), token_counter=count_tokens_approximately)
        result = await acompress_in_background(plain, answered)
        assert result.summary is not None
        return result.summary.covered_ids

    assert asyncio.run(after_reply()) == {"h0", "a0"}
