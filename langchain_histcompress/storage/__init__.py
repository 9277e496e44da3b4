"""Storage behind a small interface: in-memory, SQLite (embedded default) and PostgreSQL.

* `HistoryStore`: append-only message logs per session plus atomic, version-checked
  compression commits (`InMemoryHistoryStore`, `SQLHistoryStore`).
* `SummaryStore`: one versioned running summary per key, the side store of
  `CompressingHistoryAdapter` (both stores above implement it too).
* `open_store`: a process-wide shared `SQLHistoryStore` per connection string.
* `parse_connection`: connection-string parsing (paths, ``sqlite:///``, ``:memory:``,
  ``postgresql://``); anything else raises `ConfigurationError` before any I/O.
"""

from langchain_histcompress.storage.base import HistoryStore, SessionSnapshot, SummaryStore
from langchain_histcompress.storage.memory import InMemoryHistoryStore
from langchain_histcompress.storage.sql import SCHEMA_VERSION, SQLHistoryStore, open_store
from langchain_histcompress.storage.urls import (
    DEFAULT_SQLITE_PATH,
    ConnectionSpec,
    parse_connection,
    redact_url,
)

__all__ = [
    "DEFAULT_SQLITE_PATH",
    "SCHEMA_VERSION",
    "ConnectionSpec",
    "HistoryStore",
    "InMemoryHistoryStore",
    "SQLHistoryStore",
    "SessionSnapshot",
    "SummaryStore",
    "open_store",
    "parse_connection",
    "redact_url",
]
