"""A LangGraph node that keeps a fact memory up to date, per thread or per user.

`FactExtractionNode` finds the *completed* rounds it has not processed yet (every round
followed by a newer human message, and the latest one when it ends with an answer without
tool calls), sends them in batches to a `FactExtractor`, and writes the changes to the
``facts`` state key through the `merge_facts` reducer, with a cursor (the last processed
message id) and a report. Each round is processed once, so a resumed thread never
re-extracts. With a ``store``, facts persist per user in the namespace
``("histcompress", "facts", <user_id>)``, built only from ``config["configurable"]``
values and matched exactly (``acme`` never sees ``acme-corp``'s facts). The reasoning is
in ``docs/design/faces.md``.
"""

from __future__ import annotations

import itertools
import logging
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.store.base import BaseStore, Item, PutOp
from typing_extensions import TypedDict

from langchain_histcompress.context.fact_cache import FactStateCache
from langchain_histcompress.core.errors import ConfigurationError, StorageError
from langchain_histcompress.core.facts import Fact, merge_facts
from langchain_histcompress.core.rounds import ensure_ids
from langchain_histcompress.edge.extraction import ExtractionReport, FactExtractor
from langchain_histcompress.edge.steps import Steps, Twin, arun_steps, run_steps
from langchain_histcompress.faces._graph_node import GraphNode
from langchain_histcompress.faces._round_backlog import RoundScans
from langchain_histcompress.recall.retrieval import validate_namespace

__all__ = [
    "DEFAULT_NAMESPACE_PREFIX",
    "FactExtractionNode",
    "FactsState",
    "facts_namespace",
]

logger = logging.getLogger(__name__)


DEFAULT_NAMESPACE_PREFIX: tuple[str, ...] = ("histcompress", "facts")
"""Store namespace prefix of per-user facts; the user parts follow it."""

NamespaceSpec = Sequence[str] | Callable[[RunnableConfig], Sequence[str]]
"""Config keys whose values name the tenant, or a callable config -> tenant parts."""


class FactsState(TypedDict, total=False):
    """Graph state keys written by `FactExtractionNode` (combine with a messages state)."""

    facts: Annotated[dict[str, dict[str, Any]], merge_facts]
    """Facts by id, as JSON dicts (`Fact.to_state`); reduced by `merge_facts`."""
    facts_processed_through: str | None
    """Id of the last message whose round was sent to the extractor."""
    facts_extraction: dict[str, Any]
    """Report of the node's last run (status ``ok`` / ``empty`` / ``failed`` / ``skipped``)."""


def _encode_part(value: str) -> str:
    # Injective: '%' first, then '.', which store namespaces do not allow.
    return value.replace("%", "%25").replace(".", "%2E")


def facts_namespace(
    config: RunnableConfig | None,
    *,
    keys: NamespaceSpec = ("user_id",),
    prefix: Sequence[str] = DEFAULT_NAMESPACE_PREFIX,
) -> tuple[str, ...]:
    """The store namespace of a tenant's facts, built only from ``config["configurable"]``.

    Each tenant part must be a non-empty string; ``%`` and ``.`` are percent-encoded so any
    user id is a valid, distinct namespace label.

    Args:
        config: The run's config.
        keys: ``configurable`` keys naming the tenant (in order), or a callable returning
            the tenant parts from the config.
        prefix: Namespace parts put before the tenant parts.

    Raises:
        ConfigurationError: A key is missing, or a part is not a non-empty string.

    Example:
        >>> facts_namespace({"configurable": {"user_id": "ana.b@acme.com"}})
        ('histcompress', 'facts', 'ana%2Eb@acme%2Ecom')
    """
    configurable = dict((config or {}).get("configurable") or {})
    if callable(keys):
        parts = keys(config or {})
        if isinstance(parts, str) or not isinstance(parts, Sequence) or not parts:
            msg = f"namespace callable must return a non-empty tuple of strings, got {parts!r}"
            raise ConfigurationError(msg)
    else:
        if isinstance(keys, str) or not keys:
            msg = f"namespace keys must be a non-empty tuple of config keys, got {keys!r}"
            raise ConfigurationError(msg)
        parts = []
        for key in keys:
            if key not in configurable:
                msg = (
                    f"fact memory needs config['configurable'][{key!r}] to choose the "
                    "store namespace"
                )
                raise ConfigurationError(msg)
            parts.append(configurable[key])
    for part in parts:
        if not isinstance(part, str) or not part.strip():
            msg = f"namespace values must be non-empty strings, got {part!r}"
            raise ConfigurationError(msg)
    return validate_namespace((*prefix, *(_encode_part(p) for p in parts)))


