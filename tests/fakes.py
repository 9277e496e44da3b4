"""Test doubles shared by the unit and integration tests.

Scripted chat models (answer by script, raise, hang, stream word by word, record every
prompt), the fake provider errors and sleeps the retry tests use, and the small
conversations many tests build.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    BaseCallbackHandler,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import Field

from langchain_histcompress.core.render import escape_data, read_turn_lines
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.edge.compressor import RoundCompressor

# --------------------------------------------------------------------------- package prompts

_MESSAGE_ID = re.compile(r'<message id="([^"]*)"')


def prompt_ids(prompt: Sequence[BaseMessage]) -> list[str]:
    """Ids of the conversation messages shown in a summary prompt (``[id role]`` lines) or
    an extraction prompt (``<message id=...>`` elements)."""
    text = str(prompt[-1].content)
    return _MESSAGE_ID.findall(text) + [i for i, _role, _body in read_turn_lines(text)]


_MESSAGE_TEXT = re.compile(r"<message [^>]*>([^<]*)</message>")


def prompt_message_texts(prompt: Sequence[BaseMessage]) -> list[str]:
    """Texts of the conversation messages shown in a summary or extraction prompt (long
    ids are shown as aliases there, texts as they are)."""
    text = str(prompt[-1].content)
    lines = [escape_data(body) for _i, _role, body in read_turn_lines(text)]
    return _MESSAGE_TEXT.findall(text) + lines


def prompt_text(prompt: Sequence[BaseMessage]) -> str:
    """Every message of a prompt as one text, one message a line."""
    return "\n".join(str(m.content) for m in prompt)


def summary_json(text: str, **extra: Any) -> str:
    """A summarizer answer in the package's JSON format."""
    return json.dumps({"ConversationSummary": text, **extra})


def echo_summary(prompt: Sequence[BaseMessage]) -> str:
    """A deterministic summary that lists the ids it was shown."""
    return summary_json("covers " + ",".join(prompt_ids(prompt)))


def count_summary(prompt: Sequence[BaseMessage]) -> str:
    """A deterministic summary that says how many messages it was shown."""
    return summary_json(f"summary of {len(prompt_ids(prompt))} messages")


def numbered(answer: Callable[[int], Any]) -> Callable[[Sequence[BaseMessage]], Any]:
    """Answers ``answer(1)``, ``answer(2)``, ... one call after the other."""
    counter = itertools.count(1)
    return lambda _prompt: answer(next(counter))


# --------------------------------------------------------------------------- scripted models


def _chat_result(item: Any) -> ChatResult:
    message = item if isinstance(item, BaseMessage) else AIMessage(content=item)
    return ChatResult(generations=[ChatGeneration(message=message)])


@dataclass(frozen=True)
class Hang:
    """Script item: block until the model is released or ``seconds`` pass, then answer ``then``.

    The answer is a valid summary by default, so a late answer is well formed.
    """

    seconds: float = 30.0
    then: Any = '{"ConversationSummary": "late"}'


