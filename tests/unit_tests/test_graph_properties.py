"""Invariants of the graph faces on generated histories, and topology snapshots."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langchain.agents.middleware.types import ModelRequest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately
from langgraph.graph.message import add_messages

from langchain_histcompress.compressor import view
from langchain_histcompress.context import ContextBuilder
from langchain_histcompress.errors import BudgetError
from langchain_histcompress.middleware import RoundCompressionMiddleware
from langchain_histcompress.nodes import RoundCompressionNode, build_model_input, summary_from_state
from langchain_histcompress.rounds import is_summary_message, split_rounds, validate_history
from tests.fakes import CountingSummarizer
from tests.histories import history
from tests.unit_tests.test_nodes import Harness, make_compressor

PROPERTY_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

compressor_options = st.fixed_dictionaries(
    {
        "rounds_to_compress": st.integers(1, 3),
        "rounds_to_retain": st.integers(0, 3),
        "max_round_tokens": st.one_of(st.none(), st.integers(20, 120)),
    }
)


def latest_human(messages: list[BaseMessage]) -> HumanMessage | None:
    return next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)


def body_ids(messages: list[BaseMessage]) -> set[str]:
    return {str(m.id) for m in messages if not isinstance(m, SystemMessage) and m.id is not None}


@PROPERTY_SETTINGS
@given(
    messages=history(allow_leading_tools=False),
    options=compressor_options,
    destructive=st.booleans(),
)
def test_node_invariants(
    messages: list[BaseMessage], options: dict[str, Any], destructive: bool
) -> None:
    assert validate_history(messages) == []
    summarizer = CountingSummarizer()
    compressor = make_compressor(summarizer, max_calls_per_compress=50, **options)
    node = RoundCompressionNode(compressor, destructive=destructive)
    state: dict[str, Any] = {"messages": list(messages)}
    update = node.invoke(state)
    model_input = update["model_input"]
    summary = summary_from_state(update)
    event("compressed" if summary is not None else "not compressed")

    # provider shape, preamble byte-identical, current question kept
    assert validate_history(model_input) == []
    preamble = split_rounds(messages).preamble
    assert all(a is b for a, b in zip(preamble, model_input, strict=False))
    human = latest_human(messages)
    if human is not None:
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
        assert view(remaining, summary) == model_input
    else:
        assert "messages" not in update

    # stable: running again on the new state calls nobody and shows the same view
    if summary is not None:
        state = {**state, "running_summary": update["running_summary"]}
    again = node.invoke(state)
    assert "running_summary" not in again
    assert again["model_input"] == model_input
    assert summarizer.calls == (summary.version if summary else 0)


@PROPERTY_SETTINGS
@given(messages=history(allow_leading_tools=False), options=compressor_options)
def test_middleware_request_invariants(
    messages: list[BaseMessage], options: dict[str, Any]
) -> None:
    body = [m for m in messages if not isinstance(m, SystemMessage)]
    summarizer = CountingSummarizer()
    middleware = RoundCompressionMiddleware(
        make_compressor(summarizer, max_calls_per_compress=50, **options)
    )
    state: dict[str, Any] = {"messages": body}
    update = middleware.before_model(state, None)  # type: ignore[arg-type]
    if update is not None:
        assert set(update) == {"running_summary"}
        state = {**state, **update}
    system = SystemMessage("agent instructions", id="prompt")
    request = ModelRequest(
        model=GenericFakeChatModel(messages=iter([])),
        messages=list(body),
        system_message=system,
        state=state,  # type: ignore[arg-type]
    )
    compressed = middleware.compressed_request(request)
    sent = [compressed.system_message, *compressed.messages]
    assert compressed.system_message is system
    assert validate_history(sent) == []  # type: ignore[arg-type]
    human = latest_human(body)
    if human is not None:
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
