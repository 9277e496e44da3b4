"""The shared model edge: internal config, retries, timeouts, step drivers, answer reading."""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableLambda

from langchain_histcompress.core.answer_text import (
    find_json_object,
    is_refusal,
    json_fenced_blocks,
    json_values,
    output_text,
    strip_think,
)
from langchain_histcompress.core.errors import ConfigurationError, SummarizationError
from langchain_histcompress.edge import _timeouts, answer_checks
from langchain_histcompress.edge import model_edge as _model_edge
from langchain_histcompress.edge import summarizer as summary
from langchain_histcompress.edge._timeouts import (
    ModelTimeoutError,
    await_with_timeout,
    call_with_timeout,
    submit_to_worker,
)
from langchain_histcompress.edge.model_edge import (
    INTERNAL_TAGS,
    ModelCall,
    RetryPolicy,
    describe_error,
    internal_config,
    is_transient_error,
    retry_after,
)
from langchain_histcompress.edge.steps import Pause, Steps, Twin, arun_steps, run_steps
from langchain_histcompress.faces import rephrase
from tests.fakes import (
    APIConnectionError,
    AuthenticationError,
    HTTPStatusError,
    InternalServerError,
    RateLimitError,
    Sleeps,
)


def wait_until(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


# --------------------------------------------------------------------------- internal config


def test_internal_config_copies_and_marks_the_call() -> None:
    recorder = object()
    caller: dict[str, Any] = {
        "callbacks": [recorder],
        "tags": ["mine", "nostream"],
        "metadata": {"user": "u1"},
        "configurable": {"thread_id": "t1"},
        "run_id": "caller-run",
        "run_name": "caller",
    }
    before = json.dumps({k: v for k, v in caller.items() if k != "callbacks"}, sort_keys=True)
    child = internal_config(caller, call="summarize", run_name="x", metadata={"v": 2})
    assert child["tags"] == ["mine", "nostream", "langchain_histcompress:internal"]
    assert child["metadata"] == {"user": "u1", "histcompress_call": "summarize", "v": 2}
    assert child["run_name"] == "x"
    assert "run_id" not in child
    assert child["callbacks"] == [recorder]
    assert child["configurable"] == {"thread_id": "t1"}
    assert json.dumps({k: v for k, v in caller.items() if k != "callbacks"}, sort_keys=True) == (
        before
    )


def test_internal_config_without_run_name_drops_the_callers() -> None:
    child = internal_config({"run_name": "caller", "tags": None}, call="extract_facts")
    assert "run_name" not in child
    assert child["tags"] == list(INTERNAL_TAGS)
    assert internal_config(None, call="c")["metadata"] == {"histcompress_call": "c"}


def test_public_tag_constants_are_the_shared_ones() -> None:
    assert rephrase.REPHRASE_TAGS is INTERNAL_TAGS
    assert INTERNAL_TAGS == ("langchain_histcompress:internal", "nostream")


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (RateLimitError("429"), True),
        (InternalServerError("500"), True),
        (AuthenticationError("401"), False),
        (APIConnectionError("reset"), True),
        (HTTPStatusError(503), True),
        (HTTPStatusError(429), True),
        (HTTPStatusError(403), False),
        (HTTPStatusError(400), False),
        (TimeoutError("slow"), True),
        (ModelTimeoutError("no answer"), True),
        (ConnectionResetError("reset"), True),
        (ValueError("bug"), False),
        (KeyError("bug"), False),
        (SummarizationError("ours"), False),
    ],
)
def test_transient_error_classification(exc: BaseException, transient: bool) -> None:
    assert is_transient_error(exc) is transient


def test_transient_cause_is_followed() -> None:
    wrapper = RuntimeError("wrapped")
    wrapper.__cause__ = RateLimitError("429")
    assert is_transient_error(wrapper)


def test_retry_after_and_describe_error() -> None:
    assert retry_after(HTTPStatusError(429, {"retry-after": "2.5"})) == 2.5
    assert retry_after(HTTPStatusError(429, {"retry-after": "soon"})) is None
    assert retry_after(HTTPStatusError(429)) is None
    assert retry_after(RateLimitError("no response")) is None
    assert describe_error(ValueError("x" * 500)) == "ValueError: " + "x" * 200 + "..."


