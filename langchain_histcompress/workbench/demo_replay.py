"""Replaying the demo conversation through the app, metered, with a reopen at the end.

Example:
    >>> import io
    >>> from langchain_histcompress.workbench.demo_script import load_script
    >>> replay_conversation(load_script(), turns=2, writer=io.StringIO()).resume.messages
    3
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.facts import facts_from_state
from langchain_histcompress.core.pricing import (
    DEFAULT_PRICING,
    PRICING_MODELS,
    PromptCache,
    PromptRequest,
    encode_request,
    price_requests,
)
from langchain_histcompress.core.render import message_text
from langchain_histcompress.core.rounds import ensure_ids
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.edge.compressor import RoundCompressor
from langchain_histcompress.faces.nodes import summary_from_state
from langchain_histcompress.workbench.demo_graph import build_demo_graph
from langchain_histcompress.workbench.demo_model import ScriptedChatModel
from langchain_histcompress.workbench.demo_report import (
    CallKind,
    DemoReport,
    FoldSettings,
    PricedRun,
    ResumeRecord,
    TurnRecord,
    _Printer,
    _turn_line,
)
from langchain_histcompress.workbench.demo_script import (
    COUNTER_MODEL,
    FACT_BATCH_ROUNDS,
    MAX_CONTEXT_TOKENS,
    TOP_K_FACTS,
    DemoScript,
    ScriptedTurn,
)

__all__ = ["UsageMeter", "replay_conversation"]

_NODE_KINDS = {
    "model": "answer",
    "compress": "summarize",
    "extract_facts": "extract",
    "rephrase": "rephrase",
}
_CALL_KINDS = {"summarize": "summarize", "extract_facts": "extract"}


@dataclass(frozen=True)
class _Call:
    turn: int
    kind: CallKind
    prompt_tokens: int
    completion_tokens: int
    prompt: tuple[int, ...] = ()
    """The prompt's token ids (what a provider's prompt cache compares)."""
    at: float = 0.0
    """When the call was made, in the conversation's time (seconds)."""


