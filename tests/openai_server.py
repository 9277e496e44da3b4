"""A loopback OpenAI-compatible chat-completions server for tests (standard library only).

`OpenAIServer` runs ``http.server.ThreadingHTTPServer`` on ``127.0.0.1`` in a daemon thread
and answers ``POST .../chat/completions`` at once, the way the real API does: plain JSON, or
server-sent events when the request streams (with a final usage chunk when
``stream_options.include_usage`` is set). Tool calls, JSON-schema ``response_format``,
``refusal``, ``finish_reason`` and ``usage`` (with cached input tokens) are all produced.

What a request gets is decided per *lane* (the path before ``/chat/completions``, e.g. a
client with ``base_url=server.url("summarizer")``): first the queued items of `script`, then
the persistent item of `always`, then `auto_reply` (which recognises the package's summarizer,
fact-extraction and rephrasing prompts, and calls tools when tools are offered).

Injectable faults (`Fault`): an HTTP status with headers (429 with any ``Retry-After`` form,
500, 401...), a hang (holds the connection until the client gives up, which is recorded in
`OpenAIServer.disconnects`, or until the server stops), a malformed 200 body, and a stream cut
off before its end.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

__all__ = [
    "Fault",
    "OpenAIServer",
    "Reply",
    "Request",
    "auto_reply",
    "retry_after_forms",
    "serving",
]


@dataclass(frozen=True)
class Reply:
    """A successful chat completion."""

    content: str | None = "ok"
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    refusal: str | None = None
    finish_reason: str | None = None  # default: "tool_calls" with calls, else "stop"
    prompt_tokens: int | None = None  # default: estimated from the request
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # default: half the prompt, in 128-token steps


@dataclass(frozen=True)
class Fault:
    """A failure instead of an answer."""

    kind: Literal["status", "hang", "malformed", "truncated_stream"] = "status"
    status: int = 500
    headers: tuple[tuple[str, str], ...] = ()
    message: str = "injected fault"


Item = Reply | Fault


@dataclass(frozen=True)
class Request:
    """One request the server received."""

    lane: str
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def system(self) -> str:
        """Text of the system messages."""
        return "\n".join(
            _text(m.get("content"))
            for m in self.body.get("messages", [])
            if m.get("role") in ("system", "developer")
        )

    @property
    def last_user(self) -> str:
        """Text of the last user message."""
        return _last_user(self.body)

    @property
    def streamed(self) -> bool:
        return bool(self.body.get("stream"))


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _estimate(text: str) -> int:
    return max(1, len(text) // 4)


def auto_reply(request: Request) -> Reply:
    """A plausible answer to whatever the package (or an agent) asks."""
    system = request.system
    body = request.body
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema" or "ConversationSummary" in system + _last_user(body):
        return Reply(
            json.dumps(
                {"ConversationSummary": "The user and the assistant talked.", "Variables": []}
            )
        )
    if "Reply with the operations" in _last_user(body):  # the line format the prompt asks
        ids = re.findall(r'<message id="([^"]+)" role="user"', _last_user(body))
        if not ids:
            return Reply("NONE")
        return Reply(f"ADD other 0.9 {ids[0]} | Said something in {ids[0]}")
    if "standalone question" in system or "follow-up question" in system:
        return Reply("What is the capital of France?")
    tools = body.get("tools") or []
    messages = body.get("messages") or []
    if tools and messages and messages[-1].get("role") == "user":
        function = tools[0]["function"]
        required = function.get("parameters", {}).get("required", [])
        return Reply(None, tool_calls=((function["name"], {name: "x" for name in required}),))
    return Reply("ok")


def _last_user(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            return _text(message.get("content"))
    return ""


class _QuietServer(ThreadingHTTPServer):
    """Clients that drop their connection (timeouts, cancels) are expected: no tracebacks."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        return


class OpenAIServer:
    """The server; use as a context manager or call `start` / `stop`."""

    def __init__(self, responder: Callable[[Request], Item] = auto_reply) -> None:
        self.responder = responder
        self.requests: list[Request] = []
        self.disconnects = 0
        self._lock = threading.Lock()
        self._scripts: dict[str, deque[Item]] = {}
        self._always: dict[str, Item] = {}
        self._stopping = threading.Event()
        self._server = _QuietServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, lane: str = "") -> str:
        """The ``base_url`` of a lane (``""``: the default lane)."""
        prefix = f"/{lane}" if lane else ""
        return f"http://127.0.0.1:{self.port}{prefix}/v1"

    def start(self) -> OpenAIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def script(self, *items: Item, lane: str = "") -> None:
        """Answer the next requests of ``lane`` with ``items``, in order."""
        with self._lock:
            self._scripts.setdefault(lane, deque()).extend(items)

    def always(self, item: Item | None, lane: str = "") -> None:
        """Answer every later request of ``lane`` with ``item`` (``None``: back to normal)."""
        with self._lock:
            if item is None:
                self._always.pop(lane, None)
            else:
                self._always[lane] = item

    def count(self, lane: str = "") -> int:
        """Requests received on ``lane``."""
        with self._lock:
            return sum(1 for r in self.requests if r.lane == lane)

    def reset(self) -> None:
        """Forget requests, scripts and faults; answer with `auto_reply` again."""
        with self._lock:
            self.responder = auto_reply
            self.requests.clear()
            self._scripts.clear()
            self._always.clear()
            self.disconnects = 0

    def wait_for_disconnects(self, count: int, deadline: float = 10.0) -> int:
        """Wait (bounded) until ``count`` hung requests were dropped by their client."""
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            with self._lock:
                if self.disconnects >= count:
                    return self.disconnects
            time.sleep(0.01)
        with self._lock:
            return self.disconnects

    # ----------------------------------------------------------------- internals

    def _next(self, request: Request) -> Item:
        with self._lock:
            self.requests.append(request)
            queued = self._scripts.get(request.lane)
            if queued:
                return queued.popleft()
            persistent = self._always.get(request.lane)
        if persistent is not None:
            return persistent
        return self.responder(request)

    def _hang(self, connection: socket.socket) -> None:
        """Hold the request until the client closes the connection or the server stops."""
        while not self._stopping.is_set():
            readable, _, _ = select.select([connection], [], [], 0.02)
            if readable:
                try:
                    data = connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    data = b""
                if not data:
                    with self._lock:
                        self.disconnects += 1
                    return


