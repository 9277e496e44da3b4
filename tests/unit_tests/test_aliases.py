from __future__ import annotations

import json
import random
import uuid
from typing import Any

from hypothesis import given, settings
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_histcompress.core.aliases import IdAliases, resolve_ref, stable_ref, stable_refs
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.edge.extraction import FactExtractor
from langchain_histcompress.edge.summary_prompt import build_summary_prompt
from tests.histories import history

COUNTER = TiktokenCounter()


def _uuid(n: int) -> str:
    return str(uuid.UUID(int=n + 1, version=4))


def _exchange(ids: list[str]) -> list[BaseMessage]:
    call = f"call_{ids[1][:24]}" if len(ids[1]) > 8 else "c"
    return [
        HumanMessage("Book me a flight to Oslo on May 20th.", id=ids[0]),
        AIMessage(
            "", id=ids[1], tool_calls=[{"name": "search", "args": {"to": "OSL"}, "id": call}]
        ),
        ToolMessage('{"flights": ["HAT001", "HAT002"]}', tool_call_id=call, id=ids[2]),
        AIMessage("Two flights are free: HAT001 and HAT002.", id=ids[3]),
    ]


def test_uuid_ids_cost_about_what_short_ids_cost_in_internal_prompts() -> None:
    short = [m for r in range(10) for m in _exchange([f"h{r}", f"a{r}", f"t{r}", f"b{r}"])]
    long = [m for r in range(10) for m in _exchange([_uuid(4 * r + k) for k in range(4)])]
    short_tokens = COUNTER.count_messages(build_summary_prompt(short))
    long_tokens = COUNTER.count_messages(build_summary_prompt(long))
    assert long_tokens <= short_tokens * 1.05
    assert all(_uuid(0) not in str(m.content) for m in build_summary_prompt(long))


def test_an_alias_never_takes_a_short_id_shown_in_the_same_prompt() -> None:
    messages = [HumanMessage("a", id="m1"), HumanMessage("b", id=_uuid(1))]
    aliases = IdAliases.for_messages(messages)
    assert [m.id for m in aliases.apply(messages)] == ["m1", "m2"]


def test_fact_sources_named_by_alias_come_back_as_real_ids() -> None:
    messages = [HumanMessage("I moved to Oslo.", id=_uuid(7)), AIMessage("Nice!", id=_uuid(8))]
    answer = json.dumps([{"op": "ADD", "content": "Lives in Oslo", "source_ids": ["m1", "m9"]}])
    model = GenericFakeChatModel(messages=iter([AIMessage(answer)]))
    result = FactExtractor(model).extract(messages)
    [fact] = result.facts.values()
    assert fact.source_ids == (_uuid(7),)


@settings(max_examples=25, deadline=None)
@given(history(max_rounds=4))
def test_aliases_change_only_ids_and_map_back(messages: list[Any]) -> None:
    aliases = IdAliases.for_messages(messages)
    shown = aliases.apply(messages)
    assert [m.content for m in shown] == [m.content for m in messages]
    assert aliases.resolve_all(str(m.id) for m in shown) == [str(m.id) for m in messages]
    shown_ids = [m.id for m in shown]
    assert len(set(shown_ids)) == len(set(m.id for m in messages))


def test_the_replay_model_follows_aliased_ids_back_to_turns() -> None:
    from langchain_histcompress.workbench.locomo import parse_locomo
    from langchain_histcompress.workbench.replay import ReplayChatModel
    from tests.unit_tests.test_bench_locomo import tiny_locomo_data

    conversation = parse_locomo(tiny_locomo_data())
    renamed = {t.dia_id: _uuid(i) for i, t in enumerate(conversation.turns)}
    messages = [m.model_copy(update={"id": renamed[str(m.id)]}) for m in conversation.messages()]
    model = ReplayChatModel(conversation=conversation)
    result = FactExtractor(model).extract(messages)
    assert result.facts
    sources = {s for f in result.facts.values() for s in f.source_ids}
    assert sources and sources <= set(renamed.values())


def test_stable_refs_depend_on_the_id_alone_and_shorten_uuids() -> None:
    ids = [_uuid(n) for n in range(2_000)]
    refs = [stable_ref(i) for i in ids]
    assert refs == [stable_ref(i) for i in reversed(ids)][::-1]  # order and company do not matter
    assert all(r.startswith("#") and len(r) == 10 for r in refs)
    assert len(set(refs)) == len(refs)
    assert stable_ref("D3:14") == "D3:14" and stable_ref("x" * 16) == "x" * 16
    random_ids = [
        str(uuid.UUID(int=random.Random(n).getrandbits(128), version=4)) for n in range(50)
    ]
    uuid_tokens = sum(COUNTER.count_text(f"[{i}] Lives in Oslo") for i in random_ids)
    ref_tokens = sum(COUNTER.count_text(f"[{stable_ref(i)}] Lives in Oslo") for i in random_ids)
    assert uuid_tokens - ref_tokens >= 15 * len(random_ids)


def test_a_reference_resolves_back_to_its_id() -> None:
    ids = ["h1", _uuid(3), _uuid(4)]
    mapping = stable_refs(ids)
    assert set(mapping.values()) == {_uuid(3), _uuid(4)}
    for ref, real in mapping.items():
        assert resolve_ref(ref, ids) == real
    assert resolve_ref("h1", ids) == "h1"
    assert resolve_ref(stable_ref(_uuid(9)), ids) is None
