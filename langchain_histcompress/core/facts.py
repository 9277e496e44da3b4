"""A remembered fact, the operations on a fact set, and their merge rules.

A `Fact` is one short, self-contained statement (a user intent, a confirmed detail, a
preference, a decision...) with provenance: the ids of the messages it comes from, a
confidence and a status. Facts live in graph state as plain JSON dicts keyed by fact id, and
`merge_facts` is the state reducer that applies writes to that dict deterministically (its
docstring gives the merge rules).

Example:
    >>> state = merge_facts({}, {"op": "ADD", "content": "Name is Ana", "type": "entity"})
    >>> [fact["content"] for fact in state.values()]
    ['Name is Ana']
"""

from __future__ import annotations

import functools
import hashlib
import operator
import re
import threading
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from langchain_histcompress.core.errors import ConfigurationError

__all__ = [
    "DEFAULT_CONFIDENCE",
    "FACT_TYPES",
    "MAX_SUPERSEDED",
    "Fact",
    "FactOp",
    "FactsUpdate",
    "OpOutcome",
    "apply_fact_ops",
    "fact_id_for",
    "facts_from_state",
    "facts_to_state",
    "merge_facts",
    "normalize_content",
]


FACT_TYPES: tuple[str, ...] = (
    "user_intent",
    "confirmed_detail",
    "entity",
    "preference",
    "decision",
    "todo",
    "event",
    "other",
)
"""Known fact types. Any other short snake_case type is accepted too."""

DEFAULT_CONFIDENCE = 0.7
"""Confidence given to a fact when the model does not state one."""


MAX_SUPERSEDED = 10
"""How many previous contents a fact keeps in ``supersedes`` (the newest ones)."""

_UNCERTAIN_ALIASES = frozenset(
    {
        "uncertain",
        "to_be_confirmed",
        "tbc",
        "unconfirmed",
        "pending",
        "tentative",
        "unverified",
        "unknown",
        "maybe",
        "unsure",
    }
)
_CONFIRMED_ALIASES = frozenset({"confirmed", "verified", "certain", "true", "known"})
OP_ALIASES = {
    "ADD": "ADD",
    "CREATE": "ADD",
    "INSERT": "ADD",
    "NEW": "ADD",
    "UPDATE": "UPDATE",
    "MODIFY": "UPDATE",
    "EDIT": "UPDATE",
    "CHANGE": "UPDATE",
    "REPLACE": "UPDATE",
    "DELETE": "DELETE",
    "REMOVE": "DELETE",
    "FORGET": "DELETE",
}
_OP_FIELDS = frozenset({"type", "content", "confidence", "status", "source_ids", "expires_at"})
_CONTENT = operator.attrgetter("content")
_EXPIRES_AT = operator.attrgetter("expires_at")
_EXPIRES_KEY = operator.methodcaller("get", "expires_at")
_LABEL_RE = re.compile(r"[^a-z0-9]+")
_CONTENT_FOLD_RE = re.compile(r"[\W_]+")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def aware_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def parse_datetime(value: object) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return aware_utc(value)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            return aware_utc(datetime.fromisoformat(text))
        except ValueError:
            return None
    return None


def fact_label(value: str, *, default: str) -> str:
    if len(value) > 64:  # not a label a fact set repeats: not worth a cache entry
        return _fold_label(value, default)
    return _cached_label(value, default)


def _fold_label(value: str, default: str) -> str:
    folded = _LABEL_RE.sub("_", unicodedata.normalize("NFKC", value).casefold()).strip("_")
    return folded[:48] or default


# a handful of labels come back on every fact validated
_cached_label = functools.lru_cache(maxsize=1024)(_fold_label)


@functools.lru_cache(maxsize=8192)
def normalize_content(content: str) -> str:
    """The comparison key of a fact's content: casefolded, punctuation and spaces folded.

    Cached: every `apply_fact_ops` keys the whole fact set by it, and the same contents
    come back call after call.

    Example:
        >>> normalize_content("  The user's name is ANA!  ")
        'the user s name is ana'
    """
    text = unicodedata.normalize("NFKC", content).casefold()
    return _CONTENT_FOLD_RE.sub(" ", text).strip()


