"""Chat-message-history faces: a compressing history and the compression policy they share.

``BaseChatMessageHistory`` is deprecated upstream since langchain-core 1.6.4 (removal in
2.0); the history faces are adapters kept for ``RunnableWithMessageHistory`` users, and
LangGraph users should use the package's graph nodes instead.
`CompressingChatMessageHistory` stores the original transcript in a `HistoryStore` and
exposes the compressed model view as ``messages`` (system preamble, one summary message,
the uncovered tail); `~langchain_histcompress.faces.history_adapter.CompressingHistoryAdapter`
wraps an existing history. Both accept every history providers accept, always show one
they accept (a stored history they would reject is shown repaired, never changed in
storage), and never lose a message to a failed compression: appended messages are
committed before the summarizer runs, a failure changes no stored summary and is logged
(or raised with ``raise_on_compression_error=True``); cancellation always propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from abc import abstractmethod
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Literal, Protocol, runtime_checkable

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from langchain_histcompress.core.errors import (
    CompressionConflictError,
    ConfigurationError,
    HistCompressError,
    InvalidHistoryError,
    SummarizationError,
)
from langchain_histcompress.core.rounds import ACCEPTED_KINDS, validate_history
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.edge.compression_records import CompressionResult
from langchain_histcompress.edge.compressor import view
from langchain_histcompress.storage.base import (
    HistoryCheck,
    HistoryStore,
    check_messages,
    check_session_id,
)
from langchain_histcompress.storage.sql import open_store

__all__ = [
    "CompressOn",
    "CompressingChatMessageHistory",
    "HistoryCompressor",
]

logger = logging.getLogger(__name__)

CompressOn = Literal["write", "background"]
"""When compression runs: inside ``add_messages`` or in a background thread after it."""

_COMPRESS_ON = ("write", "background")


@runtime_checkable
class HistoryCompressor(Protocol):
    """What the history faces need from a compressor (`RoundCompressor` provides it)."""

    def compress(
        self, messages: Sequence[BaseMessage], summary: RunningSummary | None = None
    ) -> CompressionResult:
        """Fold due rounds of ``messages`` into ``summary``; raise on model failure."""

    async def acompress(
        self, messages: Sequence[BaseMessage], summary: RunningSummary | None = None
    ) -> CompressionResult:
        """Async twin of `compress`."""

    def view(
        self, messages: Sequence[BaseMessage], summary: RunningSummary | None = None
    ) -> list[BaseMessage]:
        """The model view of ``messages`` with ``summary`` (no model call)."""


def _strict_check(compressor: object) -> HistoryCheck | None:
    """The check a strict compressor (``on_invalid_history="raise"``) needs before a write.

    A strict compressor raises on a history that breaks the provider rules; storing such a
    write first would make every later compression of the session fail. So the write is
    checked before anything is stored, and refused when the history it would leave breaks
    the rules the compressor enforces (`rounds.validate_history`, accepted kinds aside).
    """
    if getattr(compressor, "on_invalid_history", None) != "raise":
        return None

    def check(messages: Sequence[BaseMessage]) -> None:
        found = [v for v in validate_history(messages) if v.kind not in ACCEPTED_KINDS]
        if found:
            hint = (
                "the compressor is strict (on_invalid_history='raise'), so nothing was "
                "written; send the missing messages with this batch, or remove the offending "
                "ones with RemoveMessage"
            )
            raise InvalidHistoryError(found, hint=hint)

    return check


# --------------------------------------------------------------------------- background runs

_BG = threading.Condition()
_BG_JOBS: dict[Hashable, Callable[[], None]] = {}
_BG_RUNNING: set[Hashable] = set()
_BG_LOCAL = threading.local()


def _submit_background(key: Hashable, job: Callable[[], None]) -> None:
    """Run ``job`` in the background; one worker per key, the latest pending job wins."""
    with _BG:
        _BG_JOBS[key] = job
        if key in _BG_RUNNING:
            return
        _BG_RUNNING.add(key)
    threading.Thread(
        target=_background_worker, args=(key,), name="histcompress-history", daemon=True
    ).start()


def _background_worker(key: Hashable) -> None:
    _BG_LOCAL.key = key
    while True:
        with _BG:
            job = _BG_JOBS.pop(key, None)
            if job is None:
                _BG_RUNNING.discard(key)
                _BG.notify_all()
                return
        try:
            job()
        except Exception:  # jobs report their own errors; never kill the worker silently
            logger.exception("background compression job crashed")


def _wait_background(key: Hashable, timeout: float | None) -> bool:
    if getattr(_BG_LOCAL, "key", None) == key:
        return True  # called from the worker itself
    with _BG:
        return _BG.wait_for(lambda: key not in _BG_RUNNING and key not in _BG_JOBS, timeout)


def _background_busy(key: Hashable) -> bool:
    with _BG:
        return key in _BG_RUNNING or key in _BG_JOBS


# --------------------------------------------------------------------------- shared base


class _CompressingHistoryBase(BaseChatMessageHistory):
    """Compression policy shared by both faces: when to compress and how failures behave."""

    def __init__(
        self,
        *,
        compressor: HistoryCompressor | None,
        compress_on: CompressOn,
        raise_on_compression_error: bool,
    ) -> None:
        if compressor is not None and not all(
            callable(getattr(compressor, name, None)) for name in ("compress", "acompress", "view")
        ):
            msg = (
                "compressor must provide compress, acompress and view (e.g. a RoundCompressor), "
                f"got {type(compressor).__name__}"
            )
            raise ConfigurationError(msg)
        if compress_on not in _COMPRESS_ON:
            msg = f"compress_on must be one of {list(_COMPRESS_ON)}, got {compress_on!r}"
            raise ConfigurationError(msg)
        if not isinstance(raise_on_compression_error, bool):
            msg = f"raise_on_compression_error must be a bool, got {raise_on_compression_error!r}"
            raise ConfigurationError(msg)
        self.compressor = compressor
        """The compressor, or ``None`` (history only: no compression)."""
        self.compress_on: CompressOn = compress_on
        """``"write"`` (inside ``add_messages``) or ``"background"`` (after it returns)."""
        self.raise_on_compression_error = raise_on_compression_error
        """Raise compression failures from ``add_messages`` instead of logging them."""
        self.last_compression_error: Exception | None = None
        """The error of the latest failed compression by this object (``None`` after a
        successful one)."""

    # -- hooks ---------------------------------------------------------------------

    @property
    @abstractmethod
    def _background_key(self) -> Hashable:
        """Identifies the stored session across history objects of this process."""

    @abstractmethod
    def _compression_input(self) -> tuple[Sequence[BaseMessage], RunningSummary | None]:
        """Messages to pass to the compressor and the summary they start from."""

    @abstractmethod
    async def _acompression_input(self) -> tuple[Sequence[BaseMessage], RunningSummary | None]:
        """Async twin of `_compression_input`."""

    @abstractmethod
    def _commit(self, summary: RunningSummary, previous: RunningSummary | None) -> None:
        """Store ``summary`` as the successor of ``previous`` (version-checked)."""

    @abstractmethod
    async def _acommit(self, summary: RunningSummary, previous: RunningSummary | None) -> None:
        """Async twin of `_commit`."""

    def _describe(self) -> str:
        return type(self).__name__

    # -- compression ---------------------------------------------------------------

    def _failed(self, exc: Exception, *, may_raise: bool) -> None:
        self.last_compression_error = exc
        if may_raise and self.raise_on_compression_error:
            if isinstance(exc, HistCompressError):
                raise exc
            msg = f"compression failed: {type(exc).__name__}"
            raise SummarizationError(msg) from exc
        # package errors are expected failures (their text may quote the model's answer, so
        # only the type is logged); anything else is a bug whose traceback matters
        logger.warning(
            "compression of %s failed (%s); the uncompressed view is kept and the next "
            "write retries",
            self._describe(),
            type(exc).__name__,
            exc_info=None if isinstance(exc, HistCompressError) else exc,
        )
        logger.debug("compression failure details", exc_info=exc)

    def _compressed(self, messages: Sequence[BaseMessage], result: CompressionResult) -> None:
        """Called with what was compressed and the outcome (before it is committed)."""

    def _accept(
        self, result: CompressionResult, previous: RunningSummary | None
    ) -> RunningSummary | None:
        summary = result.summary
        if not result.compressed or summary is None or summary is previous:
            return None
        return summary

    @contextlib.contextmanager
    def _compression_outcome(self, *, may_raise: bool) -> Iterator[None]:
        """Apply the failure policy to the compression run inside the block.

        A conflict (another writer committed first) is fine; any other ``Exception`` is
        handled by `_failed` (logged, or raised when allowed and configured). Cancellation
        and other ``BaseException`` propagate.
        """
        try:
            yield
        except CompressionConflictError:
            logger.info(
                "%s: another writer compressed first; keeping its summary", self._describe()
            )
        except Exception as exc:
            self._failed(exc, may_raise=may_raise)
            return
        self.last_compression_error = None

    def _compress_now(self, *, may_raise: bool = True) -> None:
        compressor = self.compressor
        if compressor is None:
            return
        with self._compression_outcome(may_raise=may_raise):
            messages, previous = self._compression_input()
            result = compressor.compress(messages, previous)
            self._compressed(messages, result)
            summary = self._accept(result, previous)
            if summary is not None:
                self._commit(summary, previous)

    async def _acompress_now(self) -> None:
        compressor = self.compressor
        if compressor is None:
            return
        with self._compression_outcome(may_raise=True):
            messages, previous = await self._acompression_input()
            result = await compressor.acompress(messages, previous)
            self._compressed(messages, result)
            summary = self._accept(result, previous)
            if summary is not None:
                await self._acommit(summary, previous)

    def _handed_to_background(self) -> bool:
        """Start a background compression when so configured; ``True`` when started."""
        if self.compress_on != "background":
            return False
        _submit_background(self._background_key, lambda: self._compress_now(may_raise=False))
        return True

    def _after_write(self) -> None:
        if self.compressor is not None and not self._handed_to_background():
            self._compress_now()

    async def _aafter_write(self) -> None:
        if self.compressor is not None and not self._handed_to_background():
            await self._acompress_now()

    def _settle(self) -> None:
        """Wait for this session's in-flight background compression (keeps reads stable)."""
        _wait_background(self._background_key, None)

    async def _asettle(self) -> None:
        if _background_busy(self._background_key):
            await asyncio.to_thread(_wait_background, self._background_key, None)

    def wait_for_compression(self, timeout: float | None = None) -> bool:
        """Block until no background compression of this session is running in this process.

        Args:
            timeout: Seconds to wait at most (``None``: no limit).

        Returns:
            ``True`` when idle, ``False`` when ``timeout`` expired first.
        """
        return _wait_background(self._background_key, timeout)

    async def await_for_compression(self, timeout: float | None = None) -> bool:
        """Async twin of `wait_for_compression` (waits in a worker thread)."""
        if not _background_busy(self._background_key):
            return True
        return await asyncio.to_thread(_wait_background, self._background_key, timeout)


