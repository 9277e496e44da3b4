"""Strategies that keep a running summary: langmem, LangChain's middleware, `RoundCompressor`.

`RecallStrategy` adds, at each question, one call of the recall tool to the compressor's view.
See docs/design/workbench.md.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Sequence
from typing import Any, cast

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.rounds import split_rounds
from langchain_histcompress.workbench.recall import QuestionContext
from langchain_histcompress.workbench.strategy import Strategy, StrategyEnv

__all__ = [
    "CompressorStrategy",
    "LangmemStrategy",
    "MiddlewareStrategy",
    "RecallStrategy",
    "kept_verbatim",
]


class LangmemStrategy(Strategy):
    """langmem ``summarize_messages`` with its running summary kept between turns."""

    def __init__(self, env: StrategyEnv) -> None:
        """Import langmem and keep the settings."""
        try:
            self._module = importlib.import_module("langmem.short_term")
        except ImportError as exc:  # pragma: no cover - langmem is a bench dependency
            msg = "the langmem strategy needs langmem (pip install 'langchain-histcompress[bench]')"
            raise ConfigurationError(msg) from exc
        self.env = env
        self._running: Any = None

    def reset(self) -> None:
        """Drop the running summary."""
        self._running = None

    def _summarize(self, messages: Sequence[BaseMessage]) -> Any:
        return self._module.summarize_messages(
            list(messages),
            running_summary=self._running,
            model=self.env.model,
            max_tokens=self.env.budget_tokens,
            max_summary_tokens=min(self.env.summary_tokens, self.env.budget_tokens // 2),
            token_counter=self.env.counter,
        )

    def model_input(self, history: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Summarize when over budget, keep the running summary, return the messages."""
        result = self._summarize(history)
        if result.running_summary is not None:
            self._running = result.running_summary
        return list(result.messages)

    def view(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The messages langmem would send now (state unchanged)."""
        return list(self._summarize(messages).messages)


class MiddlewareStrategy(Strategy):
    """LangChain v1 ``SummarizationMiddleware`` driven through its ``before_model`` hook.

    The strategy keeps the agent's message state as ``create_agent`` would: every new message
    is appended, the hook may replace the state with a summary plus the kept messages, and the
    model receives the system prompt followed by the state.
    """

    def __init__(self, env: StrategyEnv) -> None:
        """Build the middleware with the internal model and the shared counter."""
        middleware_module = importlib.import_module("langchain.agents.middleware")
        runtime_module = importlib.import_module("langgraph.runtime")
        message_module = importlib.import_module("langgraph.graph.message")
        self._middleware = middleware_module.SummarizationMiddleware(
            env.model,
            trigger=("tokens", env.budget_tokens),
            keep=("messages", env.keep_messages),
            token_counter=env.counter,
        )
        self._runtime = runtime_module.Runtime()
        self._add_messages: Callable[[Any, Any], Any] = message_module.add_messages
        self._state: list[BaseMessage] = []
        self._seen = 0

    def reset(self) -> None:
        """Empty the agent state."""
        self._state = []
        self._seen = 0

    def _run_hook(self, state: list[BaseMessage]) -> list[BaseMessage]:
        update = self._middleware.before_model({"messages": state}, self._runtime)
        if not update or "messages" not in update:
            return state
        return cast("list[BaseMessage]", self._add_messages(state, update["messages"]))

    @staticmethod
    def _split(messages: Sequence[BaseMessage]) -> tuple[list[BaseMessage], list[BaseMessage]]:
        cut = 0
        while cut < len(messages) and isinstance(messages[cut], SystemMessage):
            cut += 1
        return list(messages[:cut]), list(messages[cut:])

    def model_input(self, history: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Append the new messages to the state, run the hook, return system + state."""
        system, body = self._split(history)
        self._state = self._run_hook([*self._state, *body[self._seen :]])
        self._seen = len(body)
        return system + self._state

    def view(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """System + the state the hook would produce for ``messages`` (state unchanged)."""
        system, body = self._split(messages)
        return system + self._run_hook([*self._state, *body[self._seen :]])


class CompressorStrategy(Strategy):
    """The package's `RoundCompressor` (module ``langchain_histcompress.edge.compressor``)."""

    def __init__(self, compressor: Any) -> None:
        """Wrap a ``RoundCompressor``."""
        self.compressor = compressor
        self._summary: Any = None

    def reset(self) -> None:
        """Drop the running summary."""
        self._summary = None

    @property
    def summary(self) -> Any:
        """The current running summary (``None`` before the first compression)."""
        return self._summary

    def model_input(self, history: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Compress when due, keep the summary, return the model view."""
        result = self.compressor.compress(history, summary=self._summary)
        if result.summary is not None:
            self._summary = result.summary
        return list(result.messages)

    def warm_start(self, history: Sequence[BaseMessage]) -> None:
        """Start from a summary covering all but the retained rounds, made with one call.

        For timing, the summary text comes from one call on the newest two folded rounds and
        its coverage is set to every folded round.
        """
        rounds = split_rounds(history).rounds
        keep = max(1, kept_verbatim(self.compressor))
        folded = rounds[:-keep]
        if not folded:
            self.model_input(history)
            return
        chunk = [m for r in folded[-2:] for m in r.messages]
        update = self.compressor.summarizer.summarize(chunk, None, rounds=1)
        made = update.summary
        self._summary = type(made)(
            content=made.content,
            text=made.text,
            covered_ids=frozenset(m.id for r in folded for m in r.messages if m.id),
            rounds_covered=len(folded),
            model=made.model,
            prompt_version=made.prompt_version,
            created_at=made.created_at,
        )
        self.model_input(history)

    def view(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The model view from the current summary, no model call."""
        return list(self.compressor.view(list(messages), self._summary))


class RecallStrategy(CompressorStrategy):
    """The default compression for the turns; at each question, one recall-tool call.

    Every turn is `CompressorStrategy`'s (nothing is added until the tool is called). The
    context of a question is the request an agent sends after calling the recall tool with
    the question as its query: the view with the summary's recall hint, the question, the
    call, and the tool's result (the recalled messages count as verbatim).
    """

    def __init__(self, compressor: Any, recall: Any) -> None:
        """Wrap a ``RoundCompressor`` and a ``HistoryRecall``."""
        super().__init__(compressor)
        self.recall = recall

    def context_for_question(
        self, history: Sequence[BaseMessage], question: HumanMessage
    ) -> QuestionContext:
        """The request after one recall call with the question as the query (no state change)."""
        asked = tuple(self.recall.add_hint(self.view([*history, question])))
        query = question.content if isinstance(question.content, str) else str(question.content)
        found = self.recall.recall(query, list(history), self._summary)
        call_id = f"call-{question.id}"
        call = AIMessage(
            "",
            id=f"{question.id}-call",
            tool_calls=[
                {
                    "name": self.recall.name,
                    "args": {"query": query},
                    "id": call_id,
                    "type": "tool_call",
                }
            ],
        )
        result = ToolMessage(
            found.content,
            tool_call_id=call_id,
            id=f"{question.id}-result",
            artifact=found.artifact(),
        )
        return QuestionContext(
            (*asked, call, result),
            retrieved_ids=frozenset(found.message_ids),
            tool_request=asked,
        )

    def tools_text(self) -> str:
        """The recall tool's definition as a request sends it (priced ahead of the request)."""
        from langchain_core.utils.function_calling import convert_to_openai_tool

        return json.dumps([convert_to_openai_tool(self.recall.as_tool())], ensure_ascii=False)


def kept_verbatim(compressor: Any) -> int:
    """Rounds a compressor keeps verbatim when its ``keep`` is in rounds (else 3)."""
    unit, amount = compressor.keep
    return int(amount) if unit == "rounds" else 3
