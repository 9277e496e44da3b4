"""A running summary's uncovered tail as last seen, grown by the new messages instead of re-read.

Between two folds each `RoundCompressor.compress` call sees the previous history plus a few
new messages. `TailState` keeps what the previous call derived from the tail (rounds, token
costs, cache state, ids, validity) in the summary's memo, so the next call reads only the new
messages. `grow` uses it only when it provably describes the history at hand (same cursor,
lead and tail objects; new messages with fresh ids, none a system message; still valid),
`record` stores one after a full read, and `carry` hands it on to the summary a fold of
whole rounds makes. The conditions and their reasons are in ``docs/design/core.md``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_histcompress.core.identified import IdentifiedMessages
from langchain_histcompress.core.memos import existing_memo, memo
from langchain_histcompress.core.rounds import Round, validate_history
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.core.schedule import RoundLoad, starts_cold
from langchain_histcompress.core.tail import TailParts, _Cursor, _verified_cursor
from langchain_histcompress.core.tokens import TiktokenCounter, TokenCounter, message_costs

_STATE_KEY = "tail_state"
# Histories a state may describe: lists and tuples, and histories given ids lazily, whose tail
# copies are kept from one turn to the next (`_tail._keep_copies`) so they are the same objects.
_GROWABLE = (list, tuple, IdentifiedMessages)

Timestamp = Callable[[BaseMessage], datetime | None]


@dataclass(frozen=True)
class TailTiming:
    """How a compressor reads cache pauses (``None`` lifetime: it does not schedule by cost)."""

    timestamp: Timestamp
    """A message's time."""
    lifetime: float | None
    """Seconds the provider's cache stays warm."""
    costs: bool = True
    """Whether the compressor reads the rounds' token costs (a schedule, a token threshold
    or a trigger): without them new messages are not counted at all."""
    settings: tuple[object, ...] = ()
    """What the recorded figures depend on besides the messages (counter, time reader...):
    a state made under other settings is not used."""


@dataclass(slots=True)
class TailState:
    """What one compressor derived from a summary's tail on its last call.

    Never changed once stored (a grown tail is a new state); not frozen only because frozen
    dataclasses are slower to build, and one is built on every turn.
    """

    owner: object
    """The compressor that made it."""
    settings: tuple[object, ...]
    """``TailTiming.settings`` when it was made."""
    cursor: _Cursor
    """The summary's cursor it was made with (identity-checked)."""
    lead: list[BaseMessage]
    """The history's leading system messages."""
    tail: list[BaseMessage]
    """The tail's messages, ``messages[cursor.start:]``."""
    ids: frozenset[str]
    """Ids of the lead and the tail."""
    step_from: int
    """Index in ``tail`` of its last message that is not a tool result: where its last tool
    step starts (the only part whose validation can change when messages are appended)."""
    rounds: tuple[Round, ...]
    """The tail split into rounds (all pending: the tail holds no covered id)."""
    costs: tuple[int, ...] | None
    """Tokens of each round (``None`` when the compressor reads no costs)."""
    requests: tuple[int, ...]
    """AI messages of each round."""
    cold: tuple[bool, ...] | None
    """Whether each round started after the cache went cold (``None`` without a lifetime)."""
    loads: tuple[RoundLoad, ...] | None
    """The rounds as the cost schedule sees them (``None`` without a lifetime)."""
    fixed_tokens: int | None
    """Tokens of the caller's preamble (``None`` when the compressor does not need them)."""


def _loads(
    costs: Sequence[int] | None,
    requests: Sequence[int],
    cold: Sequence[bool] | None,
    kept: tuple[RoundLoad, ...] | None = None,
    first: int = 0,
) -> tuple[RoundLoad, ...] | None:
    """The rounds' loads: ``kept[:first]``, then made from ``first`` on.

    The latest round counts the coming request.
    """
    if cold is None or costs is None:
        return None
    last = len(costs) - 1
    return (
        *(kept[:first] if kept is not None else ()),
        *(
            RoundLoad(tokens=costs[i], requests=max(1, requests[i] + (i == last)), cold=cold[i])
            for i in range(first, last + 1)
        ),
    )


def _plain(message: BaseMessage) -> bool:
    """A human message, or an AI message that calls no tool: it cannot break a tool step."""
    if isinstance(message, HumanMessage):
        return True
    return (
        isinstance(message, AIMessage) and not message.tool_calls and not message.invalid_tool_calls
    )


def _as_list(part: Sequence[BaseMessage]) -> list[BaseMessage]:
    return part if type(part) is list else list(part)


def _ai_count(messages: Sequence[BaseMessage]) -> int:
    return sum(1 for m in messages if isinstance(m, AIMessage))


def _step_start(tail: Sequence[BaseMessage]) -> int:
    index = len(tail) - 1
    while index > 0 and isinstance(tail[index], ToolMessage):
        index -= 1
    return max(index, 0)