def fact_id_for(content: str) -> str:
    """The package id of a fact with ``content``: ``f-`` + 12 hex digits of its sha256.

    Contents that normalize to the same key get the same id.

    Example:
        >>> fact_id_for("Likes tea.") == fact_id_for("likes TEA")
        True
        >>> fact_id_for("Likes tea.")[:2]
        'f-'
    """
    digest = hashlib.sha256(normalize_content(content).encode("utf-8")).hexdigest()
    return f"f-{digest[:12]}"


def _strings(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Iterable):
        msg = "expected a list of strings"
        raise ValueError(msg)
    return tuple(str(item) for item in value if str(item))


class Fact(BaseModel):
    """One remembered fact with provenance.

    Example:
        >>> fact = Fact(id="f-1", type="Preference", content=" Prefers tea ",
        ...             status="to be confirmed", source_ids=["m3"])
        >>> fact.type, fact.content, fact.status, fact.source_ids
        ('preference', 'Prefers tea', 'uncertain', ('m3',))
    """

    model_config = ConfigDict(frozen=True, extra="ignore", use_attribute_docstrings=True)

    id: str = Field(min_length=1)
    """Package-assigned id (see `fact_id_for`); stable across updates."""
    type: str = "other"
    """Kind of fact, snake_case: one of `FACT_TYPES` or another short label."""
    content: str
    """The fact as one short self-contained statement (never empty)."""
    confidence: float = Field(default=DEFAULT_CONFIDENCE, ge=0.0, le=1.0)
    """How sure the extractor was, from 0 to 1."""
    status: str = "confirmed"
    """``confirmed``, ``uncertain`` (to be confirmed) or another snake_case label."""
    source_ids: tuple[str, ...] = ()
    """Ids of the conversation messages the fact was extracted from, first seen first."""
    created_at: datetime = Field(default_factory=utcnow)
    """When the fact was first added (UTC)."""
    updated_at: datetime = Field(default_factory=utcnow)
    """When the fact last changed (UTC)."""
    supersedes: tuple[str, ...] = ()
    """Previous contents replaced by updates, oldest first (at most `MAX_SUPERSEDED`)."""
    expires_at: datetime | None = None
    """When the fact stops being valid (UTC), or ``None`` for never."""

    @field_validator("content")
    @classmethod
    def _check_content(cls, value: str) -> str:
        text = value.strip()
        if not text:
            msg = "fact content must not be empty"
            raise ValueError(msg)
        return text

    @field_validator("type", mode="before")
    @classmethod
    def _check_type(cls, value: object) -> str:
        return fact_label(str(value or ""), default="other")

    @field_validator("status", mode="before")
    @classmethod
    def _check_status(cls, value: object) -> str:
        label = fact_label(str(value or ""), default="confirmed")
        if label in _UNCERTAIN_ALIASES:
            return "uncertain"
        if label in _CONFIRMED_ALIASES:
            return "confirmed"
        return label

    @field_validator("source_ids", mode="before")
    @classmethod
    def _check_sources(cls, value: object) -> tuple[str, ...]:
        return tuple(dict.fromkeys(_strings(value)))

    @field_validator("supersedes", mode="before")
    @classmethod
    def _check_supersedes(cls, value: object) -> tuple[str, ...]:
        return _strings(value)

    @field_validator("created_at", "updated_at", "expires_at", mode="after")
    @classmethod
    def _check_datetime(cls, value: datetime | None) -> datetime | None:
        return None if value is None else aware_utc(value)

    def is_expired(self, now: datetime) -> bool:
        """Whether the fact has expired at ``now``.

        Example:
            >>> from datetime import datetime, timezone
            >>> fact = Fact(id="f-1", content="x", expires_at=datetime(2024, 1, 1))
            >>> fact.is_expired(datetime(2025, 1, 1, tzinfo=timezone.utc))
            True
        """
        return self.expires_at is not None and self.expires_at <= aware_utc(now)

    def to_state(self) -> dict[str, Any]:
        """The fact as a JSON-friendly dict (the form stored in graph state and stores).

        The dict is remembered (`_StateForms`): read back while unchanged, it gives this
        fact without a validation.

        Example:
            >>> Fact(id="f-1", content="x").to_state()["content"]
            'x'
        """
        return _FORMS.remember(self, self.model_dump(mode="json"))


