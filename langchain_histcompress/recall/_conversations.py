"""Index state kept per conversation by a retriever that serves many conversations.

A retriever keeps indexes between calls so a growing history costs only its new messages.
Shared by several users, one index would mix their messages: BM25 statistics would count
another user's texts, and message ids (``"1"``, ``"h1"``, derived ids) recur across users.
`Conversations` keeps one state per conversation and matches each call to its state by
the messages it passes, never by id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage

if TYPE_CHECKING:
    from langchain_histcompress.recall._turn_index import _TurnIndex
    from langchain_histcompress.recall.bm25 import BM25Index, _FactIndex

__all__ = ["Conversation", "Conversations"]


class Conversation:
    """What one conversation's rankings depend on, kept between its calls."""

    __slots__ = ("facts", "source_slots", "turns")

    def __init__(self, turns: _TurnIndex, facts: _FactIndex) -> None:
        self.turns = turns
        """Its messages' index (BM25 statistics, ids seen, slots)."""
        self.facts = facts
        """Its facts' index (the facts of its latest call)."""
        self.source_slots: _SourceSlots | None = None
        """Its facts' source messages as slots of ``turns`` (see ``_SourceSlots``)."""


class _SourceSlots:
    """The facts' source messages as index slots, for scoring facts by their sources.

    Rebuilt when the facts change (a new ``sources`` mapping), the message index is replaced
    or one of its texts is replaced (a slot may then be stale). A rebuild for the same index
    reuses the slots already looked up: the index's key table is as large as the history,
    and mostly out of the CPU caches on a long one. Sources not indexed yet are looked up
    again on each call (normally none).
    """

    def __init__(
        self,
        np: Any,
        sources: Mapping[str, Sequence[str]],
        index: BM25Index,
        previous: _SourceSlots | None = None,
    ) -> None:
        self.sources, self.index, self.removed = sources, index, index.removed
        known = (
            previous.known
            if previous is not None
            and previous.index is index
            and previous.removed == index.removed
            else {}
        )
        self.known: dict[str, int] = {}
        """Source key -> slot, for the indexed source keys."""
        self.fact_ids = list(sources)
        slots: list[int] = []
        owners: list[int] = []
        self.pending: list[tuple[int, str]] = []
        for owner, keys in enumerate(sources.values()):
            for key in keys:
                slot = known.get(key)
                if slot is None:
                    slot = index.slot_of(key)
                if slot is None:
                    self.pending.append((owner, key))
                else:
                    self.known[key] = slot
                    slots.append(slot)
                    owners.append(owner)
        self.slots = np.array(slots, dtype=np.int64)
        self.owners = np.array(owners, dtype=np.int64)
        """The fact (index in ``fact_ids``) of each slot, ascending."""
        starts = [n for n in range(len(owners)) if not n or owners[n] != owners[n - 1]]
        self.starts = np.array(starts, dtype=np.int64)
        """Where each fact's run of slots begins."""
        self.facts_with_slots = [self.fact_ids[owners[n]] for n in starts]
        """The facts with at least one indexed source, one per run."""

    def valid(self, sources: Mapping[str, Sequence[str]], index: BM25Index) -> bool:
        return (
            self.sources is sources
            and self.index is index
            and self.removed == index.removed
            and all(index.slot_of(key) is None for _, key in self.pending)
        )


class Conversations:
    """One index state per conversation, the least recently used dropped past ``limit``.

    Message ids are only unique within a conversation (``"1"``, ``"h1"`` and derived ids
    recur across users), so a call is matched to a state by its messages, never by id: it
    continues the state whose recorded messages its messages extend (first messages
    compared by reference, then the rest at C speed, see ``_TurnIndex.continues``), or,
    when none does, the state whose recorded messages it begins with equal copies of (a
    history read back from a checkpoint: indexed again there, its texts not tokenized
    again); else it starts a fresh state, so an edited or cut history is indexed afresh.
    Each state holds its conversation's index, so ``limit`` bounds the indexes kept to that
    many conversations.
    """

    def __init__(self, limit: int, new: Callable[[], Conversation]) -> None:
        self.limit = limit
        self._new = new
        self.states: list[Conversation] = [new()]
        """Least recently used first."""

    def pick(self, messages: Sequence[BaseMessage], known_prefix: int) -> Conversation:
        """The state of the conversation ``messages`` belong to, now the most recent."""
        states = self.states
        if states[-1].turns.continues(messages, known_prefix):
            return states[-1]
        for at in range(len(states) - 2, -1, -1):
            if states[at].turns.continues(messages, known_prefix):
                states.append(states.pop(at))
                return states[-1]
        # a history read back as equal copies (a checkpoint): indexed again in its state,
        # which keeps the texts it tokenized (see ``_TurnIndex.sync``)
        for at in range(len(states) - 1, -1, -1):
            if states[at].turns.rebuilt(messages):
                states.append(states.pop(at))
                return states[-1]
        # a new conversation, or a history that changed: an index that never saw another
        # conversation's messages (the state of the list this call replaces is dropped)
        for at, state in enumerate(states):
            if state.turns.pristine:
                states.append(states.pop(at))
                return state
        for at, state in enumerate(states):
            if state.turns.indexed(messages):
                del states[at]
                break
        states.append(self._new())
        if len(states) > self.limit:
            del states[0]
        return states[-1]

    def untrust(self, messages: Sequence[BaseMessage]) -> None:
        """A call passing ``messages`` was not indexed: the next one vouches for nothing."""
        for state in self.states:
            if state.turns.indexed(messages):
                state.turns.trusted = False