class ScriptedChatModel(BaseChatModel):
    """A chat model that answers by script and records every prompt.

    Each call takes the next script item: a string or a list of content blocks is answered
    as an AIMessage, a message is returned as it is (with its tool calls and usage
    metadata), an exception instance is raised, a callable is called with the prompt and
    its result used in its place, a ``Hang`` blocks (until ``release`` is set or its time
    is up) and then answers its ``then``. Once the script is used up, ``respond`` answers.
    """

    script: list[Any] = Field(default_factory=list)
    """What the next calls answer, in order."""
    repeat_last: bool = False
    """Keep the last script item and answer it to every later call."""
    default: Callable[[list[BaseMessage]], Any] | None = None
    """Answers (as a script item would) once the script is used up; None fails the test."""
    fail_with: BaseException | None = None
    """While set, every call raises it (the prompt is still recorded)."""
    prompts: list[list[BaseMessage]] = Field(default_factory=list, repr=False)
    """Every prompt the model was called with, oldest first."""
    release: threading.Event = Field(default_factory=threading.Event)
    """Set it to end every ``Hang``, now and later."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def calls(self) -> int:
        """How many times the model was called."""
        return len(self.prompts)

    def respond(self, prompt: list[BaseMessage]) -> Any:
        """The answer once the script is used up (``default``); subclasses may override."""
        if self.default is None:
            msg = "unexpected model call: the script is used up"
            raise AssertionError(msg)
        return self.default(prompt)

    def _take(self, prompt: list[BaseMessage]) -> Any:
        """Record the prompt and take the next item, callables applied, exceptions raised."""
        self.prompts.append(list(prompt))
        if self.fail_with is not None:
            raise self.fail_with
        if self.repeat_last and len(self.script) == 1:
            item = self.script[0]
        elif self.script:
            item = self.script.pop(0)
        else:
            item = self.respond(prompt)
        return self._unwrap(item, prompt)

    @staticmethod
    def _unwrap(item: Any, prompt: list[BaseMessage]) -> Any:
        while callable(item):
            item = item(prompt)
        if isinstance(item, BaseException):
            raise item
        return item

    def _answer(self, prompt: list[BaseMessage]) -> Any:
        item = self._take(prompt)
        while isinstance(item, Hang):
            self.release.wait(item.seconds)
            item = self._unwrap(item.then, prompt)
        return item

    async def _aanswer(self, prompt: list[BaseMessage]) -> Any:
        item = self._take(prompt)
        while isinstance(item, Hang):
            loop = asyncio.get_running_loop()
            deadline = loop.time() + item.seconds
            while not self.release.is_set() and loop.time() < deadline:
                await asyncio.sleep(0.005)
            item = self._unwrap(item.then, prompt)
        return item

    # stop words and callbacks play no part in a scripted answer
    def _generate(self, messages: list[BaseMessage], *_: Any, **__: Any) -> ChatResult:
        return _chat_result(self._answer(messages))

    async def _agenerate(self, messages: list[BaseMessage], *_: Any, **__: Any) -> ChatResult:
        return _chat_result(await self._aanswer(messages))


class StreamingChatModel(ScriptedChatModel):
    """A scripted model that streams its text answers word by word (spaces kept)."""

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        item = self._answer(messages)
        text = str(item.content if isinstance(item, BaseMessage) else item)
        for token in re.split(r"(\s+)", text):
            if token:
                chunk = ChatGenerationChunk(message=AIMessageChunk(content=token))
                if run_manager is not None:
                    run_manager.on_llm_new_token(token, chunk=chunk)
                yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._stream(messages, stop, None, **kwargs):
            if run_manager is not None:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


class ScriptedSummarizer(ScriptedChatModel):
    """A scripted summarizer: once its script is used up it lists the ids it was shown."""

    default: Callable[[list[BaseMessage]], Any] | None = echo_summary
    """Answers once the script is used up (``echo_summary``)."""
    model_name: str = "scripted-summarizer"
    """The name the package reads off the model."""


class CountingSummarizer(ScriptedChatModel):
    """A summarizer that says how many messages it was shown; ``fail_with`` makes it fail."""

    default: Callable[[list[BaseMessage]], Any] | None = count_summary
    """Answers once the script is used up (``count_summary``)."""


async def cancel_once_called(
    model: ScriptedChatModel, call: Coroutine[Any, Any, Any]
) -> asyncio.Task[Any]:
    """Run ``call`` as a task, cancel it as soon as ``model`` was called, return the task."""
    task = asyncio.create_task(call)
    while not model.calls:
        await asyncio.sleep(0)
    task.cancel()
    return task


# --------------------------------------------------------------------------- shared control


class Control:
    """Shared, mutable behaviour of ControlledSummarizer models (tests flip it between turns).

    ``fault`` is None (answer ``summary <n>``), a callable making the exception to raise, an
    AIMessage or a text to answer, or ``"hang"`` / ``"block"`` (wait for ``release``; a hang
    then answers ``late``, a block answers as usual).
    """

    def __init__(self) -> None:
        self.fault: Any = None
        self.calls = 0
        self.started = threading.Event()
        self.release = threading.Event()
        self.barrier: threading.Barrier | None = None
        self.counter = itertools.count(1)
        self.lock = threading.Lock()

    def answer(self) -> str:
        with self.lock:
            n = next(self.counter)
        return summary_json(f"summary {n}")


class ControlledSummarizer(ScriptedChatModel):
    """A summarizer that answers valid JSON unless its Control says otherwise.

    It counts its calls on the Control (``control.calls``); ``prompts`` stays empty.
    """

    control: Any
    """The Control it follows (several models may share one)."""

    def _begin(self) -> None:
        self.control.calls += 1
        self.control.started.set()

    def _reply(self) -> Any:
        fault = self.control.fault
        if callable(fault):
            raise fault()
        if isinstance(fault, AIMessage) or (
            isinstance(fault, str) and fault not in ("hang", "block")
        ):
            return fault
        return self.control.answer()

    def _answer(self, prompt: list[BaseMessage]) -> Any:
        self._begin()
        if self.control.barrier is not None:
            self.control.barrier.wait(timeout=30)
        if self.control.fault in ("hang", "block"):
            self.control.release.wait(timeout=30)
            if self.control.fault == "hang":
                return "late"
        return self._reply()

    async def _aanswer(self, prompt: list[BaseMessage]) -> Any:
        self._begin()
        if self.control.fault in ("hang", "block"):
            while not self.control.release.is_set():
                await asyncio.sleep(0.01)
            if self.control.fault == "hang":
                return "late"
        return self._reply()


async def _no_sleep(_: float) -> None:
    return None


def controlled_compressor(control: Control, **kw: Any) -> RoundCompressor:
    """A quick RoundCompressor (folds once 3 rounds are pending, keeps 1) over a
    ControlledSummarizer."""
    options: dict[str, Any] = {
        "trigger": ("rounds", 3),
        "keep": ("rounds", 1),
        "token_counter": "approximate",
        "max_retries": 1,
        "timeout": 0.5,
        "retry_backoff": 0,
        "max_summary_tokens": 300,
        "sleep": lambda _: None,
        "async_sleep": _no_sleep,
        **kw,
    }
    return RoundCompressor(ControlledSummarizer(control=control), **options)


# --------------------------------------------------------------------------- agent middleware


def model_request(
    model: Any,
    messages: Sequence[BaseMessage],
    state: dict[str, Any],
    system: BaseMessage | None = None,
) -> Any:
    """A ``ModelRequest`` as ``create_agent`` builds it: the system prompt apart, the state's
    messages, the state itself."""
    from langchain.agents.middleware.types import ModelRequest
    from langgraph.runtime import Runtime

    return ModelRequest(
        model=model,
        messages=list(messages) if not isinstance(messages, list) else messages,
        system_message=system,  # type: ignore[arg-type]
        state=state,  # type: ignore[arg-type]
        runtime=Runtime(),
    )


def _sent_and_update(out: Any, sent: list[Any]) -> tuple[Any, dict[str, Any]]:
    from langchain.agents.middleware.types import ExtendedModelResponse

    update: dict[str, Any] = {}
    if isinstance(out, ExtendedModelResponse) and out.command is not None:
        update = dict(out.command.update or {})  # type: ignore[call-overload]
    return (sent[0] if sent else None), update


def through_middleware(middleware: Any, request: Any) -> tuple[Any, dict[str, Any]]:
    """Run ``middleware.wrap_model_call`` around a model call that answers ``ok``: the request
    the model received (``None`` when it was not called) and the state update returned with
    the answer (``{}`` when none)."""
    from langchain.agents.middleware.types import ModelResponse

    sent: list[Any] = []

    def handler(req: Any) -> Any:
        sent.append(req)
        return ModelResponse(result=[AIMessage("ok")])

    return _sent_and_update(middleware.wrap_model_call(request, handler), sent)


async def athrough_middleware(middleware: Any, request: Any) -> tuple[Any, dict[str, Any]]:
    """Async `through_middleware` (``awrap_model_call``)."""
    from langchain.agents.middleware.types import ModelResponse

    sent: list[Any] = []

    async def handler(req: Any) -> Any:
        sent.append(req)
        return ModelResponse(result=[AIMessage("ok")])

    return _sent_and_update(await middleware.awrap_model_call(request, handler), sent)


# --------------------------------------------------------------------------- provider errors


class RateLimitError(Exception):
    status_code = 429


class InternalServerError(Exception):
    status_code = 500


class AuthenticationError(Exception):
    status_code = 401


class APIConnectionError(Exception):
    pass


class _Response:
    def __init__(self, status_code: int, headers: dict[str, str] | None = None) -> None:
        self.status_code = status_code
        self.headers = headers or {}


class HTTPStatusError(Exception):
    """httpx-style: the status lives on ``response``."""

    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"status {status}")
        self.response = _Response(status, headers)


class Sleeps:
    """A sleep (sync and async) that only records how long it was asked to wait."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.waits.append(seconds)