def _new_costs(counter: TokenCounter, messages: list[BaseMessage]) -> list[int]:
    """Tokens of each new message (a round's tokens are the sum of its messages').

    A `TiktokenCounter` counts them one by one from its per-message cache, so these short
    lists never take the place of a whole history among the lists it remembers.
    """
    if not messages:
        return []
    if isinstance(counter, TiktokenCounter):
        return counter._count_each(messages)  # one lookup of the per-message cache
    return message_costs(counter, messages)


def _colds(rounds: Sequence[Round], timing: TailTiming, first: int = 0) -> list[bool]:
    """Cold flags of ``rounds[first:]`` (each round against the one before it)."""
    lifetime = timing.lifetime
    assert lifetime is not None
    return [
        starts_cold(
            rounds[i].messages[0],
            rounds[i - 1].messages[-1] if i else None,
            timing.timestamp,
            lifetime,
        )
        for i in range(first, len(rounds))
    ]


def record(
    owner: object,
    summary: RunningSummary | None,
    parts: TailParts,
    rounds: Sequence[Round],
    costs: Sequence[int] | None,
    timing: TailTiming,
    fixed_tokens: int | None,
) -> None:
    """Keep ``parts``' tail for ``owner``'s next call, when a later call can grow it.

    ``parts`` comes from the full path on a history whose lead and tail broke no rule;
    ``rounds`` are its pending rounds and ``costs`` their tokens (``None`` when
    ``timing.costs`` is false).
    """
    cursor = parts.cursor
    if summary is None or cursor is None or cursor.tail_covered:
        return
    messages, start = parts.messages, parts.tail_start
    tail = parts.tail
    if not isinstance(messages, _GROWABLE) or len(tail) != len(messages) - start:
        return  # summary messages in the tail: left to the full path
    if any(isinstance(m, SystemMessage) for m in tail):
        return
    if (costs is None) == timing.costs or sum(len(r.messages) for r in rounds) != len(tail):
        return
    if costs is not None and len(costs) != len(rounds):
        return
    lead = list(messages[: parts.lead_end])
    ids = frozenset(m.id for m in (*lead, *tail) if m.id is not None)
    requests = tuple(_ai_count(r.messages) for r in rounds)
    cold = tuple(_colds(rounds, timing)) if timing.lifetime is not None else None
    if cold is not None and costs is None:
        return
    memo(summary)[_STATE_KEY] = TailState(
        owner=owner,
        settings=timing.settings,
        cursor=cursor,
        lead=lead,
        tail=list(tail),
        ids=ids,
        step_from=_step_start(tail),
        rounds=tuple(rounds),
        costs=None if costs is None else tuple(costs),
        requests=requests,
        cold=cold,
        loads=_loads(costs, requests, cold),
        fixed_tokens=fixed_tokens,
    )


def _found_state(
    owner: object, summary: RunningSummary, timing: TailTiming
) -> tuple[TailState, dict[str, Any]] | None:
    """``owner``'s state in ``summary``'s memo, with the memo, when made under ``timing``."""
    cache = existing_memo(summary)
    state = cache.get(_STATE_KEY) if cache is not None else None
    if cache is None or not isinstance(state, TailState) or state.owner is not owner:
        return None
    if state.settings != timing.settings:
        return None
    return state, cache


def _fresh_ids(
    new: Sequence[BaseMessage], seen: AbstractSet[str], covered: AbstractSet[str]
) -> set[str] | None:
    """Ids of the new messages, or ``None`` when one is missing, repeats or is a system one."""
    fresh: set[str] = set()
    for message in new:
        if not isinstance(message, BaseMessage) or isinstance(message, SystemMessage):
            return None
        message_id = message.id
        if (
            not isinstance(message_id, str)
            or not message_id
            or message_id in seen
            or message_id in fresh
            or message_id in covered
        ):
            return None
        fresh.add(message_id)
    return fresh


def _grown(
    owner: object,
    state: TailState,
    cursor: _Cursor,
    tail: list[BaseMessage],
    new: list[BaseMessage],
    ids: frozenset[str],
    step_from: int,
    counter: TokenCounter,
    timing: TailTiming,
) -> TailState:
    """``state`` with the ``new`` messages appended to its last round or opening new ones."""
    rounds = list(state.rounds)
    requests = list(state.requests)
    costs = None if state.costs is None else list(state.costs)
    # new messages are counted only for a compressor that reads costs
    counts = _new_costs(counter, new) if costs is not None else [0] * len(new)
    for message, cost in zip(new, counts, strict=True):
        if isinstance(message, HumanMessage) or not rounds:
            rounds.append(Round((message,)))
            requests.append(0)
            if costs is not None:
                costs.append(cost)
        else:
            rounds[-1] = Round((*rounds[-1].messages, message))
            if costs is not None:
                costs[-1] += cost
        if isinstance(message, AIMessage):
            requests[-1] += 1
    cold = state.cold
    if cold is not None:
        first_new = len(state.rounds)
        cold = (*cold[:first_new], *_colds(rounds, timing, first_new))
    return TailState(
        owner=owner,
        settings=state.settings,
        cursor=cursor,
        lead=state.lead,
        tail=tail,
        ids=ids,
        step_from=step_from,
        rounds=tuple(rounds),
        costs=None if costs is None else tuple(costs),
        requests=tuple(requests),
        cold=cold,
        loads=_loads(costs, requests, cold, state.loads, max(len(state.rounds) - 1, 0)),
        fixed_tokens=state.fixed_tokens,
    )