def state_snapshot(value: object) -> object:
    """A copy of a fact dict that stays equal to it until it is edited in place.

    Its lists are copied too (``source_ids``, ``supersedes``); other values are immutable.

    Example:
        >>> form = {"id": "f-1", "source_ids": ["m1"]}
        >>> copy = state_snapshot(form)
        >>> form["source_ids"].append("m2")
        >>> copy == form
        False
    """
    if not isinstance(value, dict):
        return value
    return {k: list(v) if isinstance(v, list) else v for k, v in value.items()}


class _StateForms:
    """Fact dicts made by `Fact.to_state`, mapped back to their fact while unchanged.

    A fact the package turns into a state dict (a node's write, a reducer's result) is read
    back by the reducer and by the next run's readers; validating it again each time would
    give the same fact. Each entry holds the dict itself (so its ``id()`` is not reused while
    remembered), a snapshot (an in-place edit makes the entry miss) and the fact. The
    newest ``max_entries`` dicts are remembered.
    """

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._forms: dict[int, tuple[dict[str, Any], object, Fact]] = {}
        self._lock = threading.Lock()

    def remember(self, fact: Fact, form: dict[str, Any]) -> dict[str, Any]:
        """Remember ``form`` as the state dict of ``fact``; return it."""
        entry = (form, state_snapshot(form), fact)
        with self._lock:
            forms = self._forms
            forms[id(form)] = entry
            if len(forms) > self.max_entries:
                del forms[next(iter(forms))]
        return form

    def fact_of(self, value: object) -> Fact | None:
        """The fact ``value`` was made from, if it is a remembered, unchanged dict."""
        hit = self._forms.get(id(value))
        if hit is None or hit[0] is not value or hit[1] != value:
            return None
        return hit[2]


_FORMS = _StateForms()


class FactOp(BaseModel):
    """One operation on the fact set.

    Example:
        >>> FactOp(op="update", id="f-1", fields={"status": "confirmed"}).op
        'UPDATE'
    """

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    op: Literal["ADD", "UPDATE", "DELETE"]
    """What to do."""
    id: str | None = None
    """Target fact id; required for ``UPDATE`` / ``DELETE``. For ``ADD`` the package assigns
    one when absent (ids proposed by a model are never passed here)."""
    fields: dict[str, Any] = Field(default_factory=dict)
    """Values to set: any of ``type``, ``content``, ``confidence``, ``status``,
    ``source_ids``, ``expires_at``. ``ADD`` needs ``content``."""

    @field_validator("op", mode="before")
    @classmethod
    def _check_op(cls, value: object) -> str:
        return str(value).strip().upper()

    @model_validator(mode="after")
    def _check_shape(self) -> FactOp:
        unknown = set(self.fields) - _OP_FIELDS
        if unknown:
            msg = f"unknown fact op fields {sorted(unknown)}; allowed: {sorted(_OP_FIELDS)}"
            raise ValueError(msg)
        if self.op in ("UPDATE", "DELETE") and not self.id:
            msg = f"{self.op} needs the id of an existing fact"
            raise ValueError(msg)
        if self.op == "ADD" and not str(self.fields.get("content") or "").strip():
            msg = "ADD needs a non-empty content"
            raise ValueError(msg)
        return self


@dataclass(frozen=True)
class OpOutcome:
    """What `apply_fact_ops` did with one operation."""

    index: int
    """Position of the operation in the applied sequence."""
    op: str
    """The operation (``ADD``, ``UPDATE``, ``DELETE``)."""
    fact_id: str | None
    """The fact the operation ended on (the existing fact for a merged ``ADD``)."""
    result: Literal["added", "merged", "updated", "deleted", "rejected"]
    """``merged``: an ``ADD`` folded into an existing fact with the same normalized content."""
    reason: str | None = None
    """Why a rejected operation was not applied (``unknown_id``, ``invalid_fields``...)."""


@dataclass(frozen=True)
class FactsUpdate:
    """The result of `apply_fact_ops`."""

    facts: dict[str, Fact]
    """The fact set after the operations, in insertion order."""
    changed: tuple[str, ...]
    """Ids of facts that were added or modified (all present in ``facts``)."""
    removed: tuple[str, ...]
    """Ids of facts that were deleted, merged away or expired."""
    outcomes: tuple[OpOutcome, ...]
    """One outcome per operation, in order."""

    def writes(self) -> list[dict[str, Any]]:
        """The state writes that turn the old fact set into ``facts`` through `merge_facts`.

        Full fact dicts for changed facts and ``{"op": "DELETE", "id": ...}`` for removed
        ones: applying them again gives the same result (idempotent).
        """
        out: list[dict[str, Any]] = [{"op": "DELETE", "id": fid} for fid in self.removed]
        out.extend(self.facts[fid].to_state() for fid in self.changed)
        return out


