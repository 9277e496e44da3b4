"""The OpenAI chat-completions rules a request must obey, checked on LangChain messages.

Written independently of the package (it does not use `rounds`), so tests can hold any face's
output against it. A request is what a chat model receives: its messages in order, converted
the way langchain-openai converts them (``tool_calls`` and ``invalid_tool_calls`` both become
the assistant message's ``tool_calls``).

Rules checked by `request_violations`:

* every tool message answers a call of the assistant message before it in the same step (only
  tool messages may sit between them), and answers it once;
* every call of an assistant message is answered before the next non-tool message, and before
  the end of the request (the model is called after the tools ran);
* every call has a non-empty id, unique within its message;
* the system text is unchanged: each of the caller's own system messages is there, its text
  intact (a copy may have text appended after it);
* the latest user message is there, unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

__all__ = ["calls_of", "request_violations", "text_of"]


def calls_of(message: BaseMessage) -> list[str | None]:
    """The ids of every call an assistant message sends (valid and invalid tool calls)."""
    if not isinstance(message, AIMessage):
        return []
    return [c.get("id") for c in [*message.tool_calls, *message.invalid_tool_calls]]


def text_of(message: BaseMessage) -> str:
    """The text of a message (content blocks joined)."""
    content = message.content
    if isinstance(content, str):
        return content
    parts = [b if isinstance(b, str) else str(b.get("text", "")) for b in content]
    return "".join(parts)


def request_violations(
    request: Sequence[BaseMessage],
    *,
    system: Sequence[BaseMessage] = (),
    latest_user: BaseMessage | None = None,
) -> list[str]:
    """Every rule ``request`` breaks, as readable strings (empty when it is valid).

    Args:
        request: The messages a model receives.
        system: The caller's own system messages (the preamble) that must be intact.
        latest_user: The latest user message of the history, which must be sent.
    """
    problems: list[str] = []
    open_calls: dict[str, int] = {}  # call id -> index of the assistant message
    answered: set[str] = set()
    in_step = False
    for index, message in enumerate(request):
        if isinstance(message, ToolMessage):
            call_id = message.tool_call_id
            if not in_step:
                problems.append(f"[{index}] tool message {call_id!r} follows no assistant call")
            elif call_id in open_calls:
                del open_calls[call_id]
                answered.add(call_id)
            elif call_id in answered:
                problems.append(f"[{index}] second answer to call {call_id!r}")
            else:
                problems.append(f"[{index}] tool message {call_id!r} answers no call of its step")
            continue
        for call_id, at in open_calls.items():
            problems.append(f"[{at}] call {call_id!r} unanswered before message {index}")
        open_calls, answered, in_step = {}, set(), False
        ids = calls_of(message)
        if ids:
            in_step = True
            for call_id in ids:
                if not call_id:
                    problems.append(f"[{index}] a call without an id")
                elif call_id in open_calls:
                    problems.append(f"[{index}] call id {call_id!r} twice in one message")
                else:
                    open_calls[call_id] = index
    for call_id, at in open_calls.items():
        problems.append(f"[{at}] call {call_id!r} unanswered at the end of the request")
    sent_system = [text_of(m) for m in request if isinstance(m, SystemMessage)]
    for original in system:
        text = text_of(original)
        if not any(sent == text or sent.startswith(text) for sent in sent_system):
            problems.append(f"system message {original.id!r} missing or changed")
    if latest_user is not None and not any(
        isinstance(m, HumanMessage) and m.content == latest_user.content for m in request
    ):
        problems.append("the latest user message is missing")
    return problems