class UsageMeter(BaseCallbackHandler):
    """Callback handler that bills every chat-model call of a run, by kind and turn.

    Prompt and completion tokens are counted with one `TiktokenCounter` for every model (the
    same counter measures the full-history baseline). The kind comes from the package's own
    call metadata (``histcompress_call``) or from the graph node that made the call.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_histcompress.workbench.demo_script import load_script
        >>> meter = UsageMeter(TiktokenCounter())
        >>> model = ScriptedChatModel(script=load_script())
        >>> _ = model.invoke([HumanMessage("hi", id="u01")], {"callbacks": [meter],
        ...                  "metadata": {"langgraph_node": "model"}})
        >>> [(c.kind, c.prompt_tokens) for c in meter.calls]
        [('answer', 8)]
    """

    def __init__(self, counter: TiktokenCounter) -> None:
        """Meter with ``counter``; `turn` tags the calls that follow."""
        super().__init__()
        self.counter = counter
        self.turn = 0
        self.now = 0.0
        """The conversation's time in seconds (stamped on the calls that follow)."""
        self.calls: list[_Call] = []
        self.fold_failures: dict[int, str] = {}
        """Turn -> the error of a fold that failed (the turn went on with the stored summary)."""
        self._pending: dict[UUID, tuple[int, str, tuple[int, ...], float]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _kind(metadata: Mapping[str, Any] | None) -> str:
        meta = metadata or {}
        call = _CALL_KINDS.get(str(meta.get("histcompress_call")))
        if call is not None:
            return call
        return _NODE_KINDS.get(str(meta.get("langgraph_node")), "other")

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Count the prompt."""
        prompt = tuple(i for batch in messages for i in encode_request(batch, self.counter))
        with self._lock:
            self._pending[run_id] = (self.turn, self._kind(metadata), prompt, self.now)

    def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Count the completion and record the call."""
        with self._lock:
            pending = self._pending.pop(run_id, None)
        if pending is None:
            return
        completion = 0
        for generations in response.generations:
            for generation in generations:
                if isinstance(generation, ChatGeneration):
                    completion += self.counter.count_text(message_text(generation.message))
                else:
                    completion += self.counter.count_text(generation.text)
        turn, kind, prompt, at = pending
        with self._lock:
            self.calls.append(_Call(turn, kind, len(prompt), completion, prompt, at))

    def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Forget a failed call (nothing billed is known)."""
        with self._lock:
            self._pending.pop(run_id, None)

    def on_custom_event(
        self,
        name: str,
        data: Any,
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Note a fold that failed (``histcompress_fold_failed``) against the current turn."""
        if name == "histcompress_fold_failed":
            error = data.get("error") if isinstance(data, Mapping) else None
            with self._lock:
                self.fold_failures[self.turn] = str(error or "error")

    def for_turn(self, turn: int) -> list[_Call]:
        """The calls recorded while `turn` was ``turn``."""
        with self._lock:
            return [c for c in self.calls if c.turn == turn]


class _Clock:
    """The conversation's time: internal records are stamped with it, not with wall time."""

    def __init__(self) -> None:
        self.now = datetime.now(timezone.utc)

    def __call__(self) -> datetime:
        return self.now


def _summary_version(state: Mapping[str, Any]) -> tuple[RunningSummary | None, int]:
    summary = summary_from_state(state)
    return summary, summary.version if summary is not None else 0


@dataclass
class _Run:
    script: DemoScript
    model_factory: Callable[[], BaseChatModel]
    offline: bool
    counter: TiktokenCounter
    meter: UsageMeter
    clock: _Clock
    printer: _Printer
    history: list[BaseMessage] = field(default_factory=list)
    records: list[TurnRecord] = field(default_factory=list)
    settings: FoldSettings | None = None
    baseline: list[PromptRequest] = field(default_factory=list)
    """The requests of answering with the full history, for pricing."""

    def turn(
        self,
        graph: CompiledStateGraph[Any, Any, Any, Any],
        compressor: RoundCompressor,
        config: RunnableConfig,
        turn: ScriptedTurn,
        *,
        summary: RunningSummary | None,
        resumed: bool = False,
    ) -> dict[str, Any]:
        """Run one turn; ``summary`` is the stored one before it (to plan the fold)."""
        self.meter.turn = turn.number
        self.meter.now = turn.user_at.timestamp()
        self.clock.now = turn.user_at
        question = _question(turn)
        if not self.history:
            self.history.append(SystemMessage(self.script.system_prompt, id="system"))
            new: list[BaseMessage] = [self.history[0], question]
        else:
            new = [question]
        # what the compress node will decide, and why (planning is pure and deterministic)
        plan = compressor.plan(ensure_ids([*self.history, question]), summary)
        full_prompt = encode_request([*self.history, question], self.counter)
        full = len(full_prompt)
        inputs: dict[str, Any] = {
            "messages": new,
            "follow_up": turn.standalone_question is not None,
            "standalone_question": None,
            "rephrase_report": None,
            "reply_id": turn.reply_id,
            "reply_at": turn.reply_at.isoformat(),
        }
        state: dict[str, Any] = graph.invoke(inputs, config)
        reply = state["messages"][-1]
        self.history += [question, reply]
        calls = self.meter.for_turn(turn.number)
        billed: dict[str, tuple[int, int]] = {}
        for call in calls:
            before = billed.get(call.kind, (0, 0))
            billed[call.kind] = (
                before[0] + 1,
                before[1] + call.prompt_tokens + call.completion_tokens,
            )
        answers = [c for c in calls if c.kind == "answer"]
        report = state.get("facts_extraction") or {}
        rephrase = state.get("rephrase_report") or {}
        _, version = _summary_version(state)
        record = TurnRecord(
            number=turn.number,
            session=turn.session,
            sent_tokens=sum(c.prompt_tokens for c in answers),
            full_tokens=full,
            reply_tokens=sum(c.completion_tokens for c in answers),
            billed=billed,
            summary_version=version,
            fact_count=len(state.get("facts") or {}),
            facts_added=len(report.get("added", ())),
            facts_updated=len(report.get("updated", ())),
            facts_deleted=len(report.get("deleted", ())),
            extraction_status=str(report.get("status", "skipped")),
            standalone_question=state.get("standalone_question")
            if rephrase.get("rephrased")
            else None,
            rephrase_fallback=rephrase.get("fallback_reason") if rephrase else None,
            resumed=resumed,
            fold_reason=plan.reason,
            planned_folds=len(plan.chunks),
            fold_failed=self.meter.fold_failures.get(turn.number),
        )
        self.records.append(record)
        self.baseline.append(
            PromptRequest(full_prompt, record.reply_tokens, at=turn.user_at.timestamp())
        )
        _turn_line(self.printer, record, self.settings)
        return state


def _question(turn: ScriptedTurn) -> HumanMessage:
    """The user's message of ``turn``, stamped with its time (the cost trigger reads it)."""
    return HumanMessage(
        turn.user_text,
        id=turn.user_id,
        additional_kwargs={"timestamp": turn.user_at.isoformat()},
    )


def _priced(run: _Run, compressor: RoundCompressor) -> PricedRun:
    """The run's calls and the full-history baseline, priced as the provider bills them."""
    schedule = compressor.target.schedule
    pricing = schedule.pricing if schedule is not None else PRICING_MODELS[DEFAULT_PRICING]
    cache = PromptCache(pricing)
    by_kind: dict[str, float] = {}
    prompt = cached = 0
    for call in run.meter.calls:  # in the order they were made
        cost = cache.price(PromptRequest(call.prompt, call.completion_tokens, at=call.at))
        by_kind[call.kind] = by_kind.get(call.kind, 0.0) + cost.cost
        prompt, cached = prompt + cost.input_tokens, cached + cost.cached_tokens
    full = price_requests(run.baseline, pricing)
    return PricedRun(
        pricing=pricing.name,
        description=pricing.description,
        cache_lifetime=pricing.cache_lifetime,
        by_kind=by_kind,
        full_cost=full.cost,
        cached_share=cached / prompt if prompt else 0.0,
        full_cached_share=full.cached_share,
    )


def _settings(compressor: RoundCompressor) -> FoldSettings:
    target = compressor.target
    unit, amount = compressor.keep
    return FoldSettings(
        keep_rounds=int(amount) if unit == "rounds" else 0,
        window=target.budget.window,
        budget_tokens=target.budget.tokens,
        budget_source=target.budget.source,
        pricing=target.pricing if target.schedule is not None else "",
    )


def _free_thread(saver: BaseCheckpointSaver[Any], base: str) -> str:
    number = 1
    while saver.get_tuple({"configurable": {"thread_id": f"{base}-{number}"}}) is not None:
        number += 1
    return f"{base}-{number}"


def _model_name(model: BaseChatModel) -> str:
    for attribute in ("model_name", "model"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def replay_conversation(
    script: DemoScript,
    *,
    model: BaseChatModel | None = None,
    turns: int | None = None,
    db_path: str | os.PathLike[str] | None = None,
    writer: TextIO | None = None,
    quiet: bool = False,
) -> DemoReport:
    """Replay ``script`` through the demo app, print the progress and return the figures.

    The first ``turns - 1`` turns run on one app instance; then the app and its SQLite
    connection are closed, the thread is reopened from the file by a freshly built app (with
    fresh scripted model objects when offline) and the last turn runs there.

    Args:
        script: The conversation (see `load_script`).
        model: A real chat model for every role; ``None`` replays the script offline.
        turns: How many turns to replay (default: all; at least 2).
        db_path: SQLite file of the checkpointer (default: a temporary file).
        writer: Where the progress goes (default: ``sys.stdout``).
        quiet: Print only the resume and savings lines.

    Raises:
        ConfigurationError: ``turns`` is out of range, or the database cannot be opened.
        HistCompressError: A model call failed in a way the graph does not absorb.

    Example:
        >>> import io
        >>> from langchain_histcompress.workbench.demo_script import load_script
        >>> report = replay_conversation(load_script(), turns=6, writer=io.StringIO())
        >>> [t.fact_count for t in report.turns], report.resume.summarizer_calls
        ([0, 0, 0, 0, 8, 8], 0)
    """
    total = len(script.turns)
    count = total if turns is None else turns
    if isinstance(count, bool) or not isinstance(count, int) or not 2 <= count <= total:
        msg = f"turns must be an integer from 2 to {total}, got {turns!r}"
        raise ConfigurationError(msg)
    printer = _Printer(writer or sys.stdout, quiet=quiet)
    counter = TiktokenCounter(COUNTER_MODEL)
    offline = model is None
    real = model

    def factory() -> BaseChatModel:
        return ScriptedChatModel(script=script, counter=counter) if real is None else real

    run = _Run(
        script=script,
        model_factory=factory,
        offline=offline,
        counter=counter,
        meter=UsageMeter(counter),
        clock=_Clock(),
        printer=printer,
    )
    with contextlib.ExitStack() as stack:
        if db_path is None:
            folder = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="histcompress-demo-", ignore_cleanup_errors=True)
            )
            path = Path(folder) / "demo.sqlite"
        else:
            path = Path(db_path).expanduser()
            if not path.parent.is_dir():
                msg = f"--db folder does not exist: {path.parent}"
                raise ConfigurationError(msg)
        report = _replay(run, script, count, path)
    return report