# --------------------------------------------------------------------------- retry policy


def test_retry_policy_backs_off_exponentially_up_to_the_cap() -> None:
    policy = RetryPolicy(max_retries=5, backoff=1.0, max_backoff=5.0)
    error = RateLimitError("slow")
    assert [policy.delay(error, n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 5.0, 5.0, None]


def test_retry_policy_honours_retry_after_within_the_cap() -> None:
    policy = RetryPolicy(max_retries=2, backoff=1.0, max_backoff=30.0)
    assert policy.delay(HTTPStatusError(429, {"retry-after": "7"}), 1) == 7.0
    # a server asking for more than the cap is never retried early: the call gives up
    assert policy.delay(HTTPStatusError(429, {"retry-after": "999"}), 1) is None
    assert "longer than max_backoff" in policy.why_not(
        HTTPStatusError(429, {"retry-after": "999"}), 1
    )
    assert policy.delay(HTTPStatusError(429, {"retry-after-ms": "7500"}), 1) == 7.5
    assert policy.delay(HTTPStatusError(429, {"retry-after": "0"}), 2) == 2.0  # never shorter


def test_retry_policy_never_retries_permanent_errors() -> None:
    policy = RetryPolicy(max_retries=3)
    for error in (AuthenticationError("bad key"), HTTPStatusError(400), ValueError("bug")):
        assert policy.delay(error, 1) is None
    assert RetryPolicy(max_retries=0).delay(RateLimitError("slow"), 1) is None


@pytest.mark.parametrize(
    "kwargs", [{"max_retries": -1}, {"max_retries": 1.5}, {"backoff": -1}, {"max_backoff": -2}]
)
def test_retry_policy_rejects_bad_numbers(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match=next(iter(kwargs))):
        RetryPolicy(**kwargs)


async def test_retry_policy_pauses_with_the_injected_sleeps() -> None:
    sync, asynchronous = Sleeps(), Sleeps()
    pause = RetryPolicy(sleep=sync, async_sleep=asynchronous.asleep).pause(1.5)
    pause.run()
    assert (sync.waits, asynchronous.waits) == ([1.5], [])
    await pause.arun()
    assert (sync.waits, asynchronous.waits) == ([1.5], [1.5])


# --------------------------------------------------------------------------- timeouts


def test_call_with_timeout_returns_raises_and_keeps_context() -> None:
    variable: contextvars.ContextVar[str] = contextvars.ContextVar("variable", default="unset")
    variable.set("caller")
    assert call_with_timeout(variable.get, 5.0) == "caller"
    assert call_with_timeout(lambda: threading.current_thread(), None) is (
        threading.current_thread()
    )

    def provider_timeout() -> None:
        raise TimeoutError("provider")

    with pytest.raises(TimeoutError, match="provider") as info:
        call_with_timeout(provider_timeout, 5.0)
    assert not isinstance(info.value, ModelTimeoutError)  # the call's own error, unchanged


def test_call_with_timeout_gives_up_on_a_hang() -> None:
    release = threading.Event()
    try:
        with pytest.raises(ModelTimeoutError, match=r"summarizer gave no answer within 0\.05 s"):
            call_with_timeout(lambda: release.wait(10), 0.05, what="summarizer")
    finally:
        release.set()


def test_submit_to_worker_reports_through_the_future() -> None:
    error = KeyError("boom")

    def fail() -> None:
        raise error

    assert submit_to_worker(threading.current_thread).result(timeout=5) is not (
        threading.current_thread()
    )
    with pytest.raises(KeyError) as info:
        submit_to_worker(fail).result(timeout=5)
    assert info.value is error


def test_workers_are_reused_and_a_hung_call_keeps_its_own() -> None:
    workers = [call_with_timeout(threading.current_thread, 5.0) for _ in range(20)]
    assert threading.current_thread() not in workers
    assert len(set(workers)) <= 1 + 4  # reused: at most the idle pool plus one
    release = threading.Event()
    with pytest.raises(ModelTimeoutError):
        call_with_timeout(lambda: release.wait(10), 0.05)
    assert call_with_timeout(lambda: 42, 5.0) == 42  # another worker serves meanwhile
    release.set()


def test_workers_retire_when_idle_and_reset_forgets_them() -> None:
    pool = _timeouts._Workers(max_idle=1, idle_seconds=0.2)
    done = threading.Event()
    pool.submit(done.set)
    assert done.wait(5)
    assert wait_until(lambda: len(pool._idle) == 1)  # back in the pool
    assert wait_until(lambda: pool._idle == [])  # then retired after idling
    seen: list[threading.Thread] = []
    pool.submit(lambda: seen.append(threading.current_thread()))
    assert wait_until(lambda: len(pool._idle) == 1)
    pool.reset()  # as after a fork: the old worker is forgotten, and retires
    assert pool._idle == []
    assert wait_until(lambda: not seen[0].is_alive())
    again = threading.Event()
    pool.submit(again.set)
    assert again.wait(5)


async def test_await_with_timeout_returns_and_gives_up() -> None:
    assert await await_with_timeout(asyncio.sleep(0, result=7), 5.0) == 7
    assert await await_with_timeout(asyncio.sleep(0, result=8), None) == 8
    with pytest.raises(ModelTimeoutError, match="rephraser gave no answer"):
        await await_with_timeout(asyncio.Event().wait(), 0.05, what="rephraser")


async def test_await_with_timeout_lets_cancellation_through() -> None:
    started = asyncio.Event()

    async def hang() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(await_with_timeout(hang(), 20.0))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# --------------------------------------------------------------------------- step drivers


def retrying(model: Any, policy: RetryPolicy) -> Steps[tuple[int, str]]:
    """A small operation written once: call, retry transient errors, return the text."""
    attempt = 0
    while True:
        attempt += 1
        try:
            answer = yield ModelCall(model, [HumanMessage("hi")], timeout=5.0)
        except Exception as exc:
            delay = policy.delay(exc, attempt)
            if delay is None:
                raise
            yield policy.pause(delay)
            continue
        return attempt, output_text(answer) or ""


class Flaky:
    """A runnable-like model: raises the scripted errors, then answers."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def _next(self) -> AIMessage:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return AIMessage("ok")

    def invoke(self, input: Any, config: Any = None) -> AIMessage:
        return self._next()

    async def ainvoke(self, input: Any, config: Any = None) -> AIMessage:
        return self._next()


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_sync_and_async_drivers_run_the_same_steps(mode: str) -> None:
    sync, asynchronous = Sleeps(), Sleeps()
    policy = RetryPolicy(max_retries=2, backoff=1.0, sleep=sync, async_sleep=asynchronous.asleep)
    model = Flaky(RateLimitError("a"), HTTPStatusError(503))
    steps = retrying(model, policy)
    result = run_steps(steps) if mode == "sync" else await arun_steps(steps)
    assert result == (3, "ok")
    assert model.calls == 3
    used, unused = (sync, asynchronous) if mode == "sync" else (asynchronous, sync)
    assert (used.waits, unused.waits) == ([1.0, 2.0], [])


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_uncaught_errors_leave_the_driver_unchanged(mode: str) -> None:
    error = AuthenticationError("bad key")
    steps = retrying(Flaky(error), RetryPolicy())
    with pytest.raises(AuthenticationError) as info:
        run_steps(steps) if mode == "sync" else await arun_steps(steps)
    assert info.value is error


def test_base_exceptions_propagate_and_close_the_steps() -> None:
    closed: list[bool] = []

    class Stop(BaseException):
        pass

    def interrupted() -> Steps[None]:
        try:
            yield Twin(_raise_stop, _araise_stop)
        except Exception:  # pragma: no cover - a BaseException is never thrown in
            closed.append(False)
        finally:
            closed.append(True)

    def _raise_stop() -> None:
        raise Stop

    async def _araise_stop() -> None:
        raise Stop

    with pytest.raises(Stop):
        run_steps(interrupted())
    assert closed == [True]


async def test_async_driver_lets_cancellation_through() -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage("never")]))
    started = asyncio.Event()

    async def hang() -> None:
        started.set()
        await asyncio.Event().wait()

    def steps() -> Generator[Any, Any, str]:
        yield Twin(lambda: None, hang)
        yield ModelCall(model, "hi")
        return "finished"

    task = asyncio.create_task(arun_steps(steps()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_model_call_timeout_is_thrown_into_the_steps(mode: str) -> None:
    release = threading.Event()

    async def ahang(_: Any) -> str:
        await asyncio.Event().wait()
        return "never"

    slow = RunnableLambda(lambda _: release.wait(10) and "late", afunc=ahang)

    def steps() -> Steps[str]:
        try:
            yield ModelCall(slow, "hi", timeout=0.05, what="tester")
        except ModelTimeoutError as exc:
            return str(exc)
        return "answered"

    try:
        result = run_steps(steps()) if mode == "sync" else await arun_steps(steps())
    finally:
        release.set()
    assert result == "tester gave no answer within 0.05 s"


async def test_twin_passes_the_same_arguments_to_both_faces() -> None:
    seen: list[tuple[str, Any, Any]] = []

    def sync(x: int, *, y: int) -> int:
        seen.append(("sync", x, y))
        return x + y

    async def asynchronous(x: int, *, y: int) -> int:
        seen.append(("async", x, y))
        return x * y

    twin = Twin(sync, asynchronous, 3, y=4)
    assert (twin.run(), await twin.arun()) == (7, 12)
    assert seen == [("sync", 3, 4), ("async", 3, 4)]


def test_pause_of_zero_still_goes_through_the_sleep() -> None:
    sleeps = Sleeps()
    assert run_steps(_pause_then("x", Pause(0.0, sleeps))) == "x"
    assert sleeps.waits == [0.0]


def _pause_then(value: str, pause: Pause) -> Steps[str]:
    yield pause
    return value


# --------------------------------------------------------------------------- reading answers


@pytest.mark.parametrize(
    ("output", "separator", "expected"),
    [
        ("plain", "", "plain"),
        (AIMessage("message"), "", "message"),
        (
            AIMessage([{"type": "text", "text": "a"}, "b", {"type": "output_text", "text": "c"}]),
            "",
            "abc",
        ),
        (AIMessage([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]), "\n", "a\nb"),
        (AIMessage([{"type": "reasoning", "reasoning": "{x}"}, {"type": "image_url"}]), "", ""),
        ([{"type": "text", "text": "raw blocks"}], "", "raw blocks"),
        (AIMessage([]), "", ""),
        ({"ConversationSummary": "x"}, "", None),
        (None, "", None),
        (42, "", None),
    ],
)
def test_output_text(output: object, separator: str, expected: str | None) -> None:
    assert output_text(output, separator=separator) == expected


def test_strip_think_removes_every_reasoning_block() -> None:
    text = "<think>plan {a}</think>[1]<THINK>\nmore\n</THINK> done"
    assert strip_think(text) == "[1] done"
    assert strip_think("no reasoning") == "no reasoning"


def test_json_fenced_blocks_keep_only_json_or_untagged_fences() -> None:
    text = "```json\n[1]\n```\n```JSON5\n{}\n```\n```jsonc\n2\n```\n```python\nx = [3]\n```\n```\n4\n```"
    assert [b.strip() for b in json_fenced_blocks(text)] == ["[1]", "{}", "2", "4"]
    assert json_fenced_blocks("no fence") == []


def test_json_values_lenient_and_strict() -> None:
    text = 'cite [1], then {"op": "ADD"} and [{"op": "DELETE"}] {trunc'
    assert list(json_values(text)) == [[1], {"op": "ADD"}, [{"op": "DELETE"}]]
    assert list(json_values(text, openers="{")) == [{"op": "ADD"}, {"op": "DELETE"}]
    strict = json_values("[1] then [oops", strict=True)
    assert next(strict) == [1]
    with pytest.raises(ValueError, match="invalid or truncated JSON at character 9"):
        next(strict)


def test_json_values_gives_up_after_many_broken_openers() -> None:
    text = "{" * 200 + ' {"a": 1}'
    assert list(json_values(text, openers="{")) == []
    assert list(json_values("{" * 10 + ' {"a": 1}', openers="{")) == [{"a": 1}]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('  \n{"a": 1}\n', {"a": 1}),
        ('Sure!\n```json\n{"a": 1}\n```', {"a": 1}),
        ('```\n{"a": 1}\n```', {"a": 1}),
        ('Here it is: {"a": {"b": [1, 2]}} Hope this helps!', {"a": {"b": [1, 2]}}),
        ('[{"a": 1}]', {"a": 1}),
        ('{"a": ', None),
        ('```json\n{"a": 1', None),
        ("just prose", None),
        ("", None),
        ("[1, 2]", None),
    ],
)
def test_find_json_object(text: str, expected: dict[str, Any] | None) -> None:
    assert find_json_object(text) == expected


@given(
    obj=st.dictionaries(
        st.text(max_size=8),
        st.one_of(st.integers(), st.text(max_size=12), st.lists(st.booleans(), max_size=3)),
        min_size=1,
        max_size=4,
    ),
    before=st.text(alphabet="abc XYZ.,!:\n", max_size=30),
    after=st.text(alphabet="abc XYZ.,!:\n", max_size=30),
    fenced=st.booleans(),
)
def test_find_json_object_finds_an_embedded_object(
    obj: dict[str, Any], before: str, after: str, fenced: bool
) -> None:
    body = json.dumps(obj, ensure_ascii=False)
    if fenced:
        body = f"```json\n{body}\n```"
    assert find_json_object(before + body + after) == obj


@pytest.mark.parametrize(
    ("text", "refusal", "user_voice_refusal"),
    [
        ("I'm sorry, but I can't help with that.", True, True),
        ("I’m sorry", True, True),
        ("I am sorry, no.", True, True),
        ("Sorry, I cannot do that.", True, True),
        ("I apologise, but no.", True, True),
        ("As an AI language model, I cannot.", True, True),
        ("I can't help with that request.", True, True),
        ('  "I cannot assist with this request.', True, False),
        ("I won't do that.", True, False),
        ("I am unable to summarize this.", True, False),
        ("I do not feel comfortable with this.", True, False),
        ("I cannot log in to my account; how do I reset my password?", True, False),
        ("Sorry, is Lisbon the capital of Portugal?", True, False),
        ("What is the population of Lisbon?", False, False),
        ("Ada likes green tea.", False, False),
        ("The user said sorry.", False, False),
        ("As an aide to the mayor, what are my duties?", False, False),
    ],
)
def test_is_refusal(text: str, refusal: bool, user_voice_refusal: bool) -> None:
    assert is_refusal(text) is refusal
    assert is_refusal(text, user_voice=True) is user_voice_refusal


def test_model_call_carries_the_internal_config_to_the_model() -> None:
    seen: list[dict[str, Any]] = []

    def record(messages: list[BaseMessage], config: Any) -> str:
        seen.append(config)
        return "ok"

    runnable = RunnableLambda(record)
    config = internal_config({"tags": ["user"]}, call="probe", run_name="probe_run")
    assert ModelCall(runnable, [HumanMessage("hi")], config).run() == "ok"
    assert set(INTERNAL_TAGS) <= set(seen[0]["tags"])
    assert "user" in seen[0]["tags"]
    assert seen[0]["metadata"]["histcompress_call"] == "probe"


# --------------------------------------------------------------------------- retry budget & answers


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after-ms": "junk", "retry-after": "3"}, 3.0),
        ({"retry-after": "Thu, 01 Jan 1970 00:02:00 GMT"}, 20.0),
        ({"retry-after": "Thu, 01 Jan 1970 00:00:10 GMT"}, 0.0),  # already past
        ({"retry-after": "-4"}, None),
        ({"retry-after": "Thu, 01 Jan 1970 00:02:00"}, 20.0),
        ({"retry-after": "not a date"}, None),
    ],
)
def test_retry_after_reads_every_form(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after(HTTPStatusError(429, headers), now=100.0) == expected


def _message(**kwargs: Any) -> AIMessage:
    return AIMessage(kwargs.pop("content", "text"), **kwargs)


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (
            _message(response_metadata={"finish_reason": "length"}),
            answer_checks.TruncatedAnswerError,
        ),
        (
            _message(response_metadata={"stop_reason": "max_tokens"}),
            answer_checks.TruncatedAnswerError,
        ),
        (
            _message(content="", additional_kwargs={"refusal": "No."}),
            answer_checks.RefusedAnswerError,
        ),
        (
            _message(content=[{"type": "refusal", "refusal": "No."}]),
            answer_checks.RefusedAnswerError,
        ),
        (
            _message(response_metadata={"finish_reason": "content_filter"}),
            answer_checks.RefusedAnswerError,
        ),
        (
            _message(
                response_metadata={"finish_reason": "stop"}, additional_kwargs={"refusal": None}
            ),
            None,
        ),
        ("plain text", None),
    ],
)
def test_check_answer(message: object, error: type[Exception] | None) -> None:
    if error is None:
        answer_checks.check_answer(message)
    else:
        with pytest.raises(error):
            answer_checks.check_answer(message)


def test_internal_model_turns_off_client_retries_and_streaming() -> None:
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(
        model="gpt-4o-mini", api_key="sk-test", max_retries=4, streaming=True, max_tokens=100
    )
    copy = _model_edge.internal_model(model, timeout=3.0, max_output_tokens=500)
    assert isinstance(copy, ChatOpenAI)
    assert (copy.root_client.max_retries, copy.root_async_client.max_retries) == (0, 0)
    assert copy.root_client.timeout == 3.5  # half a grace after the package's own timeout
    assert copy.client is not model.client
    assert (copy.streaming, copy.disable_streaming, copy.max_tokens) == (False, True, 100)
    assert (model.root_client.max_retries, model.streaming, model.disable_streaming) == (
        4,
        True,
        False,
    )
    bound = _model_edge.internal_model(model.bind(temperature=0), max_output_tokens=50)
    assert bound.bound.max_tokens == 50  # type: ignore[attr-defined]
    assert bound.kwargs == {"temperature": 0}  # type: ignore[attr-defined]
    plain = RunnableLambda(lambda x: x)
    assert _model_edge.internal_model(plain, timeout=1.0) is plain


def test_model_call_turns_unusable_answers_into_typed_errors() -> None:
    cut = GenericFakeChatModel(
        messages=iter([AIMessage("And how", response_metadata={"finish_reason": "length"})])
    )
    with pytest.raises(answer_checks.TruncatedAnswerError):
        ModelCall(cut, "q").run()

    def garbled(_: Any) -> Any:
        raise json.JSONDecodeError("bad", "{", 0)

    with pytest.raises(answer_checks.MalformedAnswerError):
        ModelCall(RunnableLambda(garbled), "q").run()
    raw = AIMessage("{")
    structured = RunnableLambda(
        lambda _: {"raw": raw, "parsed": None, "parsing_error": ValueError("x")}
    )
    with pytest.raises(answer_checks.MalformedAnswerError, match="did not parse"):
        ModelCall(structured, "q", structured=True).run()
    good = RunnableLambda(lambda _: {"raw": raw, "parsed": {"a": 1}, "parsing_error": None})
    assert ModelCall(good, "q", structured=True).run() == {"a": 1}


def test_failures_are_recorded_per_context() -> None:
    with _model_edge.recording_failures() as outer:
        with _model_edge.recording_failures() as inner:
            summarizer = summary.Summarizer(
                GenericFakeChatModel(messages=iter([])),
                token_counter="approximate",
                max_retries=0,
            )
            with pytest.raises(SummarizationError):
                summarizer.summarize([HumanMessage("hi", id="h1")])
        _model_edge.report_failure("rephrase", "timeout", 1)
    assert [f.call for f in inner] == ["summarize"]
    assert [f.call for f in outer] == ["summarize", "rephrase"]
    _model_edge.report_failure("rephrase", "timeout", 1)  # nobody records now
    assert len(outer) == 2
