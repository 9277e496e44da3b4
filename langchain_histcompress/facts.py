"""Key facts remembered about a conversation: the model, the merge rules and the extractor.

A `Fact` is one short, self-contained statement (a user intent, a confirmed detail, a
preference, a decision...) with provenance: the ids of the messages it comes from, a
confidence and a status. Facts live in graph state as plain JSON dicts keyed by fact id
(``{"f-1a2b...": {...}}``) so every LangGraph checkpointer stores them without custom types;
`merge_facts` is the state reducer that applies writes to that dict deterministically.

The model edge is `FactExtractor`: it shows the current facts (as data, with ids) and new
messages (in the `render_transcript` format) to a model, asks for JSON operations
(``ADD`` / ``UPDATE`` / ``DELETE``), validates them and applies them with `apply_fact_ops`.
Malformed output writes nothing.

Merge rules (all deterministic):

* Ids are assigned by the package, never taken from model output for ``ADD``: ``f-`` and 12
  hex digits of the sha256 of the normalized content (a numeric suffix on a collision).
* ``ADD`` of a content whose normalized form (casefolded, punctuation and whitespace folded)
  equals an existing fact's merges into that fact: source ids are united, the confidence is
  the maximum, ``confirmed`` wins over any other status.
* ``UPDATE`` keeps the id, unites source ids and records the previous content in
  ``supersedes`` when the content changes.
* ``UPDATE`` / ``DELETE`` of an unknown id is rejected (reported, not applied).
* Facts whose ``expires_at`` is not after ``now`` drop out.

Example:
    >>> from datetime import datetime, timezone
    >>> now = datetime(2025, 1, 1, tzinfo=timezone.utc)
    >>> state = merge_facts({}, [FactOp(op="ADD", fields={"content": "User lives in Oslo."})],
    ...                     now=now)
    >>> [fact["content"] for fact in state.values()]
    ['User lives in Oslo.']
    >>> state = merge_facts(state, [FactOp(op="ADD", fields={"content": "user lives in oslo"})],
    ...                     now=now)
    >>> len(state)
    1
"""

from __future__ import annotations

from langchain_histcompress.extraction import (
    FACT_EXTRACTION_PROMPT_VERSION,
    FACT_EXTRACTION_RUN_NAME,
    ExtractionReport,
    ExtractionResult,
    ExtractionStatus,
    FactExtractor,
    RejectedOp,
    build_extraction_prompt,
    fact_output_cap,
    parse_extraction_output,
)
from langchain_histcompress.fact_model import (
    DEFAULT_CONFIDENCE,
    FACT_TYPES,
    MAX_SUPERSEDED,
    Fact,
    FactOp,
    FactsUpdate,
    OpOutcome,
    apply_fact_ops,
    fact_id_for,
    facts_from_state,
    facts_to_state,
    merge_facts,
    normalize_content,
)

__all__ = [
    "DEFAULT_CONFIDENCE",
    "FACT_EXTRACTION_PROMPT_VERSION",
    "FACT_EXTRACTION_RUN_NAME",
    "FACT_TYPES",
    "MAX_SUPERSEDED",
    "ExtractionReport",
    "ExtractionResult",
    "ExtractionStatus",
    "Fact",
    "FactExtractor",
    "FactOp",
    "FactsUpdate",
    "OpOutcome",
    "RejectedOp",
    "apply_fact_ops",
    "build_extraction_prompt",
    "fact_id_for",
    "fact_output_cap",
    "facts_from_state",
    "facts_to_state",
    "merge_facts",
    "normalize_content",
    "parse_extraction_output",
]