@contextlib.contextmanager
def _open_saver(path: Path) -> Iterator[BaseCheckpointSaver[Any]]:
    """Open a SQLite checkpointer on ``path``, closed again on exit."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    try:
        connection = sqlite3.connect(str(path), check_same_thread=False)
    except sqlite3.Error as exc:
        msg = f"cannot open the SQLite checkpoint file {path}: {exc}"
        raise ConfigurationError(msg) from exc
    try:
        saver = SqliteSaver(connection)
        try:
            saver.setup()
        except sqlite3.Error as exc:
            msg = f"cannot use the SQLite checkpoint file {path}: {exc}"
            raise ConfigurationError(msg) from exc
        yield saver
    finally:
        connection.close()


def _print_header(
    printer: _Printer, script: DemoScript, count: int, mode: str, settings: FoldSettings
) -> None:
    turns = script.turns[:count]
    printer.wrapped(f"langchain-histcompress demo: {script.title}")
    printer.wrapped(
        f"{count} of {len(script.turns)} turns over {turns[-1].session} sessions; models: {mode}"
    )
    printer.wrapped(
        "graph: START -> extract_facts -> compress -> [rephrase] -> model -> END, "
        "SQLite checkpointer"
    )
    how = (
        f"folds when folding pays under {settings.pricing}"
        if settings.pricing
        else "folds when its trigger fires"
    )
    printer.wrapped(
        f"compression: RoundCompressor defaults, profile 'code': {how}; keeps the newest "
        f"{settings.keep_rounds} rounds verbatim"
    )
    printer.wrapped(
        f"budget: the view holds at most {settings.budget_tokens:,} tokens, "
        f"{settings.budget_tokens / settings.window:.0%} of the answering model's window: "
        f"{settings.budget_source}"
    )
    printer.wrapped(
        f"facts: extracted every {FACT_BATCH_ROUNDS} rounds, top {TOP_K_FACTS} shown to the "
        f"model in a context of at most {MAX_CONTEXT_TOKENS:,} tokens; tokens: tiktoken "
        f"{COUNTER_MODEL}"
    )


def _replay(run: _Run, script: DemoScript, count: int, path: Path) -> DemoReport:
    model = run.model_factory()
    mode = "offline replay (scripted models, no key)" if run.offline else _model_name(model)
    config, before_summary, before_facts = _replay_before_close(
        run, script, count, path, model, mode
    )
    run.printer.rule("app closed; reopening the thread from the SQLite file")
    state, compressor, resume = _resume_last_turn(
        run, script, count, path, config, before_summary, before_facts
    )
    final_summary, _ = _summary_version(state)
    return DemoReport(
        offline=run.offline,
        model=mode,
        turns=tuple(run.records),
        summary=final_summary,
        facts=facts_from_state(state.get("facts")),
        resume=resume,
        db_path=str(path),
        folding=run.settings,
        priced=_priced(run, compressor),
    )


def _replay_before_close(
    run: _Run, script: DemoScript, count: int, path: Path, model: BaseChatModel, mode: str
) -> tuple[RunnableConfig, RunningSummary | None, dict[str, Any]]:
    """Every turn but the last on a fresh thread; the config, summary and facts at closing."""
    printer = run.printer
    turns = script.turns[:count]
    with _open_saver(path) as saver:
        graph, compressor = build_demo_graph(
            model, counter=run.counter, checkpointer=saver, clock=run.clock, offline=run.offline
        )
        run.settings = _settings(compressor)
        _print_header(printer, script, count, mode, run.settings)
        thread_id = _free_thread(saver, "histcompress-demo")
        config: RunnableConfig = {
            "configurable": {"thread_id": thread_id},
            "callbacks": [run.meter],
        }
        printer.line(f"checkpoints: {path} (thread {thread_id})")
        printer.wrapped(
            "each turn: prompt tokens sent to the answering model / with the full history, "
            "summary version, facts; under a turn that folds, why"
        )
        session = 0
        state: dict[str, Any] = {}
        summary: RunningSummary | None = None
        for turn in turns[:-1]:
            if turn.session != session:
                session = turn.session
                printer.session(script.sessions[session - 1])
            state = run.turn(graph, compressor, config, turn, summary=summary)
            summary, _ = _summary_version(state)
        before_summary, _ = _summary_version(state)
        before_facts = state.get("facts") or {}
    return config, before_summary, before_facts


def _resume_last_turn(
    run: _Run,
    script: DemoScript,
    count: int,
    path: Path,
    config: RunnableConfig,
    before_summary: RunningSummary | None,
    before_facts: dict[str, Any],
) -> tuple[dict[str, Any], RoundCompressor, ResumeRecord]:
    """Reopen the thread from the SQLite file and answer the last turn on it.

    Returns:
        The final state, the compressor and what the resume restored and cost.
    """
    printer = run.printer
    turns = script.turns[:count]
    last = turns[-1]
    thread_id = config["configurable"]["thread_id"]
    with _open_saver(path) as saver:
        graph, compressor = build_demo_graph(
            run.model_factory(),
            counter=run.counter,
            checkpointer=saver,
            clock=run.clock,
            offline=run.offline,
        )
        restored = dict(graph.get_state(config).values)
        messages = list(restored.get("messages") or [])
        summary, version = _summary_version(restored)
        facts_restored = restored.get("facts") or {}
        printer.line(
            f"restored: {len(messages)} messages, "
            + (
                f"summary v{version} covering {summary.rounds_covered} rounds, "
                if summary is not None
                else "no summary yet, "
            )
            + f"{len(facts_restored)} facts"
        )
        plan = compressor.plan(ensure_ids([*messages, _question(last)]), summary)
        if last.session != turns[-2].session:
            printer.session(script.sessions[last.session - 1])
        state = run.turn(graph, compressor, config, last, summary=summary, resumed=True)
        calls = run.records[-1].billed.get("summarize", (0, 0))[0]
    resume = ResumeRecord(
        thread_id=thread_id,
        messages=len(messages),
        summary_version=version,
        rounds_covered=summary.rounds_covered if summary is not None else 0,
        facts=len(facts_restored),
        matches_before=summary == before_summary and facts_restored == before_facts,
        expected_summarizer_calls=len(plan.chunks),
        summarizer_calls=calls,
    )
    return state, compressor, resume