def grow(
    owner: object,
    messages: Sequence[BaseMessage],
    summary: RunningSummary | None,
    lead_end: int,
    counter: TokenCounter,
    timing: TailTiming,
) -> tuple[TailParts, TailState] | None:
    """``messages`` split for ``summary`` from ``owner``'s last state, reading only new messages.

    Returns the parts and the grown state (also recorded), or ``None`` when the state does
    not provably apply (see the module docstring): the caller then takes the full path.
    """
    if summary is None or not isinstance(messages, _GROWABLE):
        return None
    found = _found_state(owner, summary, timing)
    if found is None:
        return None
    state, cache = found
    cursor = _verified_cursor(messages, summary, lead_end)
    if cursor is not state.cursor:
        return None
    start = cursor.start
    old = state.tail
    end = start + len(old)
    if len(messages) < end or len(state.lead) != lead_end:
        return None
    if _as_list(messages[:lead_end]) != state.lead:
        return None
    # the very objects: the rounds kept hold them, and the view shows the caller's own
    if not all(map(operator.is_, messages[start:end], old)):
        return None
    new = _as_list(messages[end:])
    fresh = _fresh_ids(new, state.ids, summary.covered_ids)
    if fresh is None:
        return None
    tail = [*old, *new] if new else old
    grown = state
    if new:
        step_from = state.step_from
        # plain messages after a step without calls cannot break a rule (ids were checked)
        trivial = _plain(old[step_from]) if old else False
        if not (trivial and all(map(_plain, new))) and validate_history(tail[step_from:]):
            return None
        grown = _grown(
            owner, state, cursor, tail, new, state.ids | fresh, _step_start(tail), counter, timing
        )
        cache[_STATE_KEY] = grown  # the summary's memo, where ``state`` was found
    parts = TailParts(
        messages,
        lead_end,
        start,
        tail,
        tail_covered=cursor.tail_covered,
        system_at=cursor.system_at,
        cursor=cursor,
        grown=True,
    )
    return parts, grown


def carry(
    owner: object,
    previous: RunningSummary | None,
    before: TailParts,
    final: RunningSummary,
    after: TailParts,
    folded_rounds: int,
    folded_messages: int,
) -> bool:
    """Give ``final`` the state of ``previous`` without the rounds a fold just covered.

    ``before`` are the parts the fold was planned on, ``after`` the same history located for
    ``final``, which covers the oldest ``folded_rounds`` pending rounds
    (``folded_messages`` messages) more than ``previous``. Returns whether it did: the view
    of ``after`` then needs no repair (the rest of a valid tail from a round's start is
    valid).
    """
    if previous is None or folded_rounds < 1:
        return False
    cache = existing_memo(previous)
    state = cache.get(_STATE_KEY) if cache is not None else None
    if not isinstance(state, TailState) or state.owner is not owner:
        return False
    cursor = after.cursor
    if (
        state.cursor is not before.cursor
        or state.tail != before.tail  # the state describes the tail the fold was planned on
        or cursor is None
        or cursor.tail_covered
        or after.lead_end != before.lead_end
        or after.tail_start != before.tail_start + folded_messages
        or folded_rounds > len(state.rounds)
        or sum(len(r.messages) for r in state.rounds[:folded_rounds]) != folded_messages
        or len(after.tail) != len(state.tail) - folded_messages
    ):
        return False
    tail = state.tail[folded_messages:]
    step_from = state.step_from - folded_messages
    costs = None if state.costs is None else state.costs[folded_rounds:]
    requests = state.requests[folded_rounds:]
    # the first pending round never counts as cold (nothing before it is pending)
    cold = None if state.cold is None else (False, *state.cold[folded_rounds + 1 :])
    memo(final)[_STATE_KEY] = TailState(
        owner=owner,
        settings=state.settings,
        cursor=cursor,
        lead=state.lead,
        tail=tail,
        ids=frozenset(m.id for m in (*state.lead, *tail) if m.id is not None),
        step_from=step_from if step_from >= 0 else _step_start(tail),
        rounds=state.rounds[folded_rounds:],
        costs=costs,
        requests=requests,
        cold=cold,
        loads=_loads(costs, requests, cold),
        fixed_tokens=state.fixed_tokens,
    )
    return True
