"""Short aliases for message and tool-call ids in prompts to the package's internal models.

Summarizer and extractor prompts show ``m1``, ``m2``, ... for long message ids and ``c1``,
``c2``, ... for long tool-call ids, in order of appearance (`IdAliases`); ids of up to
`SHORT_ID_CHARS` characters are shown as they are, and an alias never equals an id shown in
the same prompt. The package maps whatever the model answers back to the real ids; coverage
never depends on that answer (the ids recorded as covered are those of the messages sent).

What the *answering* model reads must not change from turn to turn, or the provider's prompt
cache misses: `stable_ref` gives each long id a short reference that depends on that id alone,
and `resolve_ref` finds the id behind a reference among candidates.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

__all__ = ["REF_DIGITS", "SHORT_ID_CHARS", "IdAliases", "resolve_ref", "stable_ref", "stable_refs"]

SHORT_ID_CHARS = 16
"""Ids this short are shown as they are."""

REF_DIGITS = 9
"""Digits of a `stable_ref` (a billion values: two ids of one conversation share a reference
with a probability of about n²/2e9, 0.05% for 1,000 messages)."""


@dataclass(frozen=True)
class IdAliases:
    """A two-way map between real ids and the short aliases a prompt shows.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> uuid = "0f8e2a4c-1b7d-4e59-9a3c-5d2b8f1e6a70"
        >>> call = "call_Xy7QpLm2Rt9ZbWc4Nd8Fh1Kj"
        >>> messages = [HumanMessage("hi", id=uuid),
        ...             AIMessage("", id="ai-1",
        ...                       tool_calls=[{"name": "f", "args": {}, "id": call}]),
        ...             ToolMessage("ok", tool_call_id=call, id="t-1")]
        >>> aliases = IdAliases.for_messages(messages)
        >>> [m.id for m in aliases.apply(messages)], aliases.apply(messages)[2].tool_call_id
        (['m1', 'ai-1', 't-1'], 'c1')
        >>> aliases.resolve("m1") == uuid, aliases.resolve("m9")
        (True, None)
    """

    to_alias: Mapping[str, str] = field(default_factory=dict)
    """Real id -> alias."""
    to_id: Mapping[str, str] = field(default_factory=dict)
    """Alias -> real id."""

    @classmethod
    def for_messages(
        cls, messages: Sequence[BaseMessage], *, short: int = SHORT_ID_CHARS
    ) -> IdAliases:
        """Aliases for the long message ids (``m<n>``) and tool-call ids (``c<n>``).

        Example:
            >>> from langchain_core.messages import HumanMessage
            >>> messages = [HumanMessage("a", id="m1"), HumanMessage("b", id="x" * 36)]
            >>> IdAliases.for_messages(messages).to_alias == {"x" * 36: "m2"}
            True
        """
        ids = [(message.id, "m") for message in messages if message.id]
        ids += [(call_id, "c") for message in messages for call_id in _call_ids(message)]
        taken = {real for real, _ in ids if len(real) <= short}
        to_alias: dict[str, str] = {}
        counters = {"m": 0, "c": 0}
        for real, kind in ids:
            if len(real) <= short or real in to_alias:
                continue
            alias = real
            while alias == real or alias in taken:
                counters[kind] += 1
                alias = f"{kind}{counters[kind]}"
            taken.add(alias)
            to_alias[real] = alias
        return cls(to_alias, {alias: real for real, alias in to_alias.items()})

    def alias(self, real: str | None) -> str | None:
        """The alias of ``real`` (itself when it has none)."""
        return self.to_alias.get(real, real) if real is not None else None

    def resolve(self, alias: str) -> str | None:
        """The real id behind ``alias`` (``None`` when the prompt showed no such alias)."""
        return self.to_id.get(alias)

    def resolve_all(self, shown: Iterable[str]) -> list[str]:
        """Real ids of ids as the prompt showed them (aliases mapped back, others kept).

        Example:
            >>> IdAliases({"uuid-1": "m1"}, {"m1": "uuid-1"}).resolve_all(["m1", "h7"])
            ['uuid-1', 'h7']
        """
        return [self.to_id.get(i, i) for i in shown]

    def apply(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Copies of ``messages`` showing aliases instead of ids (the originals are untouched).

        Without any alias (every id short) the messages are returned as they are.
        """
        if not self.to_alias:
            return list(messages)
        out: list[BaseMessage] = []
        for message in messages:
            update: dict[str, object] = {"id": self.alias(message.id)}
            if isinstance(message, ToolMessage):
                update["tool_call_id"] = self.alias(message.tool_call_id)
            if isinstance(message, AIMessage) and (
                message.tool_calls or message.invalid_tool_calls
            ):
                update["tool_calls"] = [
                    {**c, "id": self.alias(c["id"])} for c in message.tool_calls
                ]
                update["invalid_tool_calls"] = [
                    {**c, "id": self.alias(c["id"])} for c in message.invalid_tool_calls
                ]
            out.append(message.model_copy(update=update))
        return out