_CALL_IDS = itertools.count(1)


def _completion(request: Request, reply: Reply) -> tuple[dict[str, Any], dict[str, Any]]:
    """The assistant message and the usage of ``reply``."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.content,
        "refusal": reply.refusal,
    }
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{next(_CALL_IDS)}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(reply.tool_calls)
        ]
    prompt = (
        reply.prompt_tokens
        if reply.prompt_tokens is not None
        else _estimate(json.dumps(request.body.get("messages", [])))
    )
    completion = (
        reply.completion_tokens
        if reply.completion_tokens is not None
        else _estimate(reply.content or reply.refusal or "x")
    )
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {
            "cached_tokens": reply.cached_tokens
            if reply.cached_tokens is not None
            else prompt // 256 * 128
        },
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    return message, usage


def _finish(reply: Reply) -> str:
    if reply.finish_reason is not None:
        return reply.finish_reason
    return "tool_calls" if reply.tool_calls else "stop"


def _handler(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            path = self.path.split("?")[0]
            if not path.endswith("/chat/completions"):
                self._json(
                    404, {"error": {"message": "not found", "type": "invalid_request_error"}}
                )
                return
            lane = path[: -len("/chat/completions")].removesuffix("/v1").strip("/")
            request = Request(
                lane, json.loads(raw or b"{}"), {k.lower(): v for k, v in self.headers.items()}
            )
            item = server._next(request)
            if isinstance(item, Fault):
                self._fault(item, request)
            elif request.streamed:
                self._stream(request, item)
            else:
                self._answer(request, item)

        def _json(
            self, status: int, payload: dict[str, Any], headers: tuple[tuple[str, str], ...] = ()
        ) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _fault(self, fault: Fault, request: Request) -> None:
            if fault.kind == "hang":
                server._hang(self.connection)
                self.close_connection = True
                return
            if fault.kind == "malformed":
                data = b'{"id": "chatcmpl-x", "choices": [{"message": {"content": "tru'
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            if fault.kind == "truncated_stream" and not request.streamed:
                data = json.dumps(
                    {
                        "id": "chatcmpl-x",
                        "choices": [{"message": {"content": "And how much does a room"}}],
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault.kind == "truncated_stream":
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                chunk = {
                    "id": "chatcmpl-x",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": "m",
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": "And how"},
                            "finish_reason": None,
                        }
                    ],
                }
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            error_type = {401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(
                fault.status, "server_error"
            )
            self._json(
                fault.status,
                {"error": {"message": fault.message, "type": error_type, "code": error_type}},
                fault.headers,
            )

        def _answer(self, request: Request, reply: Reply) -> None:
            message, usage = _completion(request, reply)
            self._json(
                200,
                {
                    "id": f"chatcmpl-{len(server.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": request.body.get("model", "gpt-4o-mini"),
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "logprobs": None,
                            "finish_reason": _finish(reply),
                        }
                    ],
                    "usage": usage,
                },
            )

        def _stream(self, request: Request, reply: Reply) -> None:
            message, usage = _completion(request, reply)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.end_headers()
            base = {
                "id": f"chatcmpl-{len(server.requests)}",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": request.body.get("model", "gpt-4o-mini"),
            }
            deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
            text = message.get("content") or ""
            deltas += [{"content": text[i : i + 8]} for i in range(0, len(text), 8)]
            if message.get("refusal"):
                deltas.append({"refusal": message["refusal"]})
            for index, call in enumerate(message.get("tool_calls") or []):
                deltas.append({"tool_calls": [{"index": index, **call}]})
            events = [
                {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
                for d in deltas
            ]
            events.append(
                {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": _finish(reply)}]}
            )
            if (request.body.get("stream_options") or {}).get("include_usage"):
                events.append({**base, "choices": [], "usage": usage})
            payload = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
            self.wfile.write(payload.encode())
            self.wfile.flush()
            self.close_connection = True

    return Handler


@contextlib.contextmanager
def serving(responder: Callable[[Request], Item] = auto_reply) -> Iterator[OpenAIServer]:
    """Run a server for the duration of the block."""
    server = OpenAIServer(responder).start()
    try:
        yield server
    finally:
        server.stop()


def retry_after_forms(seconds: float) -> dict[str, tuple[tuple[str, str], ...]]:
    """The three ``Retry-After`` forms meaning ``seconds`` (the date form rounds up to 1 s)."""
    from email.utils import formatdate

    return {
        "seconds": (("retry-after", str(seconds)),),
        "ms": (("retry-after-ms", str(int(seconds * 1000))),),
        "http-date": (("retry-after", formatdate(time.time() + seconds, usegmt=True)),),
    }
