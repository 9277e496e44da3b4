"""FactStateCache: facts parsed once per entry, unchanged states recognised whole."""

from __future__ import annotations

import pytest

from langchain_histcompress.context.fact_cache import FactStateCache
from langchain_histcompress.core.facts import Fact


def _state(n: int) -> dict[str, dict[str, object]]:
    return {
        f"f-{i}": {"id": f"f-{i}", "content": f"fact {i}", "source_ids": ["m1"]} for i in range(n)
    }


def test_an_unchanged_state_returns_the_same_facts_without_a_new_generation() -> None:
    cache, state = FactStateCache(), _state(3)
    first = cache.read(state)
    generation = cache.generation
    again = cache.read(state)
    assert again == first
    assert all(again[k] is first[k] for k in first)
    assert cache.generation == generation
    again.clear()  # the caller's copy: the cache is unaffected
    assert len(cache.read(state)) == 3


def test_replaced_added_and_removed_entries_are_seen() -> None:
    cache, state = FactStateCache(), _state(3)
    cache.read(state)
    state["f-1"] = {**state["f-1"], "content": "edited"}
    assert cache.read(state)["f-1"].content == "edited"
    state["f-1"] = {**state["f-1"], "source_ids": ["m1", "m2"]}
    assert cache.read(state)["f-1"].source_ids == ("m1", "m2")
    generation = cache.generation
    state["f-9"] = {"id": "f-9", "content": "new"}
    assert set(cache.read(state)) == {"f-0", "f-1", "f-2", "f-9"}
    assert cache.generation > generation
    del state["f-0"]
    assert list(cache.read(state)) == ["f-1", "f-2", "f-9"]
    state["f-2"] = {"id": "f-2", "content": "replaced"}
    assert cache.read(state)["f-2"].content == "replaced"
    reordered = {k: state[k] for k in reversed(state)}
    assert list(cache.read(reordered)) == ["f-9", "f-2", "f-1"]


def test_entries_are_matched_by_identity_then_by_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dict read before is not read again; an equal new dict (a reloaded state) keeps its fact."""
    cache, state = FactStateCache(), _state(50)
    first = cache.read(state)
    assert cache.parsed == 50
    reloaded = {k: dict(v) for k, v in state.items()}  # new objects, same fields
    again = cache.read(reloaded)
    assert all(again[k] is first[k] for k in first)
    assert cache.parsed == 50
    compared: list[object] = []

    class Spy(dict):  # type: ignore[type-arg]
        def __eq__(self, other: object) -> bool:
            compared.append(self)
            return super().__eq__(other)

        __hash__ = None

    spied = {k: Spy(v) for k, v in reloaded.items()}
    cache.read(spied)
    compared.clear()
    spied["f-7"] = Spy({**spied["f-7"], "content": "changed"})
    assert cache.read(spied)["f-7"].content == "changed"
    assert cache.parsed == 51
    assert all(c is spied["f-7"] for c in compared)  # the others matched by identity


def test_a_list_of_the_same_fact_objects_keeps_its_generation() -> None:
    cache = FactStateCache()
    facts = [Fact(id="f-1", content="x")]
    first = cache.read(facts)
    generation = cache.generation
    assert cache.read(list(facts)) == first
    assert cache.generation == generation
    assert cache.read([Fact(id="f-1", content="y")])["f-1"].content == "y"  # another object
    assert cache.generation == generation + 1
    dicts = [{"id": "f-1", "content": "x"}]  # dicts may change in place: read every time
    cache.read(dicts)
    generation = cache.generation
    assert list(cache.read(dicts)) == ["f-1"]
    assert cache.generation > generation


def test_alternating_forms_never_answer_with_another_forms_facts() -> None:
    cache, state = FactStateCache(), _state(2)
    facts = [Fact(id="f-9", content="x")]
    for _ in range(2):
        generation = cache.generation
        assert set(cache.read(state)) == {"f-0", "f-1"}
        assert set(cache.read(facts)) == {"f-9"}
        assert set(cache.read({1: {"id": "1", "content": "y"}})) == {"1"}
        assert cache.generation == generation + 3  # each read changed the answer


def test_other_forms_always_start_a_new_generation() -> None:
    cache = FactStateCache()
    mixed = {"f-1": Fact(id="f-1", content="x"), **_state(1)}
    generation = cache.generation
    assert set(cache.read(mixed)) == {"f-1", "f-0"}
    assert set(cache.read(mixed)) == {"f-1", "f-0"}
    assert cache.generation == generation + 2  # no whole-state shortcut with Fact entries


def test_a_grown_state_reads_only_its_new_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    import langchain_histcompress.context.fact_cache as module

    cache, state = FactStateCache(), _state(5)
    first = cache.read(state)
    parsed: list[object] = []
    original = module.facts_from_state

    def counting(value: object) -> dict[str, Fact]:
        parsed.append(value)
        return original(value)

    monkeypatch.setattr(module, "facts_from_state", counting)
    state["f-9"] = {"id": "f-9", "content": "new"}
    grown = cache.read(state)
    assert len(parsed) == 1
    assert list(grown) == [*first, "f-9"]
    assert all(grown[k] is first[k] for k in first)
    state["f-0"] = {**state["f-0"], "content": "edited"}  # a change before the new end
    assert cache.read(state)["f-0"].content == "edited"
    assert len(parsed) == 2


def test_read_expiring_follows_the_entries_that_can_expire() -> None:
    cache, state = FactStateCache(), _state(4)
    when = "2030-01-01T00:00:00Z"

    def check() -> bool:
        facts, expiring = cache.read_expiring(state)
        assert expiring == any(f.expires_at is not None for f in facts.values())
        return expiring

    assert not check()
    state["f-1"] = {**state["f-1"], "expires_at": when}  # an entry replaced
    assert check()
    assert check()  # the same state again (a whole hit)
    state["f-9"] = {"id": "f-9", "content": "new"}  # an unrelated entry added
    assert check()
    state["f-1"] = {**state["f-1"], "expires_at": None}
    assert not check()
    state["f-5"] = Fact(id="f-5", content="as a fact", expires_at=when)  # a Fact entry
    assert check()
    del state["f-5"]  # the entry that could expire leaves
    assert not check()
    state["f-2"] = {**state["f-2"], "expires_at": when}
    assert check()
    listed = Fact(id="f-1", content="x", expires_at=when)  # a list: read, not cached
    assert cache.read_expiring([listed]) == ({"f-1": listed}, True)