# --------------------------------------------------------------------------- the history


class CompressingChatMessageHistory(_CompressingHistoryBase):
    """A chat message history that stores every message and shows a compressed view.

    ``BaseChatMessageHistory`` is deprecated upstream since langchain-core 1.6.4 (removal
    in 2.0); this class is an adapter kept for ``RunnableWithMessageHistory`` users.
    LangGraph users should use the package's graph nodes.

    * ``messages`` / `aget_messages`: the model view: system preamble, one summary
      message, then every message the summary does not cover, verbatim. Reading costs
      O(uncovered tail) (the summary is cached per version), and two reads with no write in
      between return equal lists (``RunnableWithMessageHistory`` relies on it).
    * `full_messages` / `aget_full_messages`: the whole original transcript.
    * `summary`: the current `RunningSummary` or ``None``.
    * ``add_messages`` / ``aadd_messages``: append in one transaction (messages without
      an id get a generated id on a copy; caller objects are never mutated), then compress:
      the uncovered tail and summary are loaded, ``compressor.compress`` runs outside any
      transaction, and a new summary is committed with a version check. If another writer
      committed first, its summary stands and nothing else happens.
    * ``RemoveMessage`` in a batch deletes, as in a LangGraph state and with the coverage
      rules of the graph node, in the same transaction as the rest of the batch: an
      uncovered message leaves the view; a covered one leaves the record (as `prune` does)
      and the summary still represents it; ``RemoveMessage(id=REMOVE_ALL_MESSAGES)``
      deletes the messages before it *and* the summaries (the conversation was replaced;
      the node drops its summary then too). A removal naming no stored message, or a new
      message reusing the id of one removed in the same batch, refuses the whole batch.
    * With a strict compressor (``on_invalid_history="raise"``), the history a batch would
      leave is checked in the write's transaction, and a batch that breaks the provider
      rules is refused with `InvalidHistoryError`: a stray tool result is never stored, so
      a strict session never gets stuck. A session stored broken (by a lenient writer) is
      mended by a batch that removes the offending messages.
    * ``clear`` / ``aclear``: delete this session's messages and summaries only.

    A refused batch writes nothing: storage stays byte-identical and the next valid batch
    is accepted. Originals are never deleted unless ``prune_covered=True`` (after each
    summary commit), `prune` is called, or a ``RemoveMessage`` names them.

    Args:
        session_id: The conversation's id (a non-empty string; only ever compared exactly).
        connection: Where to store: a `HistoryStore` instance, a path, ``sqlite:///path``,
            ``":memory:"``, ``postgresql://...``; ``None`` (default) is the SQLite file
            ``histcompress.sqlite`` in the working directory. Strings share one store per
            database in the process (`storage.open_store`).
        compressor: A `RoundCompressor` (or any `HistoryCompressor`); ``None`` stores without
            compressing (an existing summary is still shown).
        compress_on: ``"write"`` compresses inside ``add_messages``; ``"background"``
            starts a daemon thread and returns at once (with the compressor's sync
            ``compress``). In background mode, reads of the session in this process wait
            for the in-flight compression, so a view never changes between two reads.
        prune_covered: Delete covered originals right after each summary commit.
        raise_on_compression_error: Raise compression failures (typed: `SummarizationError`,
            `StorageError`, ...) from ``add_messages`` instead of logging a warning. The
            appended messages are stored either way; background failures are only logged
            (see ``last_compression_error``).

    Raises:
        ConfigurationError: An argument is invalid (before anything is opened or written).

    Example:
        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> from langchain_histcompress.edge.compressor import RoundCompressor
        >>> from langchain_histcompress.storage import InMemoryHistoryStore
        >>> model = GenericFakeChatModel(messages=iter(
        ...     [AIMessage('{"ConversationSummary": "The user counted to one."}')]))
        >>> history = CompressingChatMessageHistory(
        ...     "user-1", connection=InMemoryHistoryStore(),
        ...     compressor=RoundCompressor(model, trigger=("rounds", 3), keep=("rounds", 1),
        ...                                token_counter="approximate"))
        >>> for n in range(3):
        ...     history.add_messages([HumanMessage(f"say {n}"), AIMessage(str(n))])
        >>> [m.type for m in history.messages], len(history.full_messages)
        (['system', 'human', 'ai'], 6)
        >>> history.summary.text
        'The user counted to one.'
    """

    def __init__(
        self,
        session_id: str,
        *,
        connection: str | os.PathLike[str] | HistoryStore | None = None,
        compressor: HistoryCompressor | None = None,
        compress_on: CompressOn = "write",
        prune_covered: bool = False,
        raise_on_compression_error: bool = False,
    ) -> None:
        """Validate the arguments; the store connects lazily on first use."""
        self.session_id = check_session_id(session_id)
        """The conversation's id."""
        if not isinstance(prune_covered, bool):
            msg = f"prune_covered must be a bool, got {prune_covered!r}"
            raise ConfigurationError(msg)
        super().__init__(
            compressor=compressor,
            compress_on=compress_on,
            raise_on_compression_error=raise_on_compression_error,
        )
        self.store: HistoryStore = (
            connection if isinstance(connection, HistoryStore) else open_store(connection)
        )
        """The store holding this session."""
        self.prune_covered = prune_covered
        """Whether covered originals are deleted after each summary commit."""

    def __repr__(self) -> str:
        """Describe the history without message content."""
        return (
            f"{type(self).__name__}(session_id={self.session_id!r}, store={self.store!r}, "
            f"compress_on={self.compress_on!r})"
        )

    def _describe(self) -> str:
        return f"session {self.session_id!r}"

    @property
    def _background_key(self) -> Hashable:
        return ("history", id(self.store), self.session_id)

    # -- reads ---------------------------------------------------------------------

    def _view(
        self, uncovered: Sequence[BaseMessage], summary: RunningSummary | None
    ) -> list[BaseMessage]:
        if self.compressor is not None:  # within the budget; a broken history is repaired
            return self.compressor.view(uncovered, summary)
        return view(uncovered, summary)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The compressed model view: preamble, summary message, uncovered messages."""
        self._settle()
        snapshot = self.store.snapshot(self.session_id)
        return self._view(snapshot.uncovered, snapshot.summary)

    async def aget_messages(self) -> list[BaseMessage]:
        """Async twin of ``messages``."""
        await self._asettle()
        snapshot = await self.store.asnapshot(self.session_id)
        return self._view(snapshot.uncovered, snapshot.summary)

    @property
    def full_messages(self) -> list[BaseMessage]:
        """Every stored original message, in order (covered ones included unless pruned)."""
        self._settle()
        return self.store.load_messages(self.session_id)

    async def aget_full_messages(self) -> list[BaseMessage]:
        """Async twin of `full_messages`."""
        await self._asettle()
        return await self.store.aload_messages(self.session_id)

    @property
    def summary(self) -> RunningSummary | None:
        """The current running summary, or ``None`` before the first compression."""
        self._settle()
        return self.store.load_summary(self.session_id)

    async def aget_summary(self) -> RunningSummary | None:
        """Async twin of `summary`."""
        await self._asettle()
        return await self.store.aload_summary(self.session_id)

    # -- writes --------------------------------------------------------------------

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Apply ``messages`` (one transaction), then compress per ``compress_on``.

        Messages are appended; a ``RemoveMessage`` removes a stored message and
        ``RemoveMessage(id=REMOVE_ALL_MESSAGES)`` starts the session over, as in a LangGraph
        state (see the class docstring). With a strict compressor
        (``on_invalid_history="raise"``) the history the write would leave is checked
        first, and a write that breaks the provider rules is refused.

        Raises:
            InvalidHistoryError: A message id is already stored in this session, a
                ``RemoveMessage`` names no stored message, or (strict compressor) the write
                would leave a history a provider rejects. Nothing was written.
            ConfigurationError: A message cannot be serialized (nothing was written).
            StorageError: The store failed (nothing was written).
            HistCompressError: Only with ``raise_on_compression_error=True``: compression
                failed after the messages were stored.
        """
        batch = check_messages(messages)
        if not batch:
            return
        self.store.update(self.session_id, batch, check=_strict_check(self.compressor))
        self._after_write()

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async twin of ``add_messages``."""
        batch = check_messages(messages)
        if not batch:
            return
        await self.store.aupdate(self.session_id, batch, check=_strict_check(self.compressor))
        await self._aafter_write()

    def clear(self) -> None:
        """Delete this session's messages and summaries (no other session is touched)."""
        self._settle()
        self.store.clear(self.session_id)

    async def aclear(self) -> None:
        """Async twin of ``clear``."""
        await self._asettle()
        await self.store.aclear(self.session_id)

    def compress(self) -> None:
        """Run one compression now (as a write would), e.g. after changing the compressor."""
        self._settle()
        self._compress_now()

    async def acompress(self) -> None:
        """Async twin of `compress`."""
        await self._asettle()
        await self._acompress_now()

    def prune(self) -> int:
        """Delete this session's covered originals now; return how many were deleted."""
        self._settle()
        return self.store.prune_covered(self.session_id)

    async def aprune(self) -> int:
        """Async twin of `prune`."""
        await self._asettle()
        return await self.store.aprune_covered(self.session_id)

    # -- compression hooks ---------------------------------------------------------

    def _compression_input(self) -> tuple[Sequence[BaseMessage], RunningSummary | None]:
        snapshot = self.store.snapshot(self.session_id)
        return list(snapshot.uncovered), snapshot.summary

    async def _acompression_input(self) -> tuple[Sequence[BaseMessage], RunningSummary | None]:
        snapshot = await self.store.asnapshot(self.session_id)
        return list(snapshot.uncovered), snapshot.summary

    def _commit(self, summary: RunningSummary, previous: RunningSummary | None) -> None:
        self.store.commit_compression(self.session_id, summary, previous=previous)
        if self.prune_covered:
            self.store.prune_covered(self.session_id)

    async def _acommit(self, summary: RunningSummary, previous: RunningSummary | None) -> None:
        await self.store.acommit_compression(self.session_id, summary, previous=previous)
        if self.prune_covered:
            await self.store.aprune_covered(self.session_id)
