"""One strategy replayed over one LoCoMo conversation, turn by turn, then scored for recall.

Before each assistant turn the strategy builds the answering model's input, counted as that
call's prompt; the answer is the file's own assistant turn, counted as its completion. The
strategy's internal calls are metered by a `UsageLedger`. See docs/design/workbench.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_histcompress.core.pricing import PRICING_MODELS
from langchain_histcompress.core.render import message_text
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.edge.model_edge import recording_failures
from langchain_histcompress.workbench.bench_result import StrategyRun
from langchain_histcompress.workbench.costs import (
    REPORTED_PRICINGS,
    CostMeter,
    RequestEncoder,
    stamped_messages,
    turn_times,
)
from langchain_histcompress.workbench.locomo import LocomoConversation
from langchain_histcompress.workbench.metrics import ModelCall, TurnRecord, UsageLedger
from langchain_histcompress.workbench.recall import (
    QuestionContext,
    QuestionRecall,
    score_question,
    summarize_recall,
)
from langchain_histcompress.workbench.recall_costs import price_tool_call
from langchain_histcompress.workbench.strategy import Strategy

__all__ = [
    "replay_strategy",
]

logger = logging.getLogger(__name__)


def replay_strategy(
    strategy: Strategy,
    conversation: LocomoConversation,
    *,
    counter: TiktokenCounter,
    ledger: UsageLedger,
    on_turn: Callable[[], None] | None = None,
    max_turns: int | None = None,
    meter: CostMeter | None = None,
) -> StrategyRun:
    """Replay ``conversation`` through ``strategy``, then score recall.

    Errors are recorded in the run, and so are the internal calls that gave up
    (`StrategyRun.failures`). ``max_turns`` stops the replay after that many assistant turns.
    With a ``meter``, every call is also priced under prompt caching, at the turn's time.
    """
    with recording_failures() as failures:
        run = _replay(
            strategy,
            conversation,
            counter=counter,
            ledger=ledger,
            on_turn=on_turn,
            max_turns=max_turns,
            meter=meter,
        )
    if failures:
        logger.warning(
            "strategy %s: %d internal call(s) gave up on %s",
            strategy.name,
            len(failures),
            conversation.name,
        )
    return replace(run, failures=tuple(failures))


def _replay(
    strategy: Strategy,
    conversation: LocomoConversation,
    *,
    counter: TiktokenCounter,
    ledger: UsageLedger,
    on_turn: Callable[[], None] | None,
    max_turns: int | None,
    meter: CostMeter | None,
) -> StrategyRun:
    strategy.reset()
    times = turn_times(conversation) if meter is not None else {}
    history: list[BaseMessage] = [conversation.system_message()]
    turns: list[TurnRecord] = []
    try:
        for message in stamped_messages(conversation):
            if isinstance(message, AIMessage):
                if max_turns is not None and len(turns) >= max_turns:
                    break
                snapshot = tuple(history)
                mark = ledger.mark()
                start = time.perf_counter()
                model_input = strategy.model_input(snapshot)
                elapsed = time.perf_counter() - start
                calls = tuple(ledger.since(mark))
                if meter is not None:
                    _price_turn(meter, model_input, message, calls, counter, times)
                turns.append(
                    TurnRecord(
                        message_id=str(message.id),
                        prompt_tokens=counter.count_messages(model_input),
                        completion_tokens=counter.count_text(message_text(message)),
                        input_messages=len(model_input),
                        internal_calls=calls,
                        overhead_s=max(0.0, elapsed - sum(c.seconds for c in calls)),
                    )
                )
                if on_turn is not None:
                    on_turn()
            history.append(message)
        questions: list[QuestionRecall] = []
        snapshot = tuple(history)
        for index, qa in enumerate(conversation.recall_questions()):
            question = HumanMessage(qa.question, id=f"question-{index}")
            context = strategy.context_for_question(snapshot, question)
            tokens = counter.count_messages(context.messages)
            scored = score_question(qa, context, context_tokens=tokens)
            if context.tool_request:
                scored = _with_tool_call(scored, context, strategy, counter, meter)
            questions.append(scored)
    except Exception as exc:
        logger.warning(
            "strategy %s failed on %s: %s", strategy.name, conversation.name, type(exc).__name__
        )
        return StrategyRun(
            strategy.name, conversation.name, tuple(turns), error=f"{type(exc).__name__}: {exc}"
        )
    return StrategyRun(
        strategy=strategy.name,
        conversation=conversation.name,
        turns=tuple(turns),
        recall=summarize_recall(questions),
        questions=tuple(questions),
        costs=meter.costs() if meter is not None else {},
        reported_cached_tokens=meter.reported_cached_tokens if meter is not None else None,
    )


def _with_tool_call(
    scored: QuestionRecall,
    context: QuestionContext,
    strategy: Strategy,
    counter: TiktokenCounter,
    meter: CostMeter | None,
) -> QuestionRecall:
    """``scored`` with the recalled tokens and the priced extra request of its tool call."""
    call = context.messages[len(context.tool_request)]
    result = context.messages[-1]
    call_tokens = counter.count_messages([call]) - counter.count_messages([AIMessage("")])
    pricings = (
        list(meter.pricings.values())
        if meter is not None
        else [PRICING_MODELS[name] for name in REPORTED_PRICINGS]
    )
    tools_text = getattr(strategy, "tools_text", None)
    costs = price_tool_call(
        context.tool_request,
        context.messages,
        call_tokens=call_tokens,
        encoder=meter.encoder if meter is not None else RequestEncoder(counter),
        pricings=pricings,
        tools_text=tools_text() if callable(tools_text) else "",
    )
    recalled = counter.count_text(message_text(result)) if isinstance(result, ToolMessage) else 0
    return replace(scored, recalled_tokens=recalled, tool_costs=costs)


def _price_turn(
    meter: CostMeter,
    model_input: Sequence[BaseMessage],
    answer: BaseMessage,
    calls: Sequence[ModelCall],
    counter: TiktokenCounter,
    times: Mapping[str, float],
) -> None:
    """Price a turn's internal calls, then its answering call, at the turn's time."""
    at = times.get(str(answer.id), 0.0)
    for call in calls:
        if not call.failed:
            meter.internal(
                call.prompt,
                output_tokens=call.completion_tokens,
                at=at,
                reported_cached=call.cached_tokens if call.reported else None,
            )
    meter.answer(model_input, output_tokens=counter.count_text(message_text(answer)), at=at)
