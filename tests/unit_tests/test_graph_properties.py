"""Invariants of the graph faces on generated histories, and topology snapshots."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately
from langgraph.graph.message import add_messages

from langchain_histcompress.context.builder import ContextBuilder
from langchain_histcompress.core.errors import BudgetError
from langchain_histcompress.core.rounds import is_summary_message, split_rounds, validate_history
from langchain_histcompress.faces.middleware import RoundCompressionMiddleware
from langchain_histcompress.faces.nodes import (
    RoundCompressionNode,
    build_model_input,
    summary_from_state,
)
from tests.fakes import CountingSummarizer, model_request, through_middleware
from tests.histories import history
from tests.unit_tests.test_nodes import Harness, make_compressor

PROPERTY_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

compressor_options = st.fixed_dictionaries(
    {
        "trigger": st.one_of(
            st.tuples(st.just("rounds"), st.integers(1, 6)),
            st.tuples(st.just("tokens"), st.integers(10, 300)),
            st.none(),
        ),
        "keep": st.tuples(st.just("rounds"), st.integers(0, 3)),
    }
)
windows = st.sampled_from([None, None, 500, 1000])
"""The answering model's window (``None``: the default one)."""


def latest_human(messages: list[BaseMessage]) -> HumanMessage | None:
    return next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)


def folds_the_question(messages: list[BaseMessage], options: dict[str, Any]) -> bool:
    """Whether ``options`` may fold the latest round whole: zero rounds kept, and answered."""
    last = messages[-1] if messages else None
    answered = isinstance(last, AIMessage) and not last.tool_calls and not last.invalid_tool_calls
    return answered and options["keep"] == ("rounds", 0)


def budget_of(window: int | None) -> int:
    return int(0.85 * (window or 128_000))


def body_ids(messages: list[BaseMessage]) -> set[str]:
    return {str(m.id) for m in messages if not isinstance(m, SystemMessage) and m.id is not None}


@PROPERTY_SETTINGS
@given(
    messages=history(allow_leading_tools=False),
    options=compressor_options,
    window=windows,
    destructive=st.booleans(),
)
def test_node_invariants(
    messages: list[BaseMessage], options: dict[str, Any], window: int | None, destructive: bool
) -> None:
    assert validate_history(messages) == []
    summarizer = CountingSummarizer()
    compressor = make_compressor(
        summarizer, max_calls_per_compress=50, context_window=window, **options
    )
    node = RoundCompressionNode(compressor, destructive=destructive)
    state: dict[str, Any] = {"messages": list(messages)}
    update = node.invoke(state)
    summary = summary_from_state(update)
    if summary is not None:
        state = {**state, "running_summary": update["running_summary"]}
    model_input = node.model_input(state)
    event("compressed" if summary is not None else "not compressed")

    # provider shape, within the budget, preamble byte-identical, current question kept
    assert validate_history(model_input) == []
    assert count_tokens_approximately(model_input) <= budget_of(window)
    preamble = split_rounds(messages).preamble
    assert all(a is b for a, b in zip(preamble, model_input, strict=False))
    human = latest_human(messages)
    if human is not None and not folds_the_question(messages, options):
        assert any(m is human for m in model_input)

    # nothing lost, nothing twice
    shown = body_ids([m for m in model_input if not is_summary_message(m)])
    covered = summary.covered_ids if summary else frozenset()
    assert body_ids(messages) == shown | covered
    assert shown.isdisjoint(covered)
    assert summarizer.calls == (summary.version if summary else 0)

    # destructive: one RemoveMessage per covered id, and the model sees the same view after
    if destructive and summary is not None:
        removals = update["messages"]
        assert {r.id for r in removals} == covered
        remaining = add_messages(messages, removals)
        assert body_ids(remaining) == shown
        after = {"messages": remaining, "running_summary": update["running_summary"]}
        assert node.model_input(after) == model_input
    else:
        assert "messages" not in update

    # stable: running again on the new state calls nobody and shows the same view
    again = node.invoke(state)
    assert "running_summary" not in again
    assert node.model_input(state) == model_input
    assert summarizer.calls == (summary.version if summary else 0)


