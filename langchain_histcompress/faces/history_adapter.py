"""Compression added to an existing chat message history, its originals kept where they are.

``BaseChatMessageHistory`` is deprecated upstream since langchain-core 1.6.4 (removal in
2.0); `CompressingHistoryAdapter` is kept for ``RunnableWithMessageHistory`` users whose
messages already live elsewhere (Redis, files, ...). The running summary lives in a side
`SummaryStore`; the guarantees are weaker than `CompressingChatMessageHistory`'s (see the
class). ``RemoveMessage`` is refused.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Hashable, Sequence

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, RemoveMessage

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.rounds import ensure_ids
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.tail import keep_copies, with_ids
from langchain_histcompress.edge.compression_records import CompressionResult
from langchain_histcompress.edge.compressor import view
from langchain_histcompress.faces.history import (
    CompressOn,
    HistoryCompressor,
    _CompressingHistoryBase,
    _strict_check,
)
from langchain_histcompress.storage.base import SummaryStore, check_messages, check_session_id
from langchain_histcompress.storage.sql import open_store

__all__ = ["CompressingHistoryAdapter"]


class CompressingHistoryAdapter(_CompressingHistoryBase):
    """Add compression to an existing chat message history, keeping its originals in place.

    ``BaseChatMessageHistory`` is deprecated upstream since langchain-core 1.6.4 (removal
    in 2.0); this adapter is kept for ``RunnableWithMessageHistory`` users. LangGraph users
    should use the package's graph nodes.

    The wrapped history keeps every original message; the running summary lives in a
    side `SummaryStore` under ``key``. ``messages`` is the compressed model view built from
    the wrapped history's messages and the summary; `full_messages` is the wrapped
    history's own list.

    Weaker guarantees than `CompressingChatMessageHistory`:

    * There is no transaction across the two stores. A summary is committed with a version
      check in the side store only; if the wrapped history is cleared or edited behind the
      adapter's back, the summary may describe messages that are gone.
    * Coverage is by message id only. Messages are added as copies with a unique id (the
      caller's objects are not mutated); a wrapped history that drops ids gets positional
      ids at read time, which stay correct only while it is append-only.
    * Every read loads the whole wrapped history (O(history)); only the summary is cached.

    Args:
        inner: The history to wrap (any ``BaseChatMessageHistory``).
        compressor: A `RoundCompressor` (or any `HistoryCompressor`).
        summary_store: A `SummaryStore` or a connection string for `storage.open_store`.
            Use a key space not used by `CompressingChatMessageHistory` sessions.
        key: The summary's key in the side store; defaults to ``inner.session_id``.
        compress_on: ``"write"`` or ``"background"`` (see `CompressingChatMessageHistory`).
        raise_on_compression_error: Raise compression failures from ``add_messages``
            instead of logging a warning.

    Raises:
        ConfigurationError: An argument is invalid, or no key is given and ``inner`` has no
            string ``session_id``.

    Example:
        >>> from langchain_core.chat_history import InMemoryChatMessageHistory
        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> from langchain_histcompress.edge.compressor import RoundCompressor
        >>> from langchain_histcompress.storage import InMemoryHistoryStore
        >>> model = GenericFakeChatModel(messages=iter(
        ...     [AIMessage('{"ConversationSummary": "The user counted to one."}')]))
        >>> inner = InMemoryChatMessageHistory()
        >>> history = CompressingHistoryAdapter(
        ...     inner, key="user-1", summary_store=InMemoryHistoryStore(),
        ...     compressor=RoundCompressor(model, trigger=("rounds", 3), keep=("rounds", 1),
        ...                                token_counter="approximate"))
        >>> for n in range(3):
        ...     history.add_messages([HumanMessage(f"say {n}"), AIMessage(str(n))])
        >>> [m.type for m in history.messages], len(inner.messages)
        (['system', 'human', 'ai'], 6)
    """

    def __init__(
        self,
        inner: BaseChatMessageHistory,
        *,
        compressor: HistoryCompressor,
        summary_store: SummaryStore | str | os.PathLike[str],
        key: str | None = None,
        compress_on: CompressOn = "write",
        raise_on_compression_error: bool = False,
    ) -> None:
        """Validate the arguments; nothing is read or written yet."""
        if not isinstance(inner, BaseChatMessageHistory):
            msg = f"inner must be a BaseChatMessageHistory, got {type(inner).__name__}"
            raise ConfigurationError(msg)
        if compressor is None:
            msg = "compressor is required (wrap nothing to store without compression)"
            raise ConfigurationError(msg)
        if key is None:
            key = getattr(inner, "session_id", None)
            if not isinstance(key, str):
                msg = f"key is required: {type(inner).__name__} has no string session_id"
                raise ConfigurationError(msg)
        self.key = check_session_id(key, what="key")
        """The summary's key in the side store."""
        super().__init__(
            compressor=compressor,
            compress_on=compress_on,
            raise_on_compression_error=raise_on_compression_error,
        )
        self.inner = inner
        """The wrapped history holding the originals."""
        self.summary_store: SummaryStore = (
            summary_store if isinstance(summary_store, SummaryStore) else open_store(summary_store)
        )
        """The side store holding the running summary."""

    def __repr__(self) -> str:
        """Describe the adapter without message content."""
        return (
            f"{type(self).__name__}(inner={type(self.inner).__name__}, key={self.key!r}, "
            f"summary_store={self.summary_store!r})"
        )

    def _describe(self) -> str:
        return f"summary key {self.key!r}"

    @property
    def _background_key(self) -> Hashable:
        return ("adapter", id(self.inner), id(self.summary_store), self.key)

    def _with_ids(
        self, messages: Sequence[BaseMessage], summary: RunningSummary | None
    ) -> Sequence[BaseMessage]:
        # `ensure_ids(messages, namespace=key)`, derived only where compression reads (the
        # uncovered tail, with copies kept from the previous turn, see `core.tail.with_ids`)
        return with_ids(messages, summary, namespace=self.key, lead_too=True)

    def _compressed(self, messages: Sequence[BaseMessage], result: CompressionResult) -> None:
        keep_copies(messages, result.summary)

    def _view(
        self, originals: list[BaseMessage], summary: RunningSummary | None
    ) -> list[BaseMessage]:
        if self.compressor is None:
            return view(originals, summary)  # a broken history comes back repaired
        return self.compressor.view(self._with_ids(originals, summary), summary)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The compressed model view of the wrapped history."""
        self._settle()
        summary = self.summary_store.load_summary(self.key)
        return self._view(list(self.inner.messages), summary)

    async def aget_messages(self) -> list[BaseMessage]:
        """Async twin of ``messages``."""
        await self._asettle()
        summary = await self.summary_store.aload_summary(self.key)
        return self._view(list(await self.inner.aget_messages()), summary)

    @property
    def full_messages(self) -> list[BaseMessage]:
        """The wrapped history's messages, as it returns them."""
        return list(self.inner.messages)

    async def aget_full_messages(self) -> list[BaseMessage]:
        """Async twin of `full_messages`."""
        return list(await self.inner.aget_messages())

    @property
    def summary(self) -> RunningSummary | None:
        """The current running summary, or ``None``."""
        self._settle()
        return self.summary_store.load_summary(self.key)

    async def aget_summary(self) -> RunningSummary | None:
        """Async twin of `summary`."""
        await self._asettle()
        return await self.summary_store.aload_summary(self.key)

    def _stamp(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        return ensure_ids(messages, namespace=f"{self.key}\x00{uuid.uuid4().hex}")

    def _checked(self, batch: list[BaseMessage], stored: Sequence[BaseMessage]) -> None:
        """Refuse a batch the adapter cannot apply, before the wrapped history is touched."""
        for index, message in enumerate(batch):
            if isinstance(message, RemoveMessage):
                msg = (
                    f"messages[{index}] is a RemoveMessage: {type(self).__name__} cannot "
                    "remove messages (the wrapped history has no delete by id); nothing was "
                    "written. Use CompressingChatMessageHistory, or edit the wrapped history "
                    "and clear the adapter's summary"
                )
                raise ConfigurationError(msg)
        check = _strict_check(self.compressor)
        if check is not None:
            check([*stored, *batch])

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Add ``messages`` (copies with ids) to the wrapped history, then compress.

        Raises:
            ConfigurationError: The batch holds a ``RemoveMessage`` (nothing was written).
            InvalidHistoryError: With a strict compressor (``on_invalid_history="raise"``),
                the wrapped history would break the provider rules (nothing was written).
        """
        batch = check_messages(messages)
        if not batch:
            return
        stored = self.inner.messages if _strict_check(self.compressor) is not None else []
        self._checked(batch, stored)
        self.inner.add_messages(self._stamp(batch))
        self._after_write()

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async twin of ``add_messages``."""
        batch = check_messages(messages)
        if not batch:
            return
        strict = _strict_check(self.compressor) is not None
        stored = await self.inner.aget_messages() if strict else []
        self._checked(batch, stored)
        await self.inner.aadd_messages(self._stamp(batch))
        await self._aafter_write()

    def clear(self) -> None:
        """Clear the wrapped history and delete the summary."""
        self._settle()
        self.inner.clear()
        self.summary_store.clear(self.key)

    async def aclear(self) -> None:
        """Async twin of ``clear``."""
        await self._asettle()
        await self.inner.aclear()
        await self.summary_store.aclear(self.key)

    def _compression_input(self) -> tuple[Sequence[BaseMessage], RunningSummary | None]:
        summary = self.summary_store.load_summary(self.key)
        return self._with_ids(self.inner.messages, summary), summary

    async def _acompression_input(self) -> tuple[Sequence[BaseMessage], RunningSummary | None]:
        summary = await self.summary_store.aload_summary(self.key)
        return self._with_ids(await self.inner.aget_messages(), summary), summary

    def _commit(self, summary: RunningSummary, previous: RunningSummary | None) -> None:
        self.summary_store.put_summary(self.key, summary, previous=previous)

    async def _acommit(self, summary: RunningSummary, previous: RunningSummary | None) -> None:
        await self.summary_store.aput_summary(self.key, summary, previous=previous)