def _merge_status(old: str, new: str) -> str:
    return "confirmed" if "confirmed" in (old, new) else old


def _later_expiry(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None or b is None:
        return None
    return max(a, b)


def _absorb(target: Fact, other: Fact, now: datetime) -> Fact:
    return target.model_copy(
        update={
            "source_ids": tuple(dict.fromkeys((*target.source_ids, *other.source_ids))),
            "confidence": max(target.confidence, other.confidence),
            "status": _merge_status(target.status, other.status),
            "expires_at": _later_expiry(target.expires_at, other.expires_at),
            "updated_at": now,
        }
    )


def _free_id(base: str, taken: Mapping[str, Fact]) -> str:
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def apply_fact_ops(
    facts: Mapping[str, Fact], ops: Sequence[FactOp], *, now: datetime | None = None
) -> FactsUpdate:
    """Apply ``ops`` to ``facts`` with the package's merge rules (pure, deterministic).

    Args:
        facts: The current facts by id (not modified).
        ops: Operations in order.
        now: The time stamped on changes and used for expiry (default: current UTC time).

    Returns:
        The new fact set and what happened to each operation.

    Example:
        >>> from datetime import datetime, timezone
        >>> now = datetime(2025, 1, 1, tzinfo=timezone.utc)
        >>> first = apply_fact_ops({}, [FactOp(op="ADD", fields={"content": "Budget is 10k"})],
        ...                        now=now)
        >>> fid = first.changed[0]
        >>> second = apply_fact_ops(first.facts, [
        ...     FactOp(op="UPDATE", id=fid, fields={"content": "Budget is 12k"}),
        ...     FactOp(op="DELETE", id="f-missing")], now=now)
        >>> second.facts[fid].content, second.facts[fid].supersedes
        ('Budget is 12k', ('Budget is 10k',))
        >>> [(o.result, o.reason) for o in second.outcomes]
        [('updated', None), ('rejected', 'unknown_id')]
    """
    now = aware_utc(now) if now is not None else utcnow()
    current: dict[str, Fact] = dict(facts)
    # C-speed passes over the whole set: only the operations' facts are visited in Python
    by_key: dict[str, str] = dict(
        zip(map(normalize_content, map(_CONTENT, current.values())), current, strict=True)
    )
    changed: dict[str, None] = {}
    removed: dict[str, None] = {}
    outcomes: list[OpOutcome] = []

    def drop(fid: str) -> None:
        fact = current.pop(fid)
        key = normalize_content(fact.content)
        if by_key.get(key) == fid:
            del by_key[key]
        changed.pop(fid, None)
        removed[fid] = None

    def put(fact: Fact) -> None:
        current[fact.id] = fact
        by_key[normalize_content(fact.content)] = fact.id
        removed.pop(fact.id, None)
        changed[fact.id] = None

    for index, op in enumerate(ops):
        try:
            if op.op == "ADD":
                outcomes.append(_apply_add(index, op, current, by_key, now, put))
            elif op.op == "UPDATE":
                outcomes.append(_apply_update(index, op, current, by_key, now, put, drop))
            else:
                if op.id not in current:
                    outcomes.append(OpOutcome(index, op.op, op.id, "rejected", "unknown_id"))
                    continue
                drop(op.id)
                outcomes.append(OpOutcome(index, op.op, op.id, "deleted"))
        except ValueError:
            outcomes.append(OpOutcome(index, op.op, op.id, "rejected", "invalid_fields"))
    expired = (
        [
            fid
            for fid, fact in current.items()
            if fact.expires_at is not None and fact.expires_at <= now
        ]
        if any(map(_EXPIRES_AT, current.values()))
        else []
    )
    for fid in expired:
        drop(fid)
    return FactsUpdate(
        facts=current,
        changed=tuple(changed),
        removed=tuple(fid for fid in removed if fid in facts),
        outcomes=tuple(outcomes),
    )


def _apply_add(
    index: int,
    op: FactOp,
    current: dict[str, Fact],
    by_key: dict[str, str],
    now: datetime,
    put: Any,
) -> OpOutcome:
    fields = dict(op.fields)
    fields.setdefault("created_at", now)
    fields["updated_at"] = now
    candidate = Fact.model_validate({**fields, "id": op.id or "f-pending"})
    existing_id = by_key.get(normalize_content(candidate.content))
    if existing_id is not None:
        put(_absorb(current[existing_id], candidate, now))
        return OpOutcome(index, "ADD", existing_id, "merged")
    new_id = _free_id(op.id or fact_id_for(candidate.content), current)
    put(candidate.model_copy(update={"id": new_id}))
    return OpOutcome(index, "ADD", new_id, "added")


def _apply_update(
    index: int,
    op: FactOp,
    current: dict[str, Fact],
    by_key: dict[str, str],
    now: datetime,
    put: Any,
    drop: Any,
) -> OpOutcome:
    fid = op.id
    if fid is None or fid not in current:
        return OpOutcome(index, "UPDATE", fid, "rejected", "unknown_id")
    old = current[fid]
    data = old.model_dump()
    fields = dict(op.fields)
    if "source_ids" in fields:
        new_sources = Fact.model_validate(
            {"id": fid, "content": "x", "source_ids": fields.pop("source_ids")}
        ).source_ids
        data["source_ids"] = tuple(dict.fromkeys((*old.source_ids, *new_sources)))
    data.update(fields)
    data["updated_at"] = now
    updated = Fact.model_validate(data)
    old_key = normalize_content(old.content)
    new_key = normalize_content(updated.content)
    if new_key != old_key:
        updated = updated.model_copy(
            update={"supersedes": (*old.supersedes, old.content)[-MAX_SUPERSEDED:]}
        )
        other_id = by_key.get(new_key)
        if other_id is not None and other_id != fid:
            updated = _absorb(updated, current[other_id], now)
            drop(other_id)
        if by_key.get(old_key) == fid:
            del by_key[old_key]
    put(updated)
    return OpOutcome(index, "UPDATE", fid, "updated")


def _coerce_fact(value: object, key: str | None = None) -> Fact:
    if isinstance(value, Fact):
        fact = value
    else:
        known = _FORMS.fact_of(value)
        fact = known if known is not None else Fact.model_validate(value)
    if key is not None and fact.id != key:
        msg = f"fact stored under key {key!r} has id {fact.id!r}"
        raise ConfigurationError(msg)
    return fact


def facts_from_state(value: object) -> dict[str, Fact]:
    """Read facts from graph state (dict id -> fact dict, list of fact dicts, or `Fact` objects).

    Raises:
        ConfigurationError: An entry is not a valid fact.

    Example:
        >>> facts = facts_from_state({"f-1": {"id": "f-1", "content": "x"}})
        >>> facts["f-1"].content
        'x'
    """
    if value is None:
        return {}
    items: Iterable[tuple[str | None, object]]
    if isinstance(value, Mapping):
        items = ((str(k), v) for k, v in value.items())
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        items = ((None, v) for v in value)
    else:
        msg = f"facts must be a dict of id -> fact or a list of facts, not {type(value).__name__}"
        raise ConfigurationError(msg)
    out: dict[str, Fact] = {}
    for key, item in items:
        try:
            fact = _coerce_fact(item, key)
        except ValueError as exc:
            msg = f"invalid fact {key!r} in state: {exc}"
            raise ConfigurationError(msg) from exc
        out[fact.id] = fact
    return out


def facts_to_state(facts: Mapping[str, Fact] | Iterable[Fact]) -> dict[str, dict[str, Any]]:
    """The JSON-friendly state form of ``facts``: ``{id: fact dict}``.

    Example:
        >>> facts_to_state([Fact(id="f-1", content="x")])["f-1"]["id"]
        'f-1'
    """
    values = facts.values() if isinstance(facts, Mapping) else facts
    return {fact.id: fact.to_state() for fact in values}


def _expired_dict(value: Mapping[str, Any], now: datetime) -> bool:
    expires = parse_datetime(value.get("expires_at"))
    return expires is not None and expires <= now


def _state_dict(value: object, key: str | None = None) -> dict[str, Any]:
    known = _FORMS.fact_of(value)
    if known is not None and (key is None or known.id == key):
        return value  # type: ignore[return-value]  # a remembered dict is a fact dict
    try:
        return _coerce_fact(value, key).to_state()
    except ValueError as exc:
        msg = f"invalid fact write {key!r}: {exc}"
        raise ConfigurationError(msg) from exc


def _as_op(value: object) -> FactOp:
    if isinstance(value, FactOp):
        return value
    if not isinstance(value, Mapping):  # pragma: no cover - guarded by the caller
        msg = f"not a fact op: {type(value).__name__}"
        raise ConfigurationError(msg)
    data = dict(value)
    op = data.pop("op")
    fid = data.pop("id", None)
    fields = dict(data.pop("fields", None) or {})
    fields.update(data)
    try:
        return FactOp(op=op, id=fid, fields=fields)
    except ValueError as exc:
        msg = f"invalid fact op: {exc}"
        raise ConfigurationError(msg) from exc


def merge_facts(left: object, right: object, *, now: datetime | None = None) -> dict[str, Any]:
    """LangGraph reducer of the ``facts`` state key.

    ``left`` is the current value (``None``, a dict id -> fact dict, or a list of facts).
    ``right`` is a write: a `FactOp` or op dict (``{"op": "ADD", ...}``), a `Fact` or fact
    dict (replaces the fact with that id), a dict id -> fact (``None`` deletes that id),
    ``None`` (no change), or a list of any of these applied in order. The result is a plain
    dict id -> JSON fact dict; expired facts are dropped.

    Args:
        left: Current state value.
        right: The write.
        now: Time for timestamps and expiry (default: current UTC time).

    Raises:
        ConfigurationError: A write is neither a valid fact nor a valid operation.

    Example:
        >>> state = merge_facts(None, {"op": "ADD", "content": "Name is Ana", "type": "entity"})
        >>> fid, fact = next(iter(state.items()))
        >>> fact["type"], fid == fact_id_for("Name is Ana")
        ('entity', True)
        >>> merge_facts(state, {"op": "DELETE", "id": fid})
        {}
    """
    now = aware_utc(now) if now is not None else utcnow()
    if isinstance(left, Mapping):
        state: dict[str, Any] = dict(left)
        # the usual state (str keys, fact dicts) is copied as is, checked at C speed
        kinds = set(map(type, state.values()))
        if not set(map(type, state)) <= {str} or any(issubclass(k, Fact) for k in kinds):
            state = {str(k): (v.to_state() if isinstance(v, Fact) else v) for k, v in left.items()}
    elif left is None:
        state = {}
    else:
        state = facts_to_state(facts_from_state(left))
    pending: list[FactOp] = []

    def flush() -> None:
        nonlocal state
        if pending:
            result = apply_fact_ops(facts_from_state(state), pending, now=now)
            # a fact the operations left alone keeps its dict when that dict is its
            # `to_state` form: only the changed facts are serialized again
            form_of = state.get
            state = {
                fid: form
                if (form := form_of(fid)) is not None and _FORMS.fact_of(form) is fact
                else fact.to_state()
                for fid, fact in result.facts.items()
            }
            pending.clear()

    for write in _writes(right):
        if isinstance(write, FactOp):
            pending.append(write)
            continue
        flush()
        key, value = write
        if value is None:
            state.pop(key, None)
        else:
            fact = _state_dict(value, key)
            state[fact["id"]] = fact
    flush()
    if not any(map(_EXPIRES_KEY, state.values())):  # C speed: usually no fact expires
        return state
    return {
        k: v for k, v in state.items() if v.get("expires_at") is None or not _expired_dict(v, now)
    }


def _writes(right: object) -> list[FactOp | tuple[str, object]]:
    if right is None:
        return []
    if isinstance(right, FactOp):
        return [right]
    if isinstance(right, Fact):
        return [(right.id, right)]
    if isinstance(right, Mapping):
        if "op" in right:
            return [_as_op(right)]
        if "content" in right and "id" in right and not isinstance(right["content"], Mapping):
            return [(str(right["id"]), right)]
        return [(str(k), v) for k, v in right.items()]
    if isinstance(right, Sequence) and not isinstance(right, str | bytes):
        out: list[FactOp | tuple[str, object]] = []
        for item in right:
            if isinstance(item, Mapping | Fact | FactOp) or item is None:
                out.extend(_writes(item))
            else:
                msg = f"fact writes must be facts or ops, not {type(item).__name__}"
                raise ConfigurationError(msg)
        return out
    msg = f"cannot merge a {type(right).__name__} into facts"
    raise ConfigurationError(msg)
