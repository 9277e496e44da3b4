"""Covered-id sets that grow without copying: `CoveredIds`.

A running summary's covered-id set only grows, by a few ids per fold, while it reaches the
size of the conversation. `CoveredIds` is an immutable set of strings whose versions share one
append-only log: extending the newest version costs O(new ids) and every older version stays
exactly what it was. Iteration follows the log: the order in which the ids were covered.

Example:
    >>> first = CoveredIds(["h1", "a1"])
    >>> second = first.extend(["h2", "a2", "h1"])
    >>> len(first), len(second), "h2" in first, "h2" in second
    (2, 4, False, True)
    >>> second.added_since(first), second == {"h1", "a1", "h2", "a2"}
    (['h2', 'a2'], True)
"""

from __future__ import annotations

import itertools
import operator
import threading
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from typing import Annotated, Any, TypeAlias

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

__all__ = ["CoveredIds", "CoveredIdsField", "as_covered_ids", "covers_all"]


class _Log:
    """The ids of one lineage of versions, in covering order, with their positions."""

    __slots__ = ("ids", "lock", "positions")

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids
        self.positions = dict(zip(ids, range(len(ids)), strict=True))
        self.lock = threading.Lock()


def _unique(ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ids))


class CoveredIds(AbstractSet[str]):
    """An immutable set of message ids whose extensions share storage (see the module doc).

    Equal to any set with the same members (``CoveredIds(["a"]) == {"a"}``) and hashed like
    a ``frozenset``; the usual set operators return ``frozenset`` results.

    Args:
        ids: The members; a list or tuple keeps its order (first occurrence), any other
            iterable is sorted so equal inputs give equal logs.

    Raises:
        TypeError: A member is not a string.

    Example:
        >>> covered = CoveredIds({"b", "a"})
        >>> list(covered), "a" in covered, covered | {"c"} == {"a", "b", "c"}
        (['a', 'b'], True, True)
    """

    __slots__ = ("_hash_value", "_log", "_size")

    _log: _Log
    _size: int
    _hash_value: int | None

    def __init__(self, ids: Iterable[str] = ()) -> None:
        """Build a set with its own log."""
        items = list(ids) if isinstance(ids, list | tuple) else sorted(ids)
        for item in items:
            if not isinstance(item, str):
                msg = f"covered ids must be strings, got {type(item).__name__}"
                raise TypeError(msg)
        ordered = _unique(items)
        self._log = _Log(ordered)
        self._size = len(ordered)
        self._hash_value = None

    @classmethod
    def _view(cls, log: _Log, size: int) -> CoveredIds:
        made = object.__new__(cls)
        made._log = log
        made._size = size
        made._hash_value = None
        return made

    # -- the set protocol ------------------------------------------------------------------

    def __contains__(self, item: object) -> bool:
        """O(1): whether ``item`` is among this version's ids."""
        position = self._log.positions.get(item)  # type: ignore[call-overload]
        return position is not None and position < self._size

    def __len__(self) -> int:
        """Number of ids."""
        return self._size

    def __iter__(self) -> Iterator[str]:
        """The ids in covering order."""
        return itertools.islice(self._log.ids, self._size)

    def __hash__(self) -> int:
        """The hash a ``frozenset`` of the same ids has (computed once)."""
        if self._hash_value is None:
            self._hash_value = hash(self.to_frozenset())
        return self._hash_value

    def __eq__(self, other: object) -> bool:
        """Set equality (with any set, including another `CoveredIds`)."""
        if isinstance(other, CoveredIds) and other._log is self._log:
            return other._size == self._size
        if not isinstance(other, AbstractSet):
            return NotImplemented
        return len(other) == self._size and self._apply(operator.eq, other)

    def __le__(self, other: AbstractSet[Any]) -> bool:
        """Subset test."""
        return bool(self._apply(operator.le, other))

    def __lt__(self, other: AbstractSet[Any]) -> bool:
        """Proper subset test."""
        return bool(self._apply(operator.lt, other))

    def __ge__(self, other: AbstractSet[Any]) -> bool:
        """Superset test."""
        return bool(self._apply(operator.ge, other))

    def __gt__(self, other: AbstractSet[Any]) -> bool:
        """Proper superset test."""
        return bool(self._apply(operator.gt, other))

    def __or__(self, other: AbstractSet[Any]) -> frozenset[Any]:
        """Union, as a ``frozenset``."""
        return frozenset(self._apply(operator.or_, other))

    __ror__ = __or__

    def __and__(self, other: AbstractSet[Any]) -> frozenset[str]:
        """Intersection, as a ``frozenset``."""
        return frozenset(self._apply(operator.and_, other))

    __rand__ = __and__

    def __sub__(self, other: AbstractSet[Any]) -> frozenset[str]:
        """Difference, as a ``frozenset``."""
        return frozenset(self._apply(operator.sub, other))

    def __rsub__(self, other: AbstractSet[Any]) -> frozenset[Any]:
        """``other - self``, as a ``frozenset``."""
        return frozenset(self._apply(lambda mine, theirs: theirs - mine, other))

    def __xor__(self, other: AbstractSet[Any]) -> frozenset[Any]:
        """Symmetric difference, as a ``frozenset``."""
        return frozenset(self._apply(operator.xor, other))

    __rxor__ = __xor__

    def isdisjoint(self, other: Iterable[Any]) -> bool:
        """Whether no id of ``other`` is in this set."""
        return not any(map(self.__contains__, other))

    def issuperset(self, other: Iterable[Any]) -> bool:
        """Whether every item of ``other`` is in this set (C speed on the newest version)."""
        items = other if isinstance(other, set | frozenset) else set(other)
        log = self._log
        with log.lock:
            if len(log.ids) == self._size:
                return log.positions.keys() >= items
        return all(map(self.__contains__, items))

    def issubset(self, other: Iterable[Any]) -> bool:
        """Whether every id of this set is in ``other``."""
        return bool(self._apply(operator.le, other))

    def union(self, *others: Iterable[Any]) -> frozenset[Any]:
        """Union with any iterables, as a ``frozenset``."""
        return frozenset(self.to_frozenset().union(*others))

    def difference(self, *others: Iterable[Any]) -> frozenset[str]:
        """Difference with any iterables, as a ``frozenset``."""
        return frozenset(self.to_frozenset().difference(*others))

    def intersection(self, *others: Iterable[Any]) -> frozenset[str]:
        """Intersection with any iterables, as a ``frozenset``."""
        return frozenset(self.to_frozenset().intersection(*others))

    def __repr__(self) -> str:
        """Show the size and the first few ids."""
        head = list(itertools.islice(self, 3))
        more = ", ..." if self._size > len(head) else ""
        return f"CoveredIds({len(self)} ids: {', '.join(map(repr, head))}{more})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle and copy as a standalone set with the same order."""
        return (CoveredIds, (self.to_list(),))

    # -- growing and reading ---------------------------------------------------------------

    def extend(self, ids: Iterable[str]) -> CoveredIds:
        """This set plus ``ids`` (new ones appended in the given order); ``self`` is unchanged.

        O(len(ids)) when this is the newest version of its log, which it is unless another
        set was already made from it (then its ids are copied into a new log once).

        Raises:
            TypeError: A new id is not a string.

        Example:
            >>> CoveredIds(["a"]).extend(["b", "a"]).to_list()
            ['a', 'b']
        """
        fresh = [i for i in _unique(ids) if i not in self]
        for item in fresh:
            if not isinstance(item, str):
                msg = f"covered ids must be strings, got {type(item).__name__}"
                raise TypeError(msg)
        if not fresh:
            return self
        log = self._log
        with log.lock:
            if self._size and len(log.ids) == self._size:
                start = self._size
                log.ids.extend(fresh)
                log.positions.update(zip(fresh, range(start, start + len(fresh)), strict=True))
                return CoveredIds._view(log, len(log.ids))
        return CoveredIds._view(_Log([*log.ids[: self._size], *fresh]), self._size + len(fresh))

    def added_since(self, earlier: CoveredIds) -> list[str] | None:
        """The ids this set holds beyond ``earlier`` in covering order, when it grew from it.

        O(new ids) when both are versions of one log (``self`` made from ``earlier`` by
        `extend`, directly or not); ``None`` otherwise.

        Example:
            >>> first = CoveredIds(["a"])
            >>> first.extend(["c", "b"]).added_since(first), first.added_since(CoveredIds())
            (['c', 'b'], None)
        """
        if earlier._log is not self._log or earlier._size > self._size:
            return None
        with self._log.lock:
            return self._log.ids[earlier._size : self._size]

    def to_list(self) -> list[str]:
        """The ids as a new list, in covering order (one list copy).

        Example:
            >>> CoveredIds(["b", "a"]).to_list()
            ['b', 'a']
        """
        with self._log.lock:
            return self._log.ids[: self._size]

    def to_frozenset(self) -> frozenset[str]:
        """The ids as a ``frozenset``.

        Example:
            >>> CoveredIds(["a"]).to_frozenset()
            frozenset({'a'})
        """
        return frozenset(self.to_list())

    def _apply(self, op: Callable[[AbstractSet[Any], AbstractSet[Any]], Any], other: Any) -> Any:
        """``op(members, other)`` at C speed, on the log's keys when this is the newest version.

        Runs under the log's lock, so a concurrent `extend` never shows up in the result.
        """
        theirs = _as_set(other)
        log = self._log
        with log.lock:
            if len(log.ids) == self._size:
                return op(log.positions.keys(), theirs)
            mine = frozenset(log.ids[: self._size])
        return op(mine, theirs)

    # -- pydantic --------------------------------------------------------------------------

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        """Accept a `CoveredIds` as is, or any collection of strings (validated item by item).

        A list may also hold lists of strings (runs, as graph state stores them, see
        `nodes.summary_to_state`): their ids are taken in order.
        """
        items = core_schema.list_schema(core_schema.str_schema())

        def validate(value: Any, inner: core_schema.ValidatorFunctionWrapHandler) -> CoveredIds:
            if isinstance(value, CoveredIds):
                return value
            if isinstance(value, list | tuple) and any(isinstance(i, list | tuple) for i in value):
                runs = (item if isinstance(item, list | tuple) else [item] for item in value)
                value = [i for run in runs for i in run]
            if isinstance(value, set | frozenset):
                try:
                    value = sorted(value)
                except TypeError:
                    value = list(value)  # the item validator names the bad item
            return CoveredIds(inner(value))

        return core_schema.no_info_wrap_validator_function(
            validate,
            items,
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda value: value.to_list()
            ),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """A JSON array of unique strings."""
        return {"type": "array", "items": {"type": "string"}, "uniqueItems": True}