def _round_complete_at(last: BaseMessage) -> bool:
    """Whether a round ending with ``last`` is complete (an answer without tool calls)."""
    return isinstance(last, AIMessage) and not last.tool_calls


@dataclass(frozen=True)
class _Plan:
    messages: Sequence[BaseMessage]
    """The history (with ids)."""
    starts: Sequence[int]
    """Indices in ``messages`` of the round starts after the cursor (shared: read only)."""
    rounds: int
    """Rounds after the cursor (``starts[:rounds]``), the last one possibly incomplete."""
    complete: int
    """Completed rounds after the cursor."""
    count: int
    """Batches this run may extract."""
    batch_size: int
    """Rounds per batch."""

    def batch(self, index: int) -> tuple[BaseMessage, ...]:
        """The messages of batch ``index`` (built when it is extracted, not before)."""
        return tuple(self.messages[self.starts[index * self.batch_size] : self._end(index)])

    def _end(self, index: int) -> int:
        after = (index + 1) * self.batch_size
        return self.starts[after] if after < self.rounds else len(self.messages)

    def last_id(self, index: int) -> str | None:
        """Id of the last message of batch ``index``."""
        return self.messages[self._end(index) - 1].id

    def pending_after(self, processed: int) -> int:
        """Completed rounds still unprocessed after ``processed`` batches."""
        return self.complete - processed * self.batch_size


def _node_extractor(
    model: Runnable[LanguageModelInput, BaseMessage] | None,
    extractor: FactExtractor | None,
    **options: Any,
) -> FactExtractor:
    """The node's extractor: ``extractor``, or one built for ``model`` with ``options``."""
    if extractor is None:
        if model is None:
            msg = "FactExtractionNode needs a model or an extractor"
            raise ConfigurationError(msg)
        extractor = FactExtractor(model, **options)
    elif model is not None:
        msg = "pass either model or extractor, not both"
        raise ConfigurationError(msg)
    if not isinstance(extractor, FactExtractor):
        msg = f"extractor must be a FactExtractor, not {type(extractor).__name__}"
        raise ConfigurationError(msg)
    return extractor


