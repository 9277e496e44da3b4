"""The model edge: the one policy every internal model call (summarize, extract, rephrase) keeps.

* the config of internal calls (`INTERNAL_TAGS`, `internal_config`): tags that keep their
  tokens out of the user's stream, a run name, call metadata, a copy of the caller's config;
* error handling: `is_transient_error`, `retry_after`, `describe_error` and the bounded
  `RetryPolicy`, the package's whole retry budget (`internal_model` turns client retries off);
* one request: the `ModelCall` effect, under a per-call timeout, with its answer checked
  (`answer_checks`); operations are step generators run by `steps.run_steps`;
* failure accounting: `report_failure` records every internal call that gave up into the
  lists opened by `recording_failures`.

The reasoning behind each rule is in ``docs/design/edge.md``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import Any, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable, RunnableBinding, RunnableConfig

from langchain_histcompress.core.errors import ConfigurationError, SummarizationError
from langchain_histcompress.edge._timeouts import (
    ModelTimeoutError,
    abandon_grace,
    await_with_timeout,
    call_with_timeout,
)
from langchain_histcompress.edge.answer_checks import (
    MalformedAnswerError,
    _unusable_from,
    check_answer,
)
from langchain_histcompress.edge.steps import Pause

__all__ = [
    "INTERNAL_TAGS",
    "TIMEOUT_ERRORS",
    "InternalFailure",
    "ModelCall",
    "RetryPolicy",
    "describe_error",
    "internal_config",
    "internal_model",
    "is_transient_error",
    "model_name",
    "recording_failures",
    "report_failure",
    "retry_after",
]

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- internal calls

INTERNAL_TAGS: tuple[str, ...] = ("langchain_histcompress:internal", "nostream")
"""Tags put on every internal model call (summarize, extract facts, rephrase) so its tokens
are never streamed to the end user (LangGraph's ``messages`` mode skips ``nostream``)."""


def internal_config(
    config: RunnableConfig | None,
    *,
    call: str,
    run_name: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> RunnableConfig:
    """A copy of the caller's config for one internal model call.

    The caller's callbacks, tags, metadata and configurable values are kept; the caller's
    ``run_id`` is dropped (it names the caller's own run), ``run_name`` is replaced (or
    dropped when ``run_name`` is ``None``), `INTERNAL_TAGS` are added and the metadata gets
    ``histcompress_call`` plus ``metadata``. The caller's config is not changed.

    Args:
        config: The caller's runnable config (may be ``None``).
        call: What the call does, recorded as ``metadata["histcompress_call"]``.
        run_name: Run name of the call (visible in tracing).
        metadata: Extra metadata for the call.

    Returns:
        The new config.

    Example:
        >>> caller = {"tags": ["mine"], "run_id": "x", "metadata": {"user": "u1"}}
        >>> child = internal_config(caller, call="summarize", run_name="summarize")
        >>> child["tags"]
        ['mine', 'langchain_histcompress:internal', 'nostream']
        >>> child["metadata"], child["run_name"], "run_id" in child
        ({'user': 'u1', 'histcompress_call': 'summarize'}, 'summarize', False)
        >>> caller["tags"]
        ['mine']
    """
    base: dict[str, Any] = dict(config or {})
    base.pop("run_id", None)
    base.pop("run_name", None)
    if run_name is not None:
        base["run_name"] = run_name
    tags = list(base.get("tags") or [])
    base["tags"] = [*tags, *(tag for tag in INTERNAL_TAGS if tag not in tags)]
    base["metadata"] = {
        **(base.get("metadata") or {}),
        "histcompress_call": call,
        **(metadata or {}),
    }
    return cast(RunnableConfig, base)


def model_name(model: object) -> str:
    """The model's name as providers expose it, else its class name.

    Example:
        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> model_name(GenericFakeChatModel(messages=iter([])))
        'GenericFakeChatModel'
    """
    for attr in ("model_name", "model", "model_id", "deployment_name"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


# --------------------------------------------------------------------------- errors

_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
_TRANSIENT_NAMES = frozenset(
    {
        "RateLimitError",
        "APITimeoutError",
        "APIConnectionError",
        "InternalServerError",
        "ServiceUnavailableError",
        "ServiceUnavailable",
        "OverloadedError",
        "TooManyRequests",
        "ResourceExhausted",
        "DeadlineExceeded",
        "TimeoutException",
        "ConnectTimeout",
        "ReadTimeout",
        "WriteTimeout",
        "PoolTimeout",
        "ConnectError",
        "ReadError",
        "WriteError",
        "RemoteProtocolError",
        "NetworkError",
        "ProtocolError",
        "Timeout",
    }
)
_PERMANENT_NAMES = frozenset(
    {
        "AuthenticationError",
        "PermissionDeniedError",
        "PermissionDenied",
        "Unauthenticated",
        "BadRequestError",
        "NotFoundError",
        "UnprocessableEntityError",
        "InvalidRequestError",
        "ContentFilterFinishReasonError",
        "LengthFinishReasonError",
    }
)

TIMEOUT_ERRORS: tuple[type[BaseException], ...] = (
    TimeoutError,
    asyncio.TimeoutError,
    concurrent.futures.TimeoutError,
)
"""Every timeout exception class (distinct classes before Python 3.11)."""


def _status_code(exc: BaseException) -> int | None:
    for holder in (exc, getattr(exc, "response", None)):
        for attr in ("status_code", "status", "http_status"):
            value = getattr(holder, attr, None)
            if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
                return value
    return None


def is_transient_error(exc: BaseException) -> bool:
    """Whether a model error is worth retrying (rate limit, 5xx, timeout, dropped connection).

    Provider-agnostic: looks at an HTTP status (``status_code`` / ``status`` on the exception
    or its ``response``), then at the class names in the exception's hierarchy (openai, httpx,
    anthropic, google), then at the built-in ``TimeoutError`` / ``ConnectionError``. Auth,
    permission and bad-request errors are never transient. The direct cause is checked too.

    Example:
        >>> class RateLimitError(Exception): ...
        >>> is_transient_error(RateLimitError("slow down")), is_transient_error(KeyError("x"))
        (True, False)
    """
    for candidate in (exc, exc.__cause__):
        if candidate is None or isinstance(candidate, SummarizationError):
            continue
        status = _status_code(candidate)
        if status is not None:
            return status in _TRANSIENT_STATUS or status >= 500
        names = {cls.__name__ for cls in type(candidate).__mro__}
        if names & _PERMANENT_NAMES:
            return False
        if names & _TRANSIENT_NAMES:
            return True
        if isinstance(candidate, TimeoutError | ConnectionError | asyncio.TimeoutError):
            return True
    return False


def _header(headers: object, name: str) -> str | None:
    getter = getattr(headers, "get", None)
    if not callable(getter):
        return None
    try:
        value = getter(name)
    except Exception:  # a foreign headers object
        return None
    return value if isinstance(value, str) else None


def retry_after(exc: BaseException, *, now: float | None = None) -> float | None:
    """The server's wait hint in seconds (from ``exc.response.headers``), if any.

    Read in this order: ``retry-after-ms`` (milliseconds, as OpenAI sends it), then
    ``retry-after`` as seconds or as an HTTP date (relative to ``now``, default the wall
    clock; a date in the past means 0). Unreadable values are ignored.

    Example:
        >>> class Response:
        ...     headers = {"retry-after": "7"}
        >>> class RateLimitError(Exception):
        ...     response = Response()
        >>> retry_after(RateLimitError()), retry_after(ValueError())
        (7.0, None)
        >>> Response.headers = {"retry-after-ms": "250"}
        >>> retry_after(RateLimitError())
        0.25
        >>> Response.headers = {"retry-after": "Thu, 01 Jan 1970 00:01:40 GMT"}
        >>> retry_after(RateLimitError(), now=90.0)
        10.0
    """
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    millis = _header(headers, "retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            value = -1.0
        if value >= 0 and value == value:  # not NaN
            return value
    text = _header(headers, "retry-after")
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # HTTP dates are always GMT
            when = when.replace(tzinfo=timezone.utc)
        current = time.time() if now is None else now
        return max(0.0, when.timestamp() - current)
    return seconds if seconds >= 0 else None


def describe_error(exc: BaseException) -> str:
    """``Type: message`` of an error for error messages, the message cut to 200 characters.

    Example:
        >>> describe_error(ValueError("bad")), describe_error(KeyError())
        ('ValueError: bad', 'KeyError')
    """
    text = str(exc)
    if len(text) > 200:
        text = text[:200] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries of transient model errors with exponential backoff.

    Attempts are numbered from 1. After attempt ``n`` fails with a transient error and
    ``n <= max_retries``, the wait is ``backoff * 2 ** (n - 1)`` (at most ``max_backoff``),
    raised to the server's `retry_after` hint when that is longer. A hint longer than
    ``max_backoff`` is never cut short: the call gives up instead (retrying before the
    server allows only buys another rejection). A sync timeout whose request could not be
    stopped (`ModelTimeoutError.abandoned` is false) is not retried either: the request may
    still be answered and billed, and a retry would send it twice.

    Example:
        >>> policy = RetryPolicy(max_retries=2, backoff=1.0, max_backoff=3.0)
        >>> [policy.delay(TimeoutError(), n) for n in (1, 2, 3)]
        [1.0, 2.0, None]
        >>> policy.delay(KeyError("bug"), 1) is None
        True
        >>> policy.why_not(KeyError("bug"), 1)
        'not retried'
    """

    max_retries: int = 2
    """Retries after the first attempt (0: a single attempt)."""
    backoff: float = 1.0
    """Wait before the first retry, in seconds; doubles per retry."""
    max_backoff: float = 30.0
    """Upper bound on one wait; a server asking for a longer wait ends the retries."""
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    """Sync sleep function (injectable for tests)."""
    async_sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, compare=False)
    """Async sleep function (injectable for tests)."""

    def __post_init__(self) -> None:
        """Check the numbers (callers validate their own parameters first)."""
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int):
            msg = f"max_retries must be an integer >= 0, got {self.max_retries!r}"
            raise ConfigurationError(msg)
        for name, value in (
            ("max_retries", self.max_retries),
            ("backoff", self.backoff),
            ("max_backoff", self.max_backoff),
        ):
            if value < 0:
                msg = f"{name} must be >= 0, got {value!r}"
                raise ConfigurationError(msg)

    def delay(self, exc: BaseException, attempt: int) -> float | None:
        """Seconds to wait before retrying after ``attempt`` failed with ``exc``.

        Returns:
            The wait, or ``None`` when ``exc`` is not transient, no retry is left, or the
            server asked for a wait longer than ``max_backoff``.
        """
        if not is_transient_error(exc) or attempt > self.max_retries:
            return None
        if isinstance(exc, ModelTimeoutError) and not exc.abandoned:
            return None
        wait = min(self.backoff * 2.0 ** (attempt - 1), self.max_backoff)
        hinted = retry_after(exc)
        if hinted is not None:
            if hinted > self.max_backoff:
                return None
            wait = max(wait, hinted)
        return wait

    def why_not(self, exc: BaseException, attempt: int) -> str:
        """Why `delay` gave ``None`` after ``attempt`` (for error messages)."""
        if not is_transient_error(exc):
            return "not retried"
        if isinstance(exc, ModelTimeoutError) and not exc.abandoned:
            return (
                "the timed-out request could not be stopped (it may still be answered and "
                "billed); not retried, so it is never sent twice"
            )
        hinted = retry_after(exc)
        if hinted is not None and hinted > self.max_backoff and attempt <= self.max_retries:
            return (
                f"the server asked to wait {hinted:.3g} s, longer than max_backoff "
                f"({self.max_backoff:.3g} s); not retried"
            )
        return f"after {attempt} attempts"

    def pause(self, seconds: float) -> Pause:
        """The `Pause` effect waiting ``seconds`` with this policy's sleep functions."""
        return Pause(seconds, self.sleep, self.async_sleep)


# --------------------------------------------------------------------------- the retry budget


def _client_without_retries(client: object, timeout: float | None) -> object | None:
    """``client.with_options(max_retries=0[, timeout=...])`` for OpenAI-style SDK clients."""
    with_options = getattr(client, "with_options", None)
    if client is None or not callable(with_options):
        return None
    options: dict[str, Any] = {"max_retries": 0}
    if timeout is not None:
        options["timeout"] = timeout
    try:
        return cast(object, with_options(**options))
    except Exception:  # pragma: no cover - an SDK without these options
        logger.debug("the model client took no per-call options; its own retries remain")
        return None


def _chat_model_for_internal_call(
    model: BaseChatModel, timeout: float | None, max_output_tokens: int | None
) -> BaseChatModel:
    fields = type(model).model_fields
    updates: dict[str, Any] = {"disable_streaming": True}
    if "streaming" in fields and getattr(model, "streaming", False):
        updates["streaming"] = False
    if "max_retries" in fields and getattr(model, "max_retries", None) != 0:
        updates["max_retries"] = 0
    if max_output_tokens is not None and "max_tokens" in fields:
        current = getattr(model, "max_tokens", None)
        if not isinstance(current, int) or isinstance(current, bool) or current > max_output_tokens:
            updates["max_tokens"] = max_output_tokens
    # The client gives up half a grace after the package's own timeout: the package's timeout
    # always fires first (a typed ModelTimeoutError whatever the load), and the client then
    # closes the connection within the grace, which frees the worker thread.
    client_timeout = None if timeout is None else timeout + abandon_grace(timeout) / 2
    for root, resource in (("root_client", "client"), ("root_async_client", "async_client")):
        if root in fields:
            client = _client_without_retries(getattr(model, root, None), client_timeout)
            if client is not None:
                updates[root] = client
                updates[resource] = client.chat.completions  # type: ignore[attr-defined]
    return model.model_copy(update=updates)


def internal_model(
    runnable: Runnable[Any, Any],
    *,
    timeout: float | None = None,
    max_output_tokens: int | None = None,
) -> Runnable[Any, Any]:
    """The model as one internal call uses it: no client retries, no streaming, capped output.

    The package owns the retry budget of its internal calls. For a LangChain chat model (or
    a binding of one) a shallow copy is returned, made per call, so later changes to the
    caller's model are seen, with:

    * ``max_retries=0`` where the model has that field, and for OpenAI-style clients
      (``ChatOpenAI``, ``AzureChatOpenAI``: ``root_client.with_options``) a client that
      never retries and gives up shortly after ``timeout`` seconds without a byte from the
      server (it closes the connection; the package's own timeout fires first and stays
      the overall bound);
    * streaming off (``disable_streaming``): one complete answer carrying its usage and
      finish reason, even while a graph streams;
    * ``max_tokens`` lowered to ``max_output_tokens`` where the model has that field.

    Anything else (a plain runnable, a chain) is returned unchanged. State a model keeps on
    itself between calls stays on the copy: a test double that answers from a list should
    share an iterator (``GenericFakeChatModel(messages=iter(...))``), not keep an index
    (``FakeMessagesListChatModel`` would repeat its first answer).

    Example:
        >>> from langchain_openai import ChatOpenAI
        >>> model = ChatOpenAI(model="gpt-4o-mini", api_key="sk-test", max_retries=5)
        >>> copy = internal_model(model, timeout=20.0, max_output_tokens=300)
        >>> copy.root_client.max_retries, copy.max_tokens, copy.disable_streaming
        (0, 300, True)
        >>> model.root_client.max_retries, model.max_tokens
        (5, None)
    """
    if isinstance(runnable, BaseChatModel):
        return _chat_model_for_internal_call(runnable, timeout, max_output_tokens)
    if isinstance(runnable, RunnableBinding) and isinstance(runnable.bound, BaseChatModel):
        bound = _chat_model_for_internal_call(runnable.bound, timeout, max_output_tokens)
        return runnable.model_copy(update={"bound": bound})
    return runnable


# --------------------------------------------------------------------------- failure accounting


@dataclass(frozen=True)
class InternalFailure:
    """One internal call that gave up (its caller then failed or fell back)."""

    call: str
    """What the call did: ``summarize``, ``extract_facts`` or ``rephrase``."""
    error: str
    """Why it gave up (error class or unusable-answer reason; never content)."""
    attempts: int
    """Requests it made."""


_FAILURE_SINKS: contextvars.ContextVar[tuple[list[InternalFailure], ...]] = contextvars.ContextVar(
    "histcompress_failure_sinks", default=()
)


@contextmanager
def recording_failures() -> Iterator[list[InternalFailure]]:
    """Collect the internal calls that give up inside the block (this context only).

    Example:
        >>> with recording_failures() as failures:
        ...     report_failure("summarize", "AuthenticationError", 1)
        >>> [(f.call, f.error) for f in failures]
        [('summarize', 'AuthenticationError')]
    """
    failures: list[InternalFailure] = []
    token = _FAILURE_SINKS.set((*_FAILURE_SINKS.get(), failures))
    try:
        yield failures
    finally:
        _FAILURE_SINKS.reset(token)


def report_failure(call: str, error: str, attempts: int) -> None:
    """Record that an internal call gave up, in every open `recording_failures` list.

    Example:
        >>> report_failure("rephrase", "timeout", 1)  # nobody records: nothing happens
    """
    failure = InternalFailure(call, error, attempts)
    for sink in _FAILURE_SINKS.get():
        sink.append(failure)


# --------------------------------------------------------------------------- one request


@dataclass(frozen=True)
class ModelCall:
    """Effect: one request of an internal call, within an optional timeout.

    The model is adapted per request (`internal_model`: no client retries, no streaming,
    ``max_output_tokens``) and its answer is checked (`check_answer`): a cut-off, refused or
    malformed answer raises an `UnusableAnswerError`. With ``structured`` the runnable is a
    ``with_structured_output(..., include_raw=True)`` chain: its raw answer is checked, a
    parsing error is an `UnusableAnswerError`, and the parsed value is the result.

    Example:
        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> from langchain_core.messages import AIMessage
        >>> from langchain_histcompress.core.answer_text import find_json_object, output_text
        >>> from langchain_histcompress.edge.steps import run_steps
        >>> model = GenericFakeChatModel(messages=iter([AIMessage('Sure: {"answer": 42}')]))
        >>> def ask(question):
        ...     answer = yield ModelCall(model, question, internal_config(None, call="demo"))
        ...     return find_json_object(output_text(answer) or "")
        >>> run_steps(ask("What is six times seven?"))
        {'answer': 42}
    """

    runnable: Runnable[Any, Any]
    """The model to call."""
    input: Any
    """Its input (usually a list of messages)."""
    config: RunnableConfig | None = None
    """The config of the call (see `internal_config`)."""
    timeout: float | None = None
    """Seconds to wait for the answer (``None``: no limit)."""
    what: str = "model"
    """Names the caller in timeout messages."""
    max_output_tokens: int | None = None
    """Output cap of the request (``max_tokens``, where the model has it)."""
    structured: bool = False
    """The runnable answers ``{"raw", "parsed", "parsing_error"}`` (structured output)."""

    def _runnable(self) -> Runnable[Any, Any]:
        return internal_model(
            self.runnable, timeout=self.timeout, max_output_tokens=self.max_output_tokens
        )

    def _result(self, output: Any) -> Any:
        if not self.structured or not isinstance(output, Mapping) or "raw" not in output:
            check_answer(output)
            return output
        check_answer(output.get("raw"))
        error = output.get("parsing_error")
        if error is not None:
            unusable = _unusable_from(error) if isinstance(error, Exception) else None
            if unusable is not None:
                raise unusable
            msg = f"the structured answer did not parse ({type(error).__name__})"
            raise MalformedAnswerError(msg)
        return output.get("parsed")

    def run(self) -> Any:
        """``invoke`` (on a worker thread when there is a timeout)."""
        runnable = self._runnable()
        with _typed_unusable_answers():
            output = call_with_timeout(
                lambda: runnable.invoke(self.input, self.config), self.timeout, what=self.what
            )
        return self._result(output)

    async def arun(self) -> Any:
        """``await ainvoke`` (under ``asyncio.wait_for`` when there is a timeout)."""
        runnable = self._runnable()
        with _typed_unusable_answers():
            output = await await_with_timeout(
                runnable.ainvoke(self.input, self.config), self.timeout, what=self.what
            )
        return self._result(output)


@contextmanager
def _typed_unusable_answers() -> Iterator[None]:
    """Re-raise a client error that stands for an unusable answer as `UnusableAnswerError`."""
    try:
        yield
    except Exception as exc:
        unusable = _unusable_from(exc)
        if unusable is None:
            raise
        raise unusable from exc
