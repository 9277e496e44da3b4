"""The rephrasing engine shared by the rephraser, the RAG runnables and the graph node.

`Rephraser` holds validated settings and plans one question's rephrasing without any model
call (window, summary, prompt); its ``steps`` make the one bounded model call and check the
answer, failing open to the original question. `InputKeys` reads a Runnable's input dict.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from langchain_core.language_models import LanguageModelLike
from langchain_core.messages import BaseMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableConfig
from typing_extensions import TypedDict

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.history_window import (
    check_count,
    content_text,
    latest_summary_message,
    lazy_messages,
    newest_window,
)
from langchain_histcompress.core.render import escape_data, render_transcript, wrap_data
from langchain_histcompress.core.rounds import ensure_ids, is_summary_message
from langchain_histcompress.edge.answer_checks import (
    RefusedAnswerError,
    TruncatedAnswerError,
    UnusableAnswerError,
)
from langchain_histcompress.edge.model_edge import (
    INTERNAL_TAGS,
    TIMEOUT_ERRORS,
    ModelCall,
    internal_config,
    report_failure,
)
from langchain_histcompress.edge.rephrase_prompts import (
    FallbackReason,
    RephraseStyle,
    _check_output,
    _format_prompt,
    _resolve_prompt,
)
from langchain_histcompress.edge.steps import Steps, arun_steps, run_steps
from langchain_histcompress.edge.twin_runnable import TwinRunnable

__all__ = [
    "DEFAULT_REPHRASE_TIMEOUT",
    "REPHRASE_TAGS",
    "CompactHistoryMode",
    "RephraseOutput",
]

logger = logging.getLogger(__name__)


CompactHistoryMode = Literal["compact", "none"]
"""``compact``: rephrase history + question into one standalone question; ``none``: raw
question for retrieval, last messages sent to the answering model."""

DEFAULT_REPHRASE_TIMEOUT = 10.0
"""Seconds the rephrasing call may take before the original question is used."""

REPHRASE_TAGS: tuple[str, ...] = INTERNAL_TAGS
"""Tags put on every rephrasing model call so its tokens never stream to the end user (the
package's internal-call tags)."""

_REPHRASE_RUN_NAME = "histcompress_rephrase"
DEFAULT_MAX_MESSAGE_CHARS = 4000


class RephraseOutput(TypedDict):
    """What a rephraser returns with ``return_metadata=True``."""

    question: str
    """The question to retrieve with: the rephrasing, or the original on fallback."""
    original_question: str
    """The follow-up question exactly as received."""
    rephrased: bool
    """Whether the model's rephrasing was used (``False`` too when the model gave the
    question back unchanged: it was already standalone)."""
    fallback_reason: FallbackReason | None
    """Why the original question was used after a model call; ``None`` otherwise."""
    history_messages: int
    """How many history messages were sent to the rephrasing model (0 without a call)."""
    model_calls: int
    """Rephrasing model calls made for this question (0 or 1)."""


def _summary_block(summary: object, max_chars: int | None) -> str:
    """Render a running summary (str, RunningSummary-like, mapping or message) as data."""
    if summary is None:
        return ""
    attributes: dict[str, object] = {}
    if isinstance(summary, str):
        text = summary
    elif isinstance(summary, BaseMessage):
        text = content_text(summary.content).strip()
        if is_summary_message(summary) and text:
            return text + "\n\n"  # the package already rendered it as escaped, tagged data
    elif isinstance(summary, Mapping):
        text = str(summary.get("text") or "")
    elif isinstance(getattr(summary, "text", None), str):
        text = cast("str", summary.text)  # type: ignore[attr-defined]
        version = getattr(summary, "version", None)
        if version is not None:
            attributes["version"] = version
        covered = getattr(summary, "covered_ids", None)
        if covered is not None:
            attributes["messages"] = len(covered)
    else:
        msg = (
            "summary must be a RunningSummary, a str, a mapping with 'text' or a message, "
            f"got {type(summary).__name__}"
        )
        raise ConfigurationError(msg)
    text = _truncate(text.strip(), max_chars)
    if not text:
        return ""
    return wrap_data("conversation_summary", text, attributes) + "\n\n"


def _same_text(answer: str, question: str) -> bool:
    """Whether the model gave the question back (whitespace and letter case aside)."""
    return " ".join(answer.split()).casefold() == " ".join(question.split()).casefold()


def _truncate(text: str, max_chars: int | None) -> str:
    if max_chars is None or len(text) <= max_chars:
        return text
    return f"{text[:max_chars]} [... {len(text) - max_chars} characters cut]"


@dataclass(frozen=True)
class _Plan:
    """One question's rephrasing plan, built without any model call."""

    question: str
    """The follow-up question as received."""
    window: tuple[BaseMessage, ...]
    """The history messages shown to the model."""
    prompt: tuple[BaseMessage, ...] | None
    """The messages to send; ``None`` when no call is needed."""
    limit: int
    """Maximum accepted output length in characters."""


@dataclass(frozen=True)
class Rephraser:
    """Validated rephrasing settings plus the shared sync/async logic."""

    llm: Runnable[Any, Any]
    """The rephrasing model."""
    mode: CompactHistoryMode
    """``compact`` calls the model; ``none`` never does."""
    history_message_count: int
    """How many history messages the prompt shows at most."""
    prompt: ChatPromptTemplate
    """The rephrasing prompt."""
    style: RephraseStyle
    """Which built-in output shape to expect."""
    max_output_chars: int | None
    """Explicit output cap; ``None`` derives it from the question's length."""
    timeout: float | None
    """Seconds to wait for the model before falling back."""
    include_tool_messages: bool
    """Keep answered tool groups in the window."""
    max_message_chars: int | None
    """Per-message (and summary) character cap in the rendered transcript."""

    @classmethod
    def build(
        cls,
        llm: LanguageModelLike,
        *,
        mode: str,
        history_message_count: int,
        prompt: ChatPromptTemplate | str | None,
        style: str,
        max_output_chars: int | None,
        timeout: float | None,
        include_tool_messages: bool,
        max_message_chars: int | None,
    ) -> Rephraser:
        if mode not in ("compact", "none"):
            msg = f"mode must be 'compact' or 'none', got {mode!r}"
            raise ConfigurationError(msg)
        if not isinstance(llm, Runnable):
            msg = f"llm must be a chat model or Runnable, got {type(llm).__name__}"
            raise ConfigurationError(msg)
        check_count("history_message_count", history_message_count, minimum=0)
        if max_output_chars is not None:
            check_count("max_output_chars", max_output_chars, minimum=1)
        if max_message_chars is not None:
            check_count("max_message_chars", max_message_chars, minimum=1)
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            msg = f"timeout must be a positive number of seconds or None, got {timeout!r}"
            raise ConfigurationError(msg)
        template = _resolve_prompt(prompt, style)
        return cls(
            llm=llm,
            mode=cast("CompactHistoryMode", mode),
            history_message_count=history_message_count,
            prompt=template,
            style=cast("RephraseStyle", style),
            max_output_chars=max_output_chars,
            timeout=None if timeout is None else float(timeout),
            include_tool_messages=include_tool_messages,
            max_message_chars=max_message_chars,
        )

    def limit_for(self, question: str) -> int:
        if self.max_output_chars is not None:
            return self.max_output_chars
        if self.style == "standalone_question":
            return max(300, 4 * len(question))
        return max(800, 4 * len(question) + 600)

    def plan(self, question: str, history: Sequence[BaseMessage], summary: object) -> _Plan:
        limit = self.limit_for(question)
        if self.mode == "none":
            return _Plan(question, (), None, limit)
        window, read_from = newest_window(
            history, self.history_message_count, self.include_tool_messages
        )
        if summary is None:
            summary = latest_summary_message(history, read_from)
        summary_text = _summary_block(summary, self.max_message_chars)
        if not window and not summary_text:
            return _Plan(question, (), None, limit)
        history_text = render_transcript(
            [self._capped(m) for m in ensure_ids(window, namespace="rephrase")]
        )
        variables = set(self.prompt.input_variables)
        values = {"history": history_text, "question": escape_data(question)}
        if "summary" in variables:
            values["summary"] = summary_text
        elif summary_text:
            values["history"] = summary_text + history_text
        prompt = _format_prompt(self.prompt, values)
        return _Plan(question, tuple(window), tuple(prompt), limit)

    def _capped(self, message: BaseMessage) -> BaseMessage:
        """A copy of ``message`` with its text cut to ``max_message_chars`` when longer."""
        if self.max_message_chars is None:
            return message
        text = content_text(message.content)
        if len(text) <= self.max_message_chars and isinstance(message.content, str):
            return message
        return message.model_copy(update={"content": _truncate(text, self.max_message_chars)})

    def skipped(self, plan: _Plan) -> RephraseOutput:
        return RephraseOutput(
            question=plan.question,
            original_question=plan.question,
            rephrased=False,
            fallback_reason=None,
            history_messages=0,
            model_calls=0,
        )

    def fallback(self, plan: _Plan, reason: FallbackReason, error: str = "") -> RephraseOutput:
        report_failure("rephrase", error or reason, 1)
        logger.warning(
            "history rephrasing fell back to the original question: %s%s",
            reason,
            f" ({error})" if error else "",
        )
        return RephraseOutput(
            question=plan.question,
            original_question=plan.question,
            rephrased=False,
            fallback_reason=reason,
            history_messages=len(plan.window),
            model_calls=1,
        )

    def finish(self, plan: _Plan, raw: object) -> RephraseOutput:
        question, reason = _check_output(raw, limit=plan.limit, style=self.style)
        if question is None:
            return self.fallback(plan, reason or "garbage")
        unchanged = _same_text(question, plan.question)
        logger.debug(
            "history rephrasing from %d messages: %s (%d chars)",
            len(plan.window),
            "question already standalone" if unchanged else "rephrased",
            len(question),
        )
        return RephraseOutput(
            question=plan.question if unchanged else question,
            original_question=plan.question,
            rephrased=not unchanged,
            fallback_reason=None,
            history_messages=len(plan.window),
            model_calls=1,
        )

    def steps(
        self, question: str, history: Sequence[BaseMessage], summary: object, config: Any
    ) -> Steps[RephraseOutput]:
        """Plan, call the model once (unless no call is needed), check: fails open."""
        plan = self.plan(question, history, summary)
        if plan.prompt is None:
            return self.skipped(plan)
        call = ModelCall(
            self.llm,
            list(plan.prompt),
            internal_config(config, call="rephrase", run_name=_REPHRASE_RUN_NAME),
            timeout=self.timeout,
            what="rephraser",
            max_output_tokens=plan.limit,
        )
        try:
            raw = yield call
        except TIMEOUT_ERRORS:
            return self.fallback(plan, "timeout")
        except TruncatedAnswerError:
            return self.fallback(plan, "truncated")
        except RefusedAnswerError:
            return self.fallback(plan, "refusal")
        except UnusableAnswerError as exc:
            return self.fallback(plan, "garbage", exc.reason)
        except Exception as exc:
            return self.fallback(plan, "model_error", type(exc).__name__)
        return self.finish(plan, raw)

    def run(
        self, question: str, history: Sequence[BaseMessage], summary: object, config: Any
    ) -> RephraseOutput:
        return run_steps(self.steps(question, history, summary, config))

    async def arun(
        self, question: str, history: Sequence[BaseMessage], summary: object, config: Any
    ) -> RephraseOutput:
        return await arun_steps(self.steps(question, history, summary, config))


@dataclass(frozen=True)
class InputKeys:
    """Which input keys hold the question, the history and the running summary."""

    question: str
    """Key of the follow-up question."""
    history: str
    """Key of the chat history (messages before the question)."""
    summary: str | None
    """Key of an optional running summary; ``None`` to never read one."""

    @classmethod
    def build(cls, question: str, history: str, summary: str | None) -> InputKeys:
        for name, value in (("input_key", question), ("history_key", history)):
            if not isinstance(value, str) or not value:
                msg = f"{name} must be a non-empty string, got {value!r}"
                raise ConfigurationError(msg)
        if summary is not None and (not isinstance(summary, str) or not summary):
            msg = f"summary_key must be a non-empty string or None, got {summary!r}"
            raise ConfigurationError(msg)
        return cls(question, history, summary)

    def read(self, inputs: object) -> tuple[str, Sequence[BaseMessage], object]:
        if isinstance(inputs, str):
            return inputs, [], None
        if not isinstance(inputs, Mapping):
            msg = f"expected a dict input with key {self.question!r}, got {type(inputs).__name__}"
            raise ConfigurationError(msg)
        if self.question not in inputs:
            msg = (
                f"input has no {self.question!r} key (keys: {sorted(map(str, inputs))}); "
                "pass input_key= to read the question from another key"
            )
            raise ConfigurationError(msg)
        question = inputs[self.question]
        if not isinstance(question, str):
            msg = f"input[{self.question!r}] must be a str, got {type(question).__name__}"
            raise ConfigurationError(msg)
        history = lazy_messages(inputs.get(self.history) or [], f"input[{self.history!r}]")
        summary = inputs.get(self.summary) if self.summary is not None else None
        return question, history, summary


def rephraser_runnable(
    engine: Rephraser, keys: InputKeys
) -> Runnable[dict[str, Any], RephraseOutput]:
    """The rephraser as a Runnable returning `RephraseOutput` (sync and async)."""

    def rephrase(inputs: dict[str, Any], config: RunnableConfig) -> RephraseOutput:
        return engine.run(*keys.read(inputs), config)

    async def arephrase(inputs: dict[str, Any], config: RunnableConfig) -> RephraseOutput:
        return await engine.arun(*keys.read(inputs), config)

    return TwinRunnable(
        rephrase,
        arephrase,
        name="HistoryRephraser",
        input_type=dict[str, Any],
        output_type=RephraseOutput,
    )


def question_runnable(engine: Rephraser, keys: InputKeys) -> Runnable[dict[str, Any], str]:
    """The rephraser as a Runnable returning the question only: one run, no nested one."""

    def rephrase(inputs: dict[str, Any], config: RunnableConfig) -> str:
        return engine.run(*keys.read(inputs), config)["question"]

    async def arephrase(inputs: dict[str, Any], config: RunnableConfig) -> str:
        return (await engine.arun(*keys.read(inputs), config))["question"]

    return TwinRunnable(
        rephrase, arephrase, name="HistoryRephraser", input_type=dict[str, Any], output_type=str
    )