def _check_optional_count(name: str, value: object) -> None:
    """Raise `ConfigurationError` unless ``value`` is ``None`` or an int >= 1."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        msg = f"{name} must be None or an int >= 1, got {value!r}"
        raise ConfigurationError(msg)


def _check_state_keys(keys: Mapping[str, object]) -> None:
    """Raise `ConfigurationError` unless the state keys are distinct non-empty strings."""
    for label, value in keys.items():
        if not isinstance(value, str) or not value:
            msg = f"{label} must be a non-empty string, got {value!r}"
            raise ConfigurationError(msg)
    if len(set(keys.values())) != len(keys):
        msg = f"state keys must be distinct, got {keys}"
        raise ConfigurationError(msg)


def _check_namespace_spec(spec: NamespaceSpec) -> NamespaceSpec:
    """``namespace_from_config`` validated: a callable, or its config keys as a tuple."""
    if callable(spec):
        return spec
    if isinstance(spec, str) or not spec:
        msg = (
            "namespace_from_config must be a non-empty tuple of config keys or a "
            f"callable, got {spec!r}"
        )
        raise ConfigurationError(msg)
    return tuple(spec)


class FactExtractionNode(GraphNode):
    """LangGraph node extracting facts from completed, unprocessed rounds.

    Use it as ``graph.add_node("facts", node)``; it supports ``invoke`` and ``ainvoke``
    (true async model and store calls). A failed extraction does not break the graph: it
    is reported in the status key and the rounds are retried on the next run (unless
    ``raise_on_error=True``, which raises `SummarizationError`).

    Args:
        model: Chat model used for extraction (a cheap one is fine).
        batch_rounds: Completed rounds per model call; fewer pending rounds wait. ``None``:
            every completed round pending when the node runs, in one call (run the node at
            the points where extracting pays, e.g. when the prompt cache is cold anyway).
        max_batches_per_run: Bound on model calls per run (``None``: all full batches).
        state_key: State key of the facts.
        messages_key: State key of the conversation.
        cursor_key: State key of the processed-through message id.
        status_key: State key of the run report.
        store: Store for per-user facts shared across threads.
        use_runtime_store: Use the graph's store (``compile(store=...)``) when ``store`` is
            not given.
        namespace_from_config: ``configurable`` keys naming the user, or a callable
            config -> tenant parts (see `facts_namespace`).
        namespace_prefix: Store namespace prefix.
        raise_on_error: Raise `SummarizationError` when extraction fails.
        max_retries: Retries of transient model errors and unusable answers.
        retry_backoff: Seconds before the first retry (doubled each time).
        timeout: Seconds to wait for one extraction answer (``None``: no limit).
        ttl_by_type: Default lifetime of new facts per type.
        max_prompt_facts: At most this many current facts are shown to the model.
        extractor: A configured `FactExtractor` to use instead of building one from the
            arguments above.
        now: Clock (returns an aware datetime); default UTC now.
        name: Run name of the node.

    Example:
        >>> from langchain_core.language_models.fake_chat_models import (
        ...     FakeMessagesListChatModel)
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> from langgraph.graph import END, START, StateGraph
        >>> from langchain_histcompress import HistCompressState
        >>> extractor = FakeMessagesListChatModel(responses=[AIMessage(
        ...     '[{"op": "ADD", "type": "preference", "content": "Prefers window seats",'
        ...     ' "confidence": 0.9, "source_ids": ["h1"]}]')])
        >>> graph = StateGraph(HistCompressState)
        >>> _ = graph.add_node("extract_facts", FactExtractionNode(extractor, batch_rounds=1))
        >>> _ = graph.add_edge(START, "extract_facts")
        >>> _ = graph.add_edge("extract_facts", END)
        >>> state = graph.compile().invoke({"messages": [
        ...     HumanMessage("I always pick a window seat", id="h1"),
        ...     AIMessage("Noted.", id="a1"), HumanMessage("Book Lisbon", id="h2")]})
        >>> [(f["content"], f["source_ids"]) for f in state["facts"].values()]
        [('Prefers window seats', ['h1'])]

        Run on its own, a node returns the state update:

        >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        >>> model = GenericFakeChatModel(messages=iter([AIMessage(
        ...     '[{"op": "ADD", "type": "entity", "content": "User is Ana",'
        ...     ' "source_ids": ["h1"]}]')]))
        >>> node = FactExtractionNode(model, batch_rounds=1)
        >>> update = node.invoke({"messages": [HumanMessage("I am Ana", id="h1"),
        ...                                    AIMessage("Hi Ana!", id="a1")]})
        >>> update["facts_extraction"]["status"], update["facts_processed_through"]
        ('ok', 'a1')
        >>> [fact["content"] for fact in merge_facts({}, update["facts"]).values()]
        ['User is Ana']
    """

    def __init__(
        self,
        model: Runnable[LanguageModelInput, BaseMessage] | None = None,
        *,
        batch_rounds: int | None = 2,
        max_batches_per_run: int | None = None,
        state_key: str = "facts",
        messages_key: str = "messages",
        cursor_key: str = "facts_processed_through",
        status_key: str = "facts_extraction",
        store: BaseStore | None = None,
        use_runtime_store: bool = True,
        namespace_from_config: NamespaceSpec = ("user_id",),
        namespace_prefix: Sequence[str] = DEFAULT_NAMESPACE_PREFIX,
        raise_on_error: bool = False,
        max_retries: int = 2,
        retry_backoff: float = 0.5,
        timeout: float | None = 60.0,
        ttl_by_type: Mapping[str, timedelta] | None = None,
        max_prompt_facts: int = 100,
        extractor: FactExtractor | None = None,
        now: Callable[[], datetime] | None = None,
        name: str = "fact_extraction",
    ) -> None:
        """Validate and store the configuration (see the class docstring)."""
        extractor = _node_extractor(
            model,
            extractor,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
            timeout=timeout,
            raise_on_error=raise_on_error,
            ttl_by_type=ttl_by_type,
            max_prompt_facts=max_prompt_facts,
        )
        _check_optional_count("batch_rounds", batch_rounds)
        _check_optional_count("max_batches_per_run", max_batches_per_run)
        _check_state_keys(
            {
                "state_key": state_key,
                "messages_key": messages_key,
                "cursor_key": cursor_key,
                "status_key": status_key,
            }
        )
        if store is not None and not isinstance(store, BaseStore):
            msg = f"store must be a LangGraph BaseStore, not {type(store).__name__}"
            raise ConfigurationError(msg)
        namespace_from_config = _check_namespace_spec(namespace_from_config)
        validate_namespace(tuple(namespace_prefix))
        self.extractor = extractor
        self.batch_rounds = batch_rounds
        self.max_batches_per_run = max_batches_per_run
        self.state_key = state_key
        self.messages_key = messages_key
        self.cursor_key = cursor_key
        self.status_key = status_key
        self.store = store
        self.use_runtime_store = use_runtime_store
        self.namespace_from_config = namespace_from_config
        self.namespace_prefix = tuple(namespace_prefix)
        self.name = name
        self._now = now
        self._state_facts = FactStateCache()
        self._scans = RoundScans()
        self._bind_body(name)

    # -- runnable faces ----------------------------------------------------------------

    def __call__(
        self, state: Mapping[str, Any], config: RunnableConfig | None = None
    ) -> dict[str, Any]:
        """Same as `invoke`."""
        return self.invoke(state, config)

    # -- shared pieces -----------------------------------------------------------------

    def _clock(self) -> datetime:
        value = self._now() if self._now is not None else datetime.now(timezone.utc)
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value

    def _bad_messages(self) -> ConfigurationError:
        return ConfigurationError(f"state[{self.messages_key!r}] must be a list of messages")

    def _raw_messages(self, state: Mapping[str, Any]) -> Sequence[BaseMessage]:
        if not isinstance(state, Mapping):
            msg = f"node input must be a state mapping, not {type(state).__name__}"
            raise ConfigurationError(msg)
        messages = state.get(self.messages_key) or []
        if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
            raise self._bad_messages()
        return messages

    @staticmethod
    def _after_cursor(messages: Sequence[BaseMessage], cursor: str) -> int | None:
        """Index after the cursor message, searching back from the end (O(new messages)).

        ``None`` when a message without an id comes first (ids must then be derived for the
        whole history) or the cursor is not found.
        """
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if not isinstance(message, BaseMessage) or not message.id:
                return None
            if message.id == cursor:
                return index + 1
        return None

    def _plan(self, state: Mapping[str, Any]) -> _Plan:
        """The batches after the cursor, reading only the messages added since the last run.

        The cursor is found by searching the history backwards from its end (or where the
        last run found it, when its work failed and the cursor stayed), and the round
        starts scanned before are reused (`RoundScans`), so a backlog left by failing calls
        is not scanned again on every run. Histories with id-less messages get
        deterministic ids for every message first (`rounds.ensure_ids`), as the cursor was
        recorded with them.
        """
        raw = self._raw_messages(state)
        cursor = state.get(self.cursor_key) or ""
        found = None
        if cursor:
            start = self._scans.begin_after(raw, cursor)
            if start is None:
                start = self._after_cursor(raw, cursor)
            if start is not None:
                found = self._scans.round_starts(raw, start, cursor)
        else:
            found = self._scans.round_starts(raw, 0, cursor)
        messages: Sequence[BaseMessage] = raw
        if found is None:
            messages, start = self._derived_ids(raw, cursor)
            found = self._scans.round_starts(messages, start, cursor)
            if found is None:  # pragma: no cover - every message has an id now
                raise self._bad_messages()
        starts, known = found
        complete = known
        if known and not _round_complete_at(messages[-1]):
            complete -= 1
        size = self.batch_rounds or max(1, complete)
        count = complete // size
        if self.max_batches_per_run is not None:
            count = min(count, self.max_batches_per_run)
        return _Plan(messages, starts, known, complete, count, size)

    def _derived_ids(
        self, raw: Sequence[BaseMessage], cursor: str
    ) -> tuple[Sequence[BaseMessage], int]:
        """The history with derived ids (`rounds.ensure_ids`) and the index after the cursor."""
        if not all(isinstance(m, BaseMessage) for m in raw):
            raise self._bad_messages()
        messages = ensure_ids(raw)
        start = 0
        if cursor:
            for index in range(len(messages) - 1, -1, -1):
                if messages[index].id == cursor:
                    start = index + 1
                    break
            else:
                logger.warning(
                    "fact cursor message is no longer in the history; reprocessing the "
                    "remaining %d messages",
                    len(messages),
                )
        return messages, start

    def _store(self) -> BaseStore | None:
        if self.store is not None:
            return self.store
        if not self.use_runtime_store:
            return None
        from langgraph.config import get_store

        try:
            return get_store()
        except (RuntimeError, KeyError, AttributeError):
            return None

    def _namespace(self, config: RunnableConfig) -> tuple[str, ...]:
        return facts_namespace(
            config, keys=self.namespace_from_config, prefix=self.namespace_prefix
        )

    def _parse_items(
        self, items: Sequence[Item], namespace: tuple[str, ...], now: datetime
    ) -> tuple[dict[str, Fact], list[str]]:
        facts: dict[str, Fact] = {}
        expired: list[str] = []
        for item in items:
            if tuple(item.namespace) != namespace:
                continue
            try:
                fact = Fact.model_validate(item.value)
            except ValueError:
                logger.warning("skipping an invalid fact item in the store")
                continue
            if fact.id != item.key:
                logger.warning("skipping a store fact whose key differs from its id")
                continue
            if fact.is_expired(now):
                expired.append(item.key)
            else:
                facts[fact.id] = fact
        return facts, expired

    @staticmethod
    def _store_ops(
        namespace: tuple[str, ...], before: Mapping[str, Fact], after: Mapping[str, Fact]
    ) -> list[PutOp]:
        ops = [PutOp(namespace, fid, None) for fid in before if fid not in after]
        ops.extend(
            PutOp(namespace, fid, fact.to_state())
            for fid, fact in after.items()
            if _changed(before, fid, fact)
        )
        return ops

    def _update(
        self,
        state: Mapping[str, Any],
        before: Mapping[str, Fact],
        final: Mapping[str, Fact],
        reports: Sequence[ExtractionReport],
        plan: _Plan,
        processed: int,
    ) -> dict[str, Any]:
        writes: list[dict[str, Any]] = (
            []
            if before.keys() <= final.keys()
            else [{"op": "DELETE", "id": fid} for fid in before if fid not in final]
        )
        # the facts that are new objects, found at C speed; only those are compared
        fresh = itertools.compress(
            final.items(), map(operator.is_not, final.values(), map(before.get, final))
        )
        writes.extend(fact.to_state() for fid, fact in fresh if before.get(fid) != fact)
        statuses = [r.status for r in reports]
        if "failed" in statuses:
            status = "failed"
        elif "ok" in statuses:
            status = "ok"
        elif statuses:
            status = "empty"
        else:
            status = "skipped"
        failed = next((r for r in reports if r.status == "failed"), None)
        cursor = plan.last_id(processed - 1) if processed else None
        report: dict[str, Any] = {
            "status": status,
            "calls": sum(r.attempts for r in reports),
            "batches": len(reports),
            "added": _ids(r.added for r in reports),
            "updated": _ids(r.updated for r in reports),
            "deleted": _ids(r.deleted for r in reports),
            "rejected": [item for r in reports for item in r.rejected],
            "error_type": failed.error_type if failed else None,
            "error": failed.error if failed else None,
            "processed_through": cursor or state.get(self.cursor_key),
            "pending_rounds": plan.pending_after(processed),
        }
        update: dict[str, Any] = {self.status_key: report}
        if writes:
            update[self.state_key] = writes
        if cursor is not None:
            update[self.cursor_key] = cursor
        return update

    # -- the run, shared by the sync and async faces ----------------------------------

    def _steps(self, state: Mapping[str, Any], config: RunnableConfig) -> Steps[dict[str, Any]]:
        """Load the facts, extract batch by batch, write back: one run, sync or async."""
        plan = self._plan(state)
        store = self._store()
        if store is None and not plan.count:
            # nothing to extract: the facts are not even read (expired ones leave the state
            # on the next run that extracts; contexts never show them meanwhile)
            return self._update(state, {}, {}, [], plan, 0)
        now = self._clock()
        in_state, expiring = self._state_facts.read_expiring(state.get(self.state_key))
        if store is not None:
            namespace = self._namespace(config)
            try:
                items = yield from _search_all(store, namespace)
            except Exception as exc:
                msg = f"could not read facts from the store ({type(exc).__name__})"
                raise StorageError(msg) from exc
            loaded, expired = self._parse_items(items, namespace, now)
        else:
            loaded = (
                {fid: f for fid, f in in_state.items() if not f.is_expired(now)}
                if expiring  # usually none can expire: the facts are not even looked at
                else in_state
            )
            expired = []
        current = loaded
        reports: list[ExtractionReport] = []
        processed = 0
        extractor = self.extractor
        for index in range(plan.count):
            # the extractor's steps run in this run's driver: one model call per batch, the
            # facts handed over as read (no second validation or expiry pass)
            result = yield from extractor._extraction_steps(plan.batch(index), current, now, config)
            reports.append(result.report)
            if result.status == "failed":
                break
            current = result.facts
            processed += 1
        if store is not None:
            ops = [PutOp(namespace, key, None) for key in expired]
            ops.extend(self._store_ops(namespace, loaded, current))
            if ops:
                try:
                    yield Twin(store.batch, store.abatch, ops)
                except Exception as exc:
                    msg = f"could not write facts to the store ({type(exc).__name__})"
                    raise StorageError(msg) from exc
        return self._update(state, in_state, current, reports, plan, processed)

    def _run(self, state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return run_steps(self._steps(state, config))

    async def _arun(self, state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return await arun_steps(self._steps(state, config))


_PAGE = 500


def _search_all(store: BaseStore, namespace: tuple[str, ...]) -> Steps[list[Item]]:
    """Every item of ``namespace`` (and below), page by page."""
    items: list[Item] = []
    while True:
        page: list[Item] = yield Twin(
            store.search, store.asearch, namespace, limit=_PAGE, offset=len(items)
        )
        items.extend(page)
        if len(page) < _PAGE:
            return items


def _changed(before: Mapping[str, Fact], fid: str, fact: Fact) -> bool:
    """Whether ``fact`` differs from ``before[fid]`` (the same object needs no field check)."""
    old = before.get(fid)
    return old is not fact and old != fact


def _ids(groups: Any) -> list[str]:
    return list(dict.fromkeys(fid for group in groups for fid in group))