# --------------------------------------------------------------------------- threads


def run_threads(work: Callable[[Any], Any], args: Iterable[Any]) -> list[BaseException]:
    """Run ``work(arg)`` for every arg, each in its own thread, all at once; wait for all.

    Returns what the threads raised, so a test can assert it is empty.
    """
    errors: list[BaseException] = []

    def guarded(arg: Any) -> None:
        try:
            work(arg)
        except BaseException as exc:  # reported to the caller
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(arg,)) for arg in args]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


# --------------------------------------------------------------------------- callbacks


class CallRecorder(BaseCallbackHandler):
    """Records the keyword arguments (tags, metadata, ...) of every chat model start."""

    def __init__(self) -> None:
        self.starts: list[dict[str, Any]] = []

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.starts.append(kwargs)

    @property
    def tags(self) -> list[list[str]]:
        """The tags of each start, oldest first."""
        return [list(start.get("tags") or []) for start in self.starts]


# --------------------------------------------------------------------------- conversations


def exchange(n: int, *, prefix: str = "", short: bool = False) -> list[BaseMessage]:
    """Finished round ``n``: ``question n`` and ``answer n`` (``q{n}`` / ``a{n}`` when
    ``short``), with ids ``{prefix}h{n}`` and ``{prefix}a{n}``."""
    question, answer = (f"q{n}", f"a{n}") if short else (f"question {n}", f"answer {n}")
    return [HumanMessage(question, id=f"{prefix}h{n}"), AIMessage(answer, id=f"{prefix}a{n}")]