def _call_ids(message: BaseMessage) -> list[str]:
    if isinstance(message, ToolMessage):
        return [message.tool_call_id]
    if isinstance(message, AIMessage):
        ids = [c["id"] or "" for c in message.tool_calls]
        return ids + [c["id"] or "" for c in message.invalid_tool_calls]
    return []


_REFS_CACHED = 65_536
_refs: dict[str, str] = {}


def stable_ref(real: str, *, short: int = SHORT_ID_CHARS) -> str:
    """A short reference for ``real`` that depends on ``real`` alone, so it never changes.

    Ids of at most ``short`` characters are their own reference; a longer id is shown as
    ``#`` followed by `REF_DIGITS` decimal digits of its sha256 (about 4 tokens, where a UUID
    takes about 23).

    Example:
        >>> stable_ref("D3:14")
        'D3:14'
        >>> ref = stable_ref("0f8e2a4c-1b7d-4e59-9a3c-5d2b8f1e6a70")
        >>> ref
        '#081204972'
        >>> ref == stable_ref("0f8e2a4c-1b7d-4e59-9a3c-5d2b8f1e6a70")
        True
    """
    if len(real) <= short:
        return real
    hit = _refs.get(real)
    if hit is None:
        digest = hashlib.sha256(real.encode("utf-8")).digest()
        hit = f"#{int.from_bytes(digest[:8], 'big') % 10**REF_DIGITS:0{REF_DIGITS}d}"
        if len(_refs) >= _REFS_CACHED:
            _refs.clear()
        _refs[real] = hit
    return hit


def stable_refs(ids: Iterable[str], *, short: int = SHORT_ID_CHARS) -> dict[str, str]:
    """Reference -> real id for the ids whose reference differs from the id (shortened ones).

    Example:
        >>> stable_refs(["h1", "0f8e2a4c-1b7d-4e59-9a3c-5d2b8f1e6a70"])
        {'#081204972': '0f8e2a4c-1b7d-4e59-9a3c-5d2b8f1e6a70'}
    """
    out: dict[str, str] = {}
    for real in ids:
        ref = stable_ref(real, short=short)
        if ref != real:
            out.setdefault(ref, real)
    return out


def resolve_ref(ref: str, candidates: Iterable[str], *, short: int = SHORT_ID_CHARS) -> str | None:
    """The first of ``candidates`` whose `stable_ref` is ``ref`` (``None`` when none is).

    Example:
        >>> uuid = "0f8e2a4c-1b7d-4e59-9a3c-5d2b8f1e6a70"
        >>> resolve_ref("#081204972", ["h1", uuid]) == uuid, resolve_ref("h1", ["h1", uuid])
        (True, 'h1')
        >>> resolve_ref("#000000000", ["h1", uuid]) is None
        True
    """
    return next((c for c in candidates if stable_ref(c, short=short) == ref), None)
