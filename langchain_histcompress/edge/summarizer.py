"""`Summarizer`: the model call that folds messages into a running summary.

One model call turns the previous summary (passed once, as data) and the next messages
(compact transcript lines, `render.render_turn_lines`) into a new summary, returned only once
it is parsed and validated (non-empty, not a refusal, within ``max_summary_tokens``).
Transient model errors and unusable answers are retried a bounded number of times; every
failure raises `SummarizationError` and changes nothing. The prompt, its configuration and the
answer's parser are in `summary_prompt`.

Summary profiles: ``"conversation"`` (``{"ConversationSummary": "..."}``), ``"code"`` (adds
``Variables``: code is dropped, variables are kept), ``"text"`` (free text), or a pydantic
``BaseModel`` subclass (a JSON object of that schema).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from langchain_core.messages import BaseMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig
from pydantic import (
    BaseModel,
)

from langchain_histcompress.core.budget import context_budget, fit_messages
from langchain_histcompress.core.errors import BudgetError, ConfigurationError, SummarizationError
from langchain_histcompress.core.rounds import is_summary_message
from langchain_histcompress.core.running_summary import (
    PROMPT_VERSION,
    RunningSummary,
    SummaryUpdate,
    extended_summary,
    utcnow,
)
from langchain_histcompress.core.tokens import (
    TokenCounter,
    cost_ceilings,
    count_request,
    message_costs,
    request_ceiling,
    resolve_counter,
    text_ceiling,
)
from langchain_histcompress.edge.answer_checks import UnusableAnswerError
from langchain_histcompress.edge.model_edge import (
    ModelCall,
    RetryPolicy,
    describe_error,
    internal_config,
    internal_model,
    model_name,
    report_failure,
)
from langchain_histcompress.edge.steps import Pause, Steps, arun_steps, run_steps
from langchain_histcompress.edge.summary_prompt import (
    CODE_SCHEMA,
    CONVERSATION_SCHEMA,
    InvalidOutputError,
    SummarizationConfig,
    SummaryProfile,
    build_summary_prompt,
    check_int,
    merge_variables,
    parse_output,
    parse_summary_output,
    rejection_suffix,
    render_content,
)

__all__ = [
    "SUMMARY_RUN_NAME",
    "SummarizationConfig",
    "Summarizer",
    "SummaryProfile",
    "build_summary_prompt",
    "parse_summary_output",
    "summary_output_cap",
]

logger = logging.getLogger(__name__)

SUMMARY_RUN_NAME = "histcompress_summarize"
"""Run name of every summarizer call (visible in tracing)."""

# --------------------------------------------------------------------------- calling


def summary_output_cap(
    max_summary_tokens: int, max_output_tokens: int | Literal["auto"] | None = "auto"
) -> int | None:
    """The output cap of a summarizer call: explicit, derived from the summary cap, or none.

    ``"auto"`` gives ``max_summary_tokens * 1.5 + 64``: room for the JSON around the
    summary and for tokenizer differences, while a runaway answer stops early (and is
    retried) instead of being billed in full.

    Example:
        >>> summary_output_cap(128), summary_output_cap(128, 500), summary_output_cap(128, None)
        (256, 500, None)
    """
    if max_output_tokens == "auto":
        return max_summary_tokens + max_summary_tokens // 2 + 64
    if max_output_tokens is None:
        return None
    check_int("max_output_tokens", max_output_tokens, minimum=1)
    return max_output_tokens


_SIZING_REJECTION = "x" * 200
"""A rejection note as long as a typical one: the prompt is sized with room for it."""


def _nothing(index: int, message: BaseMessage) -> bool:
    """Protects no message: every one may be shortened for the summarizer."""
    return False


@dataclass(frozen=True)
class _Request:
    messages: tuple[BaseMessage, ...]
    previous: RunningSummary | None
    rounds: int
    partial_round: bool
    previous_text: str | None
    shown: tuple[BaseMessage, ...]
    """What the prompt shows of ``messages``: themselves, or copies of the largest shortened
    so the prompt fits the summarizer's own window."""
    prompt: tuple[BaseMessage, ...] | None = None
    """The first attempt's prompt when sizing built it (else it is built when sent)."""


