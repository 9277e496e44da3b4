from __future__ import annotations

import itertools
from collections.abc import Set as AbstractSet
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)

from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.storage import (
    HistoryStore,
    InMemoryHistoryStore,
    SessionSnapshot,
    SQLHistoryStore,
)
from langchain_histcompress.storage.base import REMOVE_ALL_MESSAGES, decode_message, encode_message

_ids = itertools.count()

# any unicode text, lone surrogates and NUL included
text = st.text(alphabet=st.characters(exclude_categories=()), max_size=30)
ident = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12)
json_scalar = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | text | st.floats(allow_nan=False)
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
json_object = st.dictionaries(ident, json_value, max_size=4)
block = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, text),
    st.builds(
        lambda u, extra: {"type": "image_url", "image_url": {"url": u}, **extra},
        text,
        st.dictionaries(st.sampled_from(["detail", "cache_control"]), json_value, max_size=1),
    ),
    text,
)
content = text | st.lists(block, max_size=3)
maybe_id = st.none() | st.just("") | ident
name = st.none() | ident


def _id() -> str:
    return f"id-{next(_ids)}"


@st.composite
def tool_calls(draw: st.DrawFn) -> list[dict[str, Any]]:
    return [
        {"name": draw(ident), "args": draw(json_object), "id": draw(ident)}
        for _ in range(draw(st.integers(0, 3)))
    ]


@st.composite
def message(draw: st.DrawFn) -> BaseMessage:
    kind = draw(st.sampled_from(["human", "ai", "system", "tool", "chat", "function", "chunk"]))
    common: dict[str, Any] = {
        "id": draw(maybe_id),
        "name": draw(name),
        "additional_kwargs": draw(json_object),
        "response_metadata": draw(json_object),
    }
    body = draw(content)
    if kind == "human":
        return HumanMessage(body, **common)
    if kind == "system":
        return SystemMessage(body, **common)
    if kind == "chat":
        return ChatMessage(body, role=draw(ident), **common)
    if kind == "function":
        return FunctionMessage(body, **{**common, "name": draw(ident)})
    if kind == "tool":
        return ToolMessage(
            body,
            tool_call_id=draw(ident),
            artifact=draw(json_value),
            status=draw(st.sampled_from(["success", "error"])),
            **common,
        )
    usage = draw(
        st.none()
        | st.builds(
            lambda i, o: {"input_tokens": i, "output_tokens": o, "total_tokens": i + o},
            st.integers(0, 10**6),
            st.integers(0, 10**6),
        )
    )
    if kind == "chunk":
        chunks = [
            {"name": draw(ident), "args": draw(text), "id": draw(ident), "index": i}
            for i in range(draw(st.integers(0, 2)))
        ]
        return AIMessageChunk(body, tool_call_chunks=chunks, usage_metadata=usage, **common)
    return AIMessage(body, tool_calls=draw(tool_calls()), usage_metadata=usage, **common)


@settings(max_examples=120, deadline=None)
@given(message())
def test_encode_decode_is_exact(m: BaseMessage) -> None:
    back = decode_message(encode_message(m))
    assert type(back) is type(m)
    assert back == m
    assert back.model_dump() == m.model_dump()


_SQLITE = SQLHistoryStore(":memory:")


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(message(), min_size=1, max_size=6))
def test_store_round_trip_is_exact(batch: list[BaseMessage]) -> None:
    for store in (InMemoryHistoryStore(), _SQLITE):
        session = _id()
        unique = [m.model_copy(update={"id": None}) if m.id else m for m in batch]
        stored = store.append(session, unique)
        loaded = store.load_messages(session)
        assert loaded == stored
        assert [type(m) for m in loaded] == [type(m) for m in unique]
        # only the ids were added; every other field is exact
        for before, after in zip(unique, loaded, strict=True):
            assert after.model_dump(exclude={"id"}) == before.model_dump(exclude={"id"})


# --------------------------------------------------------------------------- state machine


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[str, int]]:
    ops = st.sampled_from(["append", "compress", "prune", "stale", "remove", "reset"])
    return [(draw(ops), draw(st.integers(1, 4))) for _ in range(draw(st.integers(1, 25)))]


def _check_invariants(
    store: HistoryStore, session: str, all_ids: list[str], removed: AbstractSet[str] = frozenset()
) -> None:
    snap = store.snapshot(session)
    covered = snap.summary.covered_ids if snap.summary else frozenset()
    uncovered = [m.id for m in snap.uncovered]
    # nothing lost: every original is either uncovered (in order) or covered, never both
    assert uncovered == [i for i in all_ids if i not in covered]
    assert covered <= set(all_ids) | removed  # a removed covered message stays summarized
    stored = [m.id for m in store.load_messages(session)]
    assert set(uncovered) <= set(stored)
    assert stored == [i for i in all_ids if i in set(stored)]


@settings(max_examples=60, deadline=None)
@given(operations())
def test_random_operations_keep_every_message_accounted_for(ops: list[tuple[str, int]]) -> None:
    for store in (InMemoryHistoryStore(), _SQLITE):
        session = _id()
        all_ids: list[str] = []
        removed: set[str] = set()
        stale: RunningSummary | None = None
        stale_seen = False
        for op, n in ops:
            snap = store.snapshot(session)
            if op == "append":
                batch = [HumanMessage(f"m{len(all_ids) + i}") for i in range(n)]
                all_ids += [str(m.id) for m in store.append(session, batch)]
            elif op == "remove":
                stored = [str(m.id) for m in store.load_messages(session)]
                if not stored:
                    continue
                doomed = stored[n % len(stored)]
                store.update(session, [RemoveMessage(id=doomed)])
                all_ids.remove(doomed)
                removed.add(doomed)
            elif op == "reset":
                store.update(session, [RemoveMessage(id=REMOVE_ALL_MESSAGES)])
                assert store.snapshot(session) == SessionSnapshot(None, ())
                all_ids, removed = [], set()
            elif op in ("compress", "stale"):
                fold = [str(m.id) for m in snap.uncovered[:n]]
                if not fold:
                    continue
                # a writer extends the summary it read: a stale one, its stale summary
                base = stale if op == "stale" and stale_seen else snap.summary
                new = RunningSummary(
                    content="c",
                    text=f"covers {len(fold)}",
                    covered_ids=frozenset(fold) | (base.covered_ids if base else frozenset()),
                    version=(base.version if base else 0) + 1,
                )
                if op == "stale" and stale_seen:
                    try:
                        store.commit_compression(session, new, previous=stale)
                    except Exception as exc:  # a stale writer must lose
                        assert type(exc).__name__ == "CompressionConflictError"
                    else:
                        assert stale == snap.summary
                    continue
                stale, stale_seen = snap.summary, True
                store.commit_compression(session, new, previous=snap.summary)
            else:
                pruned = set(all_ids) - {str(m.id) for m in snap.uncovered}
                store.prune_covered(session)
                all_ids = [i for i in all_ids if i not in pruned]
                removed |= pruned
            _check_invariants(store, session, all_ids, removed)