@PROPERTY_SETTINGS
@given(messages=history(allow_leading_tools=False), options=compressor_options, window=windows)
def test_middleware_request_invariants(
    messages: list[BaseMessage], options: dict[str, Any], window: int | None
) -> None:
    body = [m for m in messages if not isinstance(m, SystemMessage)]
    summarizer = CountingSummarizer()
    middleware = RoundCompressionMiddleware(
        make_compressor(summarizer, max_calls_per_compress=50, **options)
    )
    state: dict[str, Any] = {"messages": body}
    system = SystemMessage("agent instructions", id="prompt")
    profile = {"max_input_tokens": window} if window else None
    answering = GenericFakeChatModel(messages=iter([]), profile=profile)
    request = model_request(answering, list(body), state, system)
    compressed, update = through_middleware(middleware, request)
    assert set(update) <= {"running_summary"}
    state = {**state, **update}
    sent = [compressed.system_message, *compressed.messages]
    assert compressed.system_message is system
    assert validate_history(sent) == []  # type: ignore[arg-type]
    assert count_tokens_approximately(sent) <= budget_of(window)
    human = latest_human(body)
    if human is not None and not folds_the_question(body, options):
        assert any(m is human for m in compressed.messages)
    summary = summary_from_state(state)
    covered = summary.covered_ids if summary else frozenset()
    shown = body_ids([m for m in compressed.messages if not is_summary_message(m)])
    assert body_ids(body) == shown | covered
    assert request.messages == body  # the original request is untouched


@PROPERTY_SETTINGS
@given(
    messages=history(allow_leading_tools=False),
    options=compressor_options,
    slack=st.integers(0, 200),
    tight=st.integers(20, 400),
)
def test_node_with_context_builder_invariants(
    messages: list[BaseMessage], options: dict[str, Any], slack: int, tight: int
) -> None:
    summarizer = CountingSummarizer()
    compressor = make_compressor(summarizer, max_calls_per_compress=50, **options)
    node = RoundCompressionNode(compressor, output_key=None)
    update = node.invoke({"messages": list(messages)})
    assert "model_input" not in update  # nothing unused is written to the checkpoint
    state: dict[str, Any] = {"messages": list(messages), **update}
    summary = summary_from_state(state)
    event("compressed" if summary is not None else "not compressed")

    # a history that fits the budget is sent as it is, never bigger
    raw = count_tokens_approximately(messages)
    roomy = ContextBuilder(max_context_tokens=raw + slack, token_counter=count_tokens_approximately)
    assert build_model_input(state, context_builder=roomy) == messages

    # under pressure, the summary is left out only when what it covers is all verbatim
    # or when it does not fit
    builder = ContextBuilder(max_context_tokens=tight, token_counter=count_tokens_approximately)
    try:
        built = builder.assemble(messages, summary=summary)
    except BudgetError:
        return
    assert built.tokens <= tight
    assert validate_history(built.messages) == []
    if summary is not None and not summary.covered_ids <= set(built.verbatim_ids):
        assert built.summary_included or "summary did not fit" in built.notes


EXPECTED_GRAPH_MERMAID = """---
config:
  flowchart:
    curve: linear
---
graph TD;
\t__start__([<p>__start__</p>]):::first
\tfacts(facts)
\tcompress(compress)
\tmodel(model)
\t__end__([<p>__end__</p>]):::last
\t__start__ --> facts;
\tcompress --> model;
\tfacts --> compress;
\tmodel --> __end__;
\tclassDef default fill:#f2f0ff,line-height:1.2
\tclassDef first fill-opacity:0
\tclassDef last fill:#bfb6fc
"""


def test_fact_compress_model_topology_snapshot() -> None:
    harness = Harness(None)
    assert harness.app.get_graph().draw_mermaid() == EXPECTED_GRAPH_MERMAID
    nodes = set(harness.app.get_graph().nodes)
    assert nodes == {"__start__", "facts", "compress", "model", "__end__"}