def conversation(
    rounds: int | range,
    *,
    system: BaseMessage | None = None,
    prefix: str = "",
    short: bool = False,
) -> list[BaseMessage]:
    """``system`` (when given), then the exchanges of ``rounds`` (``range(rounds)`` for an int)."""
    out: list[BaseMessage] = [] if system is None else [system]
    for n in range(rounds) if isinstance(rounds, int) else rounds:
        out += exchange(n, prefix=prefix, short=short)
    return out


def short_rounds(n: int, prefix: str = "m") -> list[BaseMessage]:
    """``n`` finished rounds ``q{i}`` / ``a{i}`` with ids ``{prefix}h{i}`` / ``{prefix}a{i}``."""
    return conversation(n, prefix=prefix, short=True)


def next_summary(
    covered: set[str] | frozenset[str],
    previous: RunningSummary | None = None,
    text: str = "summary",
) -> RunningSummary:
    """The summary record that follows ``previous`` and also covers ``covered``."""
    before = previous.covered_ids if previous else frozenset()
    return RunningSummary(
        content={"ConversationSummary": text},
        text=text,
        covered_ids=frozenset(covered) | before,
        rounds_covered=(previous.rounds_covered if previous else 0) + 1,
        version=(previous.version if previous else 0) + 1,
        model="fake",
    )
