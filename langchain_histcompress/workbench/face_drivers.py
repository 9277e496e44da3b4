"""The package's faces driven turn by turn on a growing history, for the overhead figure.

Each driver (`Face`) wraps one face (a reducer, a graph node, the compressor, the rephraser,
the token counter, a retrieval-based strategy) behind its public API: an untimed warm-up, an
untimed preparation of each turn's input, and the turn itself. `FACES` maps names to drivers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    messages_from_dict,
    messages_to_dict,
)

from langchain_histcompress.core.coverage import CoveredIds
from langchain_histcompress.core.facts import Fact
from langchain_histcompress.core.render import message_text
from langchain_histcompress.core.rounds import ensure_ids, split_rounds
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.workbench.model_clock import ModelClock
from langchain_histcompress.workbench.strategies import build_strategy
from langchain_histcompress.workbench.strategy import StrategyEnv
from langchain_histcompress.workbench.summary_strategies import kept_verbatim

__all__ = [
    "FACES",
    "RETRIEVAL_FACES",
    "Face",
    "FaceEnv",
    "FaceFactory",
]


class Face(ABC):
    """One face driven turn by turn on a growing history."""

    def warm(self, history: Sequence[BaseMessage]) -> None:
        """Catch up on ``history`` (untimed)."""
        self.turn(history)

    def prepare(self, history: Sequence[BaseMessage]) -> Any:
        """What the application does before the call (untimed); `turn` gets the result."""
        return history

    @abstractmethod
    def turn(self, history: Any) -> bool:
        """Handle the next turn; return whether it compressed (model calls count anyway)."""


@dataclass(frozen=True)
class FaceEnv:
    """What a face factory receives: counter, timed internal model, strategy settings, clock."""

    counter: TiktokenCounter
    model: BaseChatModel
    strategies: StrategyEnv
    clock: ModelClock


FaceFactory = Callable[[FaceEnv], Face]


def _warm_summary(compressor: Any, history: Sequence[BaseMessage]) -> RunningSummary | None:
    """A summary covering every round but the retained ones, made with one summarizer call."""
    rounds = split_rounds(history).rounds
    keep = max(1, kept_verbatim(compressor))
    folded = rounds[:-keep]
    if not folded:
        return None
    chunk = [m for r in folded[-2:] for m in r.messages]
    made = compressor.summarizer.summarize(chunk, None, rounds=1).summary
    return RunningSummary(
        content=made.content,
        text=made.text,
        covered_ids=CoveredIds([str(m.id) for r in folded for m in r.messages]),
        rounds_covered=len(folded),
        model=made.model,
        created_at=made.created_at,
    )


def _round_compressor(env: FaceEnv, **options: Any) -> Any:
    from langchain_histcompress.edge.compressor import RoundCompressor

    return RoundCompressor(
        env.model,
        token_counter=env.counter,
        max_summary_tokens=env.strategies.summary_tokens,
        **options,
    )


class _Compressor(Face):
    def __init__(self, compressor: Any) -> None:
        self.compressor = compressor
        self.summary: RunningSummary | None = None

    def warm(self, history: Sequence[BaseMessage]) -> None:
        self.summary = _warm_summary(self.compressor, history)
        self.turn(history)

    def turn(self, history: Sequence[BaseMessage]) -> bool:
        result = self.compressor.compress(history, self.summary)
        self.summary = result.summary
        return bool(result.compressed)


class _Node(Face):
    """`RoundCompressionNode` on a state dict, its update applied as LangGraph would."""

    def __init__(self, env: FaceEnv) -> None:
        from langchain_histcompress.faces.nodes import RoundCompressionNode

        self.node = RoundCompressionNode(_round_compressor(env))
        self.state: dict[str, Any] = {}

    def warm(self, history: Sequence[BaseMessage]) -> None:
        from langchain_histcompress.faces.nodes import summary_to_state

        # Without ids the node reads the ids `ensure_ids` gives (position and content).
        summary = _warm_summary(self.node.compressor, ensure_ids(history))
        self.state = {"running_summary": summary_to_state(summary) if summary else None}
        self.turn(history)

    def turn(self, history: Sequence[BaseMessage]) -> bool:
        update = self.node.invoke({**self.state, "messages": history})
        assert isinstance(update, dict)  # called outside a graph, the node returns a dict
        folded = "running_summary" in update
        if folded:
            self.state["running_summary"] = update["running_summary"]
        return folded


class _Reducer(Face):
    def __init__(self, env: FaceEnv) -> None:
        from langchain_histcompress.faces.reducers import SummarizationReducer

        self.reducer = SummarizationReducer(
            env.model,
            target_count=env.strategies.keep_messages,
            threshold_count=4,
            token_counter=env.counter,
            max_summary_tokens=env.strategies.summary_tokens,
        )

    def turn(self, history: Sequence[BaseMessage]) -> bool:
        self.reducer.reduce(history)
        return False


class _ReducerInFront(Face):
    """`SummarizationReducer` in front of the answering model, a fold on every turn.

    ``with_history_reducer``'s pattern: ``target_count=40`` and no threshold, so each turn
    folds its new messages. The application hands it the full history every turn, or, with
    ``fed_back``, keeps the reduced output and appends each turn's new messages to it
    (Semantic Kernel's way); with ``reloaded`` as well, that list goes through storage
    between turns (serialized and read back as new objects, untimed).
    """

    def __init__(self, env: FaceEnv, *, fed_back: bool = False, reloaded: bool = False) -> None:
        from langchain_histcompress.faces.reducers import SummarizationReducer

        self.reducer = SummarizationReducer(
            env.model, target_count=40, token_counter=env.counter, max_summary_tokens=100_000
        )
        self.fed_back = fed_back
        self.reloaded = reloaded
        self.kept: list[BaseMessage] | None = None
        self.seen = 0

    def warm(self, history: Sequence[BaseMessage]) -> None:
        self.turn(self.prepare(history))

    def prepare(self, history: Sequence[BaseMessage]) -> Sequence[BaseMessage]:
        new, self.seen = history[self.seen :], len(history)
        if not self.fed_back or self.kept is None:
            return history
        kept = [*self.kept, *new]
        return messages_from_dict(messages_to_dict(kept)) if self.reloaded else kept

    def turn(self, history: Sequence[BaseMessage]) -> bool:
        reduced = self.reducer.reduce(history)
        if self.fed_back:
            self.kept = list(history) if reduced is None else reduced
        return False


class _Builder(Face):
    """`ContextBuilder` with a running summary, facts and retrieved raw turns.

    At warm-up it gets a summary covering every message but the last 3 rounds and 200 facts,
    each sourced from one user message (spread over the history; ids as the builder derives
    them for messages without one). Each turn builds the context of the grown history
    (``max_context_tokens=2000``, ``raw_turn_retrieval=4``); with ``reloaded`` the summary is
    read back from its JSON first, a new object as from storage (untimed).
    """

    def __init__(self, env: FaceEnv, *, reloaded: bool = False) -> None:
        from langchain_histcompress.context.builder import ContextBuilder

        self.builder = ContextBuilder(
            max_context_tokens=2000, token_counter=env.counter, raw_turn_retrieval=4
        )
        self.reloaded = reloaded
        self.summary: RunningSummary | None = None
        self.stored = ""
        self.facts: list[Fact] = []

    def warm(self, history: Sequence[BaseMessage]) -> None:
        ided = ensure_ids(history)
        rounds = split_rounds(ided).rounds
        folded = rounds[:-3]
        if folded:
            self.summary = RunningSummary(
                content="The user and the assistant talked about many things.",
                text="The user and the assistant talked about many things.",
                covered_ids=CoveredIds([str(m.id) for r in folded for m in r.messages]),
                rounds_covered=len(folded),
            )
            self.stored = self.summary.model_dump_json()
        humans = [m for m in ided if isinstance(m, HumanMessage)]
        picked = humans[:: max(1, len(humans) // 200)][:200]
        self.facts = [
            Fact(
                id=f"fact-{n}",
                content=message_text(m)[:200].strip() or "(no text)",
                source_ids=(str(m.id),),
            )
            for n, m in enumerate(picked)
        ]
        self.turn(self.prepare(history))

    def prepare(self, history: Sequence[BaseMessage]) -> Any:
        summary = self.summary
        if self.reloaded and summary is not None:
            summary = RunningSummary.model_validate_json(self.stored)
        return history, summary

    def turn(self, history: Any) -> bool:
        messages, summary = history
        self.builder.build(messages, summary=summary, facts=self.facts)
        return False


class _Rephraser(Face):
    def __init__(self, env: FaceEnv, *, node: bool) -> None:
        from langchain_histcompress.faces.rephrase import (
            HistoryRephraseNode,
            create_history_rephraser,
        )

        # timed like every internal model: its call is model time, not the face's
        model = env.clock.timed(GenericFakeChatModel(messages=_standalone_answers()))
        self.node = HistoryRephraseNode(model) if node else None
        self.chain = None if node else create_history_rephraser(model)

    def turn(self, history: Sequence[BaseMessage]) -> bool:
        if self.node is not None:
            self.node.invoke({"messages": history})
        elif self.chain is not None:
            # The history as the application holds it, and a new follow-up question (slicing
            # off the last message would copy the whole history inside the timed turn).
            self.chain.invoke({"input": _FOLLOW_UP, "chat_history": history})
        return False


_FOLLOW_UP = "And what about that?"


def _standalone_answers() -> Any:
    while True:
        yield AIMessage("What did the user ask about last?")


class _Counter(Face):
    def __init__(self, env: FaceEnv) -> None:
        self.counter = TiktokenCounter(env.counter.model)

    def turn(self, history: Sequence[BaseMessage]) -> bool:
        self.counter(history)
        return False


class _Strategy(Face):
    def __init__(self, env: FaceEnv, name: str) -> None:
        self.strategy = build_strategy(name, env.strategies)

    def warm(self, history: Sequence[BaseMessage]) -> None:
        self.strategy.warm_start(history)

    def turn(self, history: Sequence[BaseMessage]) -> bool:
        self.strategy.model_input(history)
        return False


FACES: dict[str, FaceFactory] = {
    "summarization_reducer": _Reducer,
    "summarization_reducer_no_ids": _Reducer,
    "compression_node": _Node,
    "compression_node_no_ids": _Node,
    "round_compression": lambda env: _Compressor(_round_compressor(env)),
    "thread_summary": lambda env: _Compressor(
        _round_compressor(env, trigger=("rounds", 1), keep=("rounds", 0))
    ),
    "rephrase_node": lambda env: _Rephraser(env, node=True),
    "rephrase_chain": lambda env: _Rephraser(env, node=False),
    "tiktoken_counter": _Counter,
    "reducer_full_history": _ReducerInFront,
    "reducer_full_history_no_ids": _ReducerInFront,
    "reducer_fed_back": lambda env: _ReducerInFront(env, fed_back=True),
    "reducer_fed_back_reloaded": lambda env: _ReducerInFront(env, fed_back=True, reloaded=True),
    "context_builder": _Builder,
    "context_builder_no_ids": _Builder,
    "context_builder_reloaded_summary": lambda env: _Builder(env, reloaded=True),
    "facts": lambda env: _Strategy(env, "facts"),
    "hybrid": lambda env: _Strategy(env, "hybrid"),
    "hybrid_retrieval": lambda env: _Strategy(env, "hybrid_retrieval"),
}
"""Face name -> factory. ``*_no_ids`` faces get the history without message ids (a graph
state key reduced by ``operator.add`` instead of ``add_messages``, or a plain list)."""

RETRIEVAL_FACES = frozenset(
    {
        "facts",
        "hybrid",
        "hybrid_retrieval",
        "context_builder",
        "context_builder_no_ids",
        "context_builder_reloaded_summary",
    }
)
"""Faces that rank data for every turn (their targets differ from the others')."""
