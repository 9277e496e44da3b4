"""Parse the connection strings the storage layer accepts.

* a plain filesystem path (``str`` or ``os.PathLike``), ``sqlite:///relative/path.db``,
  ``sqlite:////absolute/path.db``, ``sqlite:relative/path.db`` or ``sqlite:/absolute/path.db``:
  a SQLite file;
* ``:memory:``, ``sqlite://``, ``sqlite://:memory:``, ``sqlite:///:memory:`` and
  ``sqlite::memory:``: a private in-memory SQLite database;
* ``postgresql://...`` and ``postgres://...``: a PostgreSQL server (libpq URL).

Anything else (``sqlite://host/path.db`` included) raises `ConfigurationError` naming the
scheme, before any connection is opened or anything is written. Passwords never appear in
``display`` strings, logs or error messages.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from langchain_histcompress.core.errors import ConfigurationError

__all__ = ["DEFAULT_SQLITE_PATH", "ConnectionSpec", "parse_connection", "redact_url"]

DEFAULT_SQLITE_PATH = "histcompress.sqlite"
"""SQLite file used when no connection is given, relative to the working directory."""

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_MEMORY = ":memory:"


@dataclass(frozen=True)
class ConnectionSpec:
    """Where a store lives, as parsed from a connection string."""

    backend: Literal["sqlite", "postgres"]
    """Which database engine serves the store."""
    target: str
    """SQLite: a file path or ``":memory:"``. PostgreSQL: the libpq connection URL."""
    display: str
    """The connection string with any password replaced by ``***``; safe to log."""

    @property
    def is_memory(self) -> bool:
        """Whether this is a private in-memory SQLite database."""
        return self.backend == "sqlite" and self.target == _MEMORY


def redact_url(url: str) -> str:
    """Return ``url`` with the password (if any) replaced by ``***``.

    Example:
        >>> redact_url("postgresql://app:s3cret@db:5432/chat")
        'postgresql://app:***@db:5432/chat'
        >>> redact_url("postgresql://db/chat?password=s3cret&sslmode=require")
        'postgresql://db/chat?password=***&sslmode=require'
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable connection string>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostinfo = netloc.rpartition("@")
        if ":" in userinfo:
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:***@{hostinfo}"
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def parse_connection(connection: str | os.PathLike[str] | None) -> ConnectionSpec:
    """Parse a connection string or path into a `ConnectionSpec`.

    Args:
        connection: A path, a ``sqlite:`` / ``postgresql:`` URL, ``":memory:"``, or
            ``None`` for the default local SQLite file (`DEFAULT_SQLITE_PATH`).

    Returns:
        The parsed specification.

    Raises:
        ConfigurationError: The string is empty or uses an unsupported scheme.

    Example:
        >>> parse_connection("sqlite:////tmp/chat.db").target
        '/tmp/chat.db'
        >>> parse_connection("sqlite:chat.db").target, parse_connection("sqlite:/tmp/c.db").target
        ('chat.db', '/tmp/c.db')
        >>> parse_connection(":memory:").is_memory
        True
        >>> parse_connection("postgres://u:pw@localhost/db").display
        'postgres://u:***@localhost/db'
        >>> parse_connection("mysql://localhost/db")
        Traceback (most recent call last):
        ...
        langchain_histcompress.core.errors.ConfigurationError: unsupported ... scheme 'mysql' ...
    """
    if connection is None:
        return ConnectionSpec("sqlite", DEFAULT_SQLITE_PATH, DEFAULT_SQLITE_PATH)
    if not isinstance(connection, str):
        try:
            raw = os.fspath(connection)
        except TypeError:
            msg = (
                "connection must be a path, a connection URL or a store instance, "
                f"not {type(connection).__name__}"
            )
            raise ConfigurationError(msg) from None
        if not isinstance(raw, str):
            msg = "connection paths must be text, not bytes"
            raise ConfigurationError(msg)
        return _sqlite_path(raw, raw)
    text = connection.strip()
    if not text:
        msg = "connection string is empty; pass a path, a sqlite:/// URL or a postgresql:// URL"
        raise ConfigurationError(msg)
    if text == _MEMORY:
        return ConnectionSpec("sqlite", _MEMORY, _MEMORY)
    match = _SCHEME.match(text)
    if match is None:
        if text[:7].lower() == "sqlite:":  # no authority: what follows is the path
            rest = text[7:]
            return (
                ConnectionSpec("sqlite", _MEMORY, text)
                if rest == _MEMORY
                else (_sqlite_path(rest, text))
            )
        return _sqlite_path(text, text)
    scheme = match.group(1).lower()
    if scheme in ("postgresql", "postgres"):
        display = redact_url(text)
        if not text[match.end() :]:
            msg = f"PostgreSQL URL {display!r} names no server or database"
            raise ConfigurationError(msg)
        return ConnectionSpec("postgres", text, display)
    if scheme == "sqlite":
        rest = text[match.end() :]
        if rest in ("", _MEMORY, "/" + _MEMORY):
            return ConnectionSpec("sqlite", _MEMORY, text)
        if not rest.startswith("/") or rest == "/":
            msg = (
                f"SQLite URL {text!r} has no file path; use sqlite:///relative.db or "
                "sqlite:////absolute/path.db"
            )
            raise ConfigurationError(msg)
        return _sqlite_path(rest[1:], text)
    msg = (
        f"unsupported connection URL scheme {scheme!r} in {redact_url(text)!r}; "
        "expected a file path, sqlite:///path, :memory:, postgresql:// or postgres://"
    )
    raise ConfigurationError(msg)


def _sqlite_path(path: str, display: str) -> ConnectionSpec:
    if not path:
        msg = "SQLite path is empty"
        raise ConfigurationError(msg)
    if "\x00" in path:
        msg = "SQLite path contains a NUL character"
        raise ConfigurationError(msg)
    if "?" in path:
        msg = f"SQLite path {path!r} contains '?'; query parameters are not supported"
        raise ConfigurationError(msg)
    return ConnectionSpec("sqlite", path, display)