class Summarizer:
    """Fold messages into a `RunningSummary` with one (retried) model call.

    The summarizer never changes anything itself: it returns a new summary or raises
    `SummarizationError` (``asyncio.CancelledError`` propagates unchanged).

    Args:
        model: The summarizer chat model (may be a cheaper model than the answering one).
        profile: ``"conversation"`` (default), ``"code"``, ``"text"`` or a pydantic model class.
        structured_output: Use ``model.with_structured_output(schema)`` instead of plain
            invoke + robust parsing (not for ``"text"``).
        max_summary_tokens: Cap on the rendered summary's tokens (by ``token_counter``).
        token_counter: Token counter, model name or ``None`` (see `tokens.resolve_counter`).
        max_retries: Retries after the first attempt (transient errors and unusable answers:
            empty, refused, cut off, unparsable, over the cap). This is the whole budget: the
            model's own client retries are turned off for these calls (see
            `_model_edge.internal_model`), so one summary costs at most ``1 + max_retries``
            requests.
        timeout: Seconds per model call (async: ``asyncio.wait_for``; sync: a worker thread,
            and OpenAI-style clients are told the same timeout so they drop the connection);
            ``None`` disables it.
        retry_backoff: First wait before retrying a transient error; doubles per retry.
        max_backoff: Upper bound on one wait; a server asking (``Retry-After``) for a longer
            wait ends the retries.
        max_output_tokens: Output cap of each call (``max_tokens``, where the model has it).
            ``"auto"``: derived from ``max_summary_tokens`` (``1.5 x + 64``, room for the
            JSON around the summary); ``None``: no cap. A cut-off answer is retried.
        instructions: Extra guidance appended to the system prompt.
        sleep: Sync sleep function (injectable for tests).
        async_sleep: Async sleep function (injectable for tests).
        clock: Returns the current time for ``created_at`` (default: UTC now).

    Raises:
        ConfigurationError: A parameter is invalid, or ``structured_output`` is requested for a
            model without ``with_structured_output`` or for the ``"text"`` profile.

    Example:
        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> answers = iter([AIMessage("I'm sorry, I can't help with that."),
        ...                 AIMessage('{"ConversationSummary": "The user said hi."}')])
        >>> summarizer = Summarizer(GenericFakeChatModel(messages=answers),
        ...                         token_counter="approximate")
        >>> update = summarizer.summarize([HumanMessage("hi", id="h1")])
        >>> update.attempts, update.summary.text
        (2, 'The user said hi.')
    """

    def __init__(
        self,
        model: Runnable[Any, Any],
        *,
        profile: SummaryProfile = "conversation",
        structured_output: bool = False,
        max_summary_tokens: int = 2048,
        token_counter: TokenCounter | str | None = None,
        max_retries: int = 2,
        timeout: float | None = 60.0,
        retry_backoff: float = 1.0,
        max_backoff: float = 30.0,
        max_output_tokens: int | Literal["auto"] | None = "auto",
        instructions: str | None = None,
        sleep: Callable[[float], None] | None = None,
        async_sleep: Callable[[float], Awaitable[None]] | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        """Validate the configuration and prepare the model runnable."""
        if not isinstance(model, Runnable):
            msg = f"model must be a LangChain chat model (a Runnable), got {type(model).__name__}"
            raise ConfigurationError(msg)
        self.config = SummarizationConfig(
            profile=profile,
            max_summary_tokens=max_summary_tokens,
            max_retries=max_retries,
            timeout=timeout,
            retry_backoff=retry_backoff,
            max_backoff=max_backoff,
            instructions=instructions,
        )
        self.model = model
        self.model_name = model_name(model)
        self.token_counter = resolve_counter(token_counter)
        self._retry = RetryPolicy(
            max_retries=max_retries,
            backoff=retry_backoff,
            max_backoff=max_backoff,
            sleep=sleep or time.sleep,
            async_sleep=async_sleep or asyncio.sleep,
        )
        self._clock = clock or utcnow
        self.max_output_tokens = summary_output_cap(max_summary_tokens, max_output_tokens)
        budget = context_budget(model).tokens
        # an answer never takes more than half the window: the summary is read back next time
        answer = min(self.max_output_tokens or max_summary_tokens, budget // 2)
        self.max_input_tokens = budget - answer
        """Tokens a prompt may hold: the model's window budget less its answer."""
        self._runnable: Runnable[Any, Any] = model
        self._structured_output = structured_output
        if structured_output:
            prepared = internal_model(
                model, timeout=timeout, max_output_tokens=self.max_output_tokens
            )
            self._runnable = self._structured(prepared, profile)

    @staticmethod
    def _structured(model: Runnable[Any, Any], profile: SummaryProfile) -> Runnable[Any, Any]:
        if profile == "text":
            msg = 'structured_output=True needs a JSON profile, not profile="text"'
            raise ConfigurationError(msg)
        schema: dict[str, Any] | type[BaseModel]
        if profile == "conversation":
            schema = CONVERSATION_SCHEMA
        elif profile == "code":
            schema = CODE_SCHEMA
        else:
            assert isinstance(profile, type)
            schema = profile
        factory = getattr(model, "with_structured_output", None)
        if not callable(factory):
            msg = f"structured_output=True but {type(model).__name__} has no with_structured_output"
            raise ConfigurationError(msg)
        try:
            runnable = factory(schema, include_raw=True)
        except NotImplementedError as exc:
            msg = f"structured_output=True but {type(model).__name__} does not support it"
            raise ConfigurationError(msg) from exc
        if not isinstance(runnable, Runnable):
            msg = "with_structured_output did not return a Runnable"
            raise ConfigurationError(msg)
        return runnable

    # ----------------------------------------------------------------- shared logic

    def _request(
        self,
        messages: Sequence[BaseMessage],
        previous: RunningSummary | None,
        rounds: int,
        partial_round: bool,
        previous_text: str | None,
    ) -> _Request:
        if not messages:
            msg = "nothing to summarize: messages is empty"
            raise ConfigurationError(msg)
        for index, message in enumerate(messages):
            if is_summary_message(message):
                msg = (
                    f"message {index} is a summary message; pass the summary as `previous`, "
                    "never as conversation"
                )
                raise ConfigurationError(msg)
            if not message.id:
                msg = f"message {index} ({message.type}) has no id; coverage needs message ids"
                raise ConfigurationError(msg)
        check_int("rounds", rounds, minimum=0)
        request = _Request(
            tuple(messages), previous, rounds, partial_round, previous_text, tuple(messages)
        )
        return self._within_window(request)

    def _within_window(self, request: _Request) -> _Request:
        """``request`` with the largest messages shortened when its prompt would not fit.

        The summarizer reads at most its own window's budget (`budget.context_budget` of its
        model, less the answer): a message too large for it is shown shortened, with a
        marker (it is still covered: the summary says what it could read of it).
        """
        limit = self.max_input_tokens
        counter = self.token_counter
        # an estimate of the prompt from the messages' costs, if that is clearly small enough
        spare = limit - self.config.max_summary_tokens * 2 - 2_000
        if spare >= 0:
            ceilings = cost_ceilings(counter, request.messages)
            if ceilings is not None and sum(ceilings) * 6 // 5 <= spare:
                return request  # the costs are at most their ceilings
            if sum(message_costs(counter, request.messages)) * 6 // 5 <= spare:
                return request
        # the prompt is sized with room for a retry's note on why an answer was rejected
        note = text_ceiling(counter, rejection_suffix(_SIZING_REJECTION))
        shown = request.messages
        for _ in range(4):
            sized = replace(request, shown=shown)
            if note is not None:
                first = self._prompt(sized, None)
                ceiling = request_ceiling(counter, first)
                if ceiling is not None and ceiling + note <= limit:
                    # the sized prompt's count is at most this ceiling: send the first as is
                    return replace(sized, prompt=tuple(first))
            size = count_request(counter, self._prompt(sized, _SIZING_REJECTION))
            if size <= limit:
                break
            room = sum(message_costs(counter, shown)) - (size - limit) - 64
            try:
                fitted = fit_messages(request.messages, max(room, 1), counter, protected=_nothing)
            except BudgetError as error:
                msg = (
                    f"the summarizer prompt does not fit in its window ({limit:,} tokens): {error}"
                )
                raise SummarizationError(msg) from None
            shown = tuple(fitted)
        else:
            msg = f"the summarizer prompt does not fit in {limit:,} tokens"
            raise SummarizationError(msg)
        return replace(request, shown=shown)

    def _prompt(self, request: _Request, rejection: str | None) -> list[BaseMessage]:
        if rejection is None and request.prompt is not None:
            return list(request.prompt)
        return build_summary_prompt(
            request.shown,
            request.previous,
            config=self.config,
            partial_round=request.partial_round,
            previous_text=request.previous_text,
            rejection=rejection,
        )

    def _run_config(self, config: RunnableConfig | None, request: _Request) -> RunnableConfig:
        version = (request.previous.version if request.previous else 0) + 1
        return internal_config(
            config,
            call="summarize",
            run_name=SUMMARY_RUN_NAME,
            metadata={
                "histcompress_prompt_version": PROMPT_VERSION,
                "histcompress_summary_version": version,
            },
        )

    def _count_text(self, text: str) -> int:
        count_text = getattr(self.token_counter, "count_text", None)
        if callable(count_text):
            return int(count_text(text))
        return int(self.token_counter([SystemMessage(text)]))

    def _accept(self, request: _Request, output: object) -> RunningSummary:
        profile = self.config.profile
        content = merge_variables(request.previous, parse_output(output, profile))
        text = render_content(content, profile)
        cap = self.config.max_summary_tokens
        ceiling = text_ceiling(self.token_counter, text)
        if ceiling is None or ceiling > cap:  # else the count is at most the ceiling
            size = self._count_text(text)
            if size > cap:
                msg = f"summary has {size} tokens, over the cap of {cap}"
                raise InvalidOutputError(msg)
        previous = request.previous
        summary = extended_summary(
            previous,
            [m.id for m in request.messages if m.id],
            content=content,
            text=text,
            rounds_covered=request.rounds + (previous.rounds_covered if previous else 0),
            version=previous.version + 1 if previous else 1,
            model=self.model_name,
            prompt_version=PROMPT_VERSION,
            created_at=self._clock(),
        )
        return summary

    def _after_error(self, exc: Exception, attempt: int) -> Pause:
        """Return the wait before retrying ``exc``, or raise `SummarizationError`."""
        delay = self._retry.delay(exc, attempt)
        if delay is None:
            why = self._retry.why_not(exc, attempt)
            if why == "not retried":
                msg = f"summarizer model failed ({describe_error(exc)}); not retried"
            elif why.startswith("after"):
                msg = f"summarizer model failed {why} ({describe_error(exc)})"
            else:
                msg = f"summarizer model failed ({describe_error(exc)}): {why}"
            report_failure("summarize", type(exc).__name__, attempt)
            raise SummarizationError(msg) from exc
        logger.warning(
            "summarizer attempt %d failed with %s; retrying in %.2f s",
            attempt,
            type(exc).__name__,
            delay,
        )
        return self._retry.pause(delay)

    def _after_bad_output(
        self, problem: InvalidOutputError | UnusableAnswerError, attempt: int
    ) -> str:
        """Return the rejection note for the next attempt, or raise `SummarizationError`."""
        if attempt > self.config.max_retries:
            report_failure("summarize", "unusable_answer", attempt)
            msg = f"summarizer returned no usable summary after {attempt} attempts: {problem}"
            raise SummarizationError(msg)
        logger.warning("summarizer attempt %d gave an unusable answer: %s", attempt, problem)
        return str(problem)

    def _steps(self, request: _Request, config: RunnableConfig | None) -> Steps[SummaryUpdate]:
        """Attempt, validate and retry: the whole run, shared by `summarize` and `asummarize`."""
        run_config = self._run_config(config, request)
        rejection: str | None = None
        attempt = 0
        while True:
            attempt += 1
            call = ModelCall(
                self._runnable,
                self._prompt(request, rejection),
                run_config,
                timeout=self.config.timeout,
                what="summarizer",
                max_output_tokens=self.max_output_tokens,
                structured=self._structured_output,
            )
            try:
                output = yield call
            except UnusableAnswerError as problem:
                rejection = self._after_bad_output(problem, attempt)
                continue
            except Exception as exc:
                yield self._after_error(exc, attempt)
                continue
            try:
                return SummaryUpdate(self._accept(request, output), attempt)
            except InvalidOutputError as problem:
                rejection = self._after_bad_output(problem, attempt)

    # ----------------------------------------------------------------- faces

    def summarize(
        self,
        messages: Sequence[BaseMessage],
        previous: RunningSummary | None = None,
        *,
        rounds: int = 1,
        partial_round: bool = False,
        previous_text: str | None = None,
        config: RunnableConfig | None = None,
    ) -> SummaryUpdate:
        """Fold ``messages`` into ``previous`` and return the new summary.

        Args:
            messages: Messages to fold in, every one with an id, none a summary message.
            previous: The current summary (``None`` for the first).
            rounds: Whole rounds among ``messages`` (added to ``rounds_covered``).
            partial_round: The messages are older tool steps of a round still in progress.
            previous_text: Text of an earlier summary with no record (used when ``previous``
                is ``None``).
            config: Caller's runnable config (callbacks, tags); the summarizer's tags and run
                name are added to a copy.

        Returns:
            The new summary and the number of attempts it took.

        Raises:
            SummarizationError: Non-transient model error, or retries exhausted.
            ConfigurationError: ``messages`` is empty, lacks ids or contains a summary.

        Example:
            >>> from langchain_core.language_models.fake_chat_models import (
            ...     GenericFakeChatModel)
            >>> from langchain_core.messages import AIMessage, HumanMessage
            >>> model = GenericFakeChatModel(messages=iter(
            ...     [AIMessage('{"ConversationSummary": "The user likes green tea."}')]))
            >>> update = Summarizer(model, token_counter="approximate").summarize(
            ...     [HumanMessage("I like green tea", id="h1"), AIMessage("Noted!", id="a1")])
            >>> update.summary.text, sorted(update.summary.covered_ids), update.summary.version
            ('The user likes green tea.', ['a1', 'h1'], 1)
        """
        request = self._request(messages, previous, rounds, partial_round, previous_text)
        return run_steps(self._steps(request, config))

    async def asummarize(
        self,
        messages: Sequence[BaseMessage],
        previous: RunningSummary | None = None,
        *,
        rounds: int = 1,
        partial_round: bool = False,
        previous_text: str | None = None,
        config: RunnableConfig | None = None,
    ) -> SummaryUpdate:
        """Async `summarize` (same arguments, same guarantees)."""
        request = self._request(messages, previous, rounds, partial_round, previous_text)
        return await arun_steps(self._steps(request, config))
