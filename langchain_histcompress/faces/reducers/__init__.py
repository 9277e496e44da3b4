"""History reducers applied in front of any chat model (Semantic Kernel's chat-history reducers).

A reducer takes the full message list and returns a shorter, provider-valid list, or
``None`` when nothing needs doing. Every reducer keeps the system preamble byte-identical,
keeps the latest user message, never separates a tool call from its results, and keeps no
per-conversation state that another conversation could reach: one instance may serve every
user of a server.

- `TruncationReducer`: the last N messages.
- `MaxTokensReducer`: the newest whole rounds within a token budget.
- `SummarizationReducer`: a running summary of the older part, the newest messages verbatim.
- `with_history_reducer`: put any of them in front of a chat model.
"""

from langchain_histcompress.faces.reducers.max_tokens import MaxTokensReducer
from langchain_histcompress.faces.reducers.summarization import SummarizationReducer
from langchain_histcompress.faces.reducers.truncation import TruncationReducer
from langchain_histcompress.faces.reducers.wrapper import HistoryReducer, with_history_reducer

__all__ = [
    "HistoryReducer",
    "MaxTokensReducer",
    "SummarizationReducer",
    "TruncationReducer",
    "with_history_reducer",
]