class _CoveredIdsSchema:
    """Pydantic marker: validate and serialize a field as `CoveredIds`."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return CoveredIds.__get_pydantic_core_schema__(CoveredIds, handler)

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return CoveredIds.__get_pydantic_json_schema__(schema, handler)


CoveredIdsField: TypeAlias = Annotated[AbstractSet[str], _CoveredIdsSchema()]
"""A pydantic field type: any collection of strings in, a `CoveredIds` stored; typed as a
read-only set."""


def as_covered_ids(ids: AbstractSet[str]) -> CoveredIds:
    """``ids`` as a `CoveredIds` (itself when it already is one).

    Example:
        >>> covered = CoveredIds(["a"])
        >>> as_covered_ids(covered) is covered, list(as_covered_ids(frozenset({"b", "a"})))
        (True, ['a', 'b'])
    """
    return ids if isinstance(ids, CoveredIds) else CoveredIds(ids)


def covers_all(covered: AbstractSet[str], ids: Iterable[object]) -> bool:
    """Whether every item of ``ids`` is in ``covered`` (at C speed for the usual sets).

    Example:
        >>> covers_all(CoveredIds(["a", "b"]), ["b"]), covers_all(frozenset({"a"}), ["a", None])
        (True, False)
    """
    if isinstance(covered, CoveredIds | frozenset | set):
        return covered.issuperset(ids)
    return all(i in covered for i in ids)


def _as_set(other: Iterable[Any]) -> AbstractSet[Any]:
    if isinstance(other, CoveredIds):
        return other.to_frozenset()
    if isinstance(other, set | frozenset):
        return other
    return frozenset(other)
