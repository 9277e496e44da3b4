"""Deterministic stand-ins for chat models, so every cookbook notebook runs offline.

`ScriptedChatModel` answers with a plain Python function of the messages it receives and
keeps every input in ``calls``. The functions below read the package's own prompts
(transcript lines such as ``<message id="m1" role="user">text</message>``, or ``[m1 user]
text`` in summarizer prompts) and answer
like a terse, very literal model. Each notebook uses ``ChatOpenAI`` instead when
``OPENAI_API_KEY`` is set.
"""

from __future__ import annotations

import ast
import html
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from langchain_histcompress.core.render import read_turn_lines


class ScriptedChatModel(BaseChatModel):
    """A chat model whose answer is ``respond(messages)`` (a str or an AIMessage)."""

    respond: Callable[[list[BaseMessage]], Any]
    calls: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self  # the script decides on tool calls itself

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.calls.append(list(messages))
        reply = self.respond(list(messages))
        message = reply if isinstance(reply, AIMessage) else AIMessage(reply)
        return ChatResult(generations=[ChatGeneration(message=message)])


# -- reading the package's prompts ------------------------------------------------------

_MESSAGE = re.compile(r'<message id="([^"]*)" role="(\w+)"[^>]*>(.*?)</message>', re.DOTALL)


def transcript(messages: Sequence[BaseMessage]) -> list[tuple[str, str, str]]:
    """``(id, role, text)`` of every message shown in the last prompt message: ``<message>``
    elements (extraction, rephrasing) and ``[id role] text`` lines (summaries)."""
    text = str(messages[-1].content)
    found = _MESSAGE.findall(text)
    elements = [(html.unescape(i), role, html.unescape(body)) for i, role, body in found]
    return elements + read_turn_lines(text)


def block(text: str, tag: str) -> str:
    """The unescaped body of the first ``<tag ...>...</tag>`` element ("" if absent)."""
    match = re.search(rf"<{tag}\b[^>]*>\n?(.*?)\n?</{tag}>", text, re.DOTALL)
    return html.unescape(match.group(1)) if match else ""


def clip(text: str, words: int = 10) -> str:
    parts = text.split()
    return " ".join(parts[:words]) + (" ..." if len(parts) > words else "")


def _sentence(text: str) -> str:
    return text if text.endswith((".", "?", "!")) else f"{text}."


# -- summarizer: previous summary + one note per request or tool result (+ variables for code) --


def summarize(messages: list[BaseMessage]) -> str:
    prompt = str(messages[-1].content)
    previous = block(prompt, "previous_summary")
    if previous.startswith("{"):
        previous = json.loads(previous)["ConversationSummary"]
    lines = transcript(messages)
    lead = {"user": "The user asked:", "tool": "A tool returned:"}
    notes = [n for n in _NOTE.split(previous) if n]
    notes += [_sentence(f"{lead[role]} {clip(text, 8)}") for _, role, text in lines if role in lead]
    kept: list[str] = []  # like any summary, it forgets: only the newest notes, up to 80 words
    while notes and len(" ".join([notes[-1], *kept]).split()) <= 80:
        kept.insert(0, notes.pop())
    answer: dict[str, Any] = {"ConversationSummary": " ".join(kept) or "Work went on."}
    if '"Variables"' in prompt:  # the "code" profile asks for variables, never for code
        answer["Variables"] = _variables(lines)
    return json.dumps(answer)


_NOTE = re.compile(r"\s(?=The user asked:|A tool returned:)")
_CALL = re.compile(r"\[calls run_python\((\{.*?\})\) id=")
_TYPES = {
    ast.List: "list",
    ast.ListComp: "list",
    ast.Dict: "dict",
    ast.DictComp: "dict",
    ast.BinOp: "number",
}


def _kind(value: ast.expr) -> str:
    if isinstance(value, ast.Constant):
        return type(value.value).__name__
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return f"{value.func.id}() result"
    return _TYPES.get(type(value), "value")


def _variables(lines: list[tuple[str, str, str]]) -> list[dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    request = ""
    for _, role, text in lines:
        if role == "user":
            request = clip(text, 6)
        for args in _CALL.findall(text):
            for node in ast.parse(json.loads(args)["code"]).body:
                if isinstance(node, ast.FunctionDef):
                    names, kind = [node.name], "function"
                elif isinstance(node, ast.Assign):
                    names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                    kind = _kind(node.value)
                else:
                    continue
                for name in names:
                    found[name] = {
                        "name": name,
                        "type": kind,
                        "description": f"made for: {request}",
                    }
    return list(found.values())


# -- fact extractor: a few regular expressions, UPDATE when a fact with the same key exists --

FACT_RULES = [
    (r"\bmy name is (\w+)", "The user's name is {}", "entity"),
    (r"\bI live in ([A-Z]\w+)", "The user lives in {}", "entity"),
    (r"\bbudget is (?:now )?(\d[\d,]* euros)", "The user's budget is {}", "constraint"),
    (r"\bI(?:'m| am) allergic to (\w+)", "The user is allergic to {}", "preference"),
    (r"\bI prefer ([\w ]+?)[.,!]", "The user prefers {}", "preference"),
]


def extract_facts(messages: list[BaseMessage]) -> str:
    prompt = str(messages[-1].content)
    current = [  # each line: "<id> <type> <confidence> | <content>"
        {"id": head.split()[0], "content": content}
        for head, _, content in (
            line.partition(" | ") for line in block(prompt, "current_facts").splitlines()
        )
        if content
    ]
    ops: list[dict[str, Any]] = []
    for message_id, role, text in transcript(messages):
        for pattern, template, kind in FACT_RULES:
            match = re.search(pattern, text, re.IGNORECASE) if role == "user" else None
            if match is None:
                continue
            content, key = template.format(match.group(1)), template.split("{")[0]
            same_key = [f for f in current if f["content"].startswith(key)]
            if same_key and same_key[0]["content"] != content:
                ops.append(
                    {
                        "op": "UPDATE",
                        "id": same_key[0]["id"],
                        "content": content,
                        "source_ids": [message_id],
                    }
                )
            elif not same_key:
                ops.append(
                    {
                        "op": "ADD",
                        "type": kind,
                        "content": content,
                        "confidence": 0.9,
                        "source_ids": [message_id],
                    }
                )
    return json.dumps(ops)


# -- answering model: says what it was given, so you can see the context at work ----------


def chat_reply(messages: list[BaseMessage]) -> str:
    question = str(messages[-1].content)
    data = " ".join(str(m.content) for m in messages if m.type == "system")
    summary = re.search(r'<conversation_summary version="(\d+)"', data)
    facts = len(re.findall(r"<fact ", data))
    seen = f"summary v{summary.group(1)}" if summary else "no summary"
    seen += f", {facts} facts" if facts else ""
    return (
        f"Noted: {clip(question, 8)} I am answering from {len(messages)} messages "
        f"({seen}). This scripted answer stands in for a real model: it is "
        "about as long as a short reply from one, so the history grows by a realistic amount "
        "with every turn, and it names what the model was given so you can follow along."
    )


# -- RAG: a rephraser that resolves "it"/"its", and an answer quoting the first document ----


def rephrase(messages: list[BaseMessage]) -> str:
    prompt = str(messages[-1].content)
    question = block(prompt, "question")
    names = re.findall(r"\b([A-Z][a-z]+ \d+)\b", block(prompt, "conversation"))
    if not names:
        return question
    name = names[-1]  # the thing mentioned last
    return re.sub(r"\bits\b", f"the {name}'s", re.sub(r"\bit\b", f"the {name}", question))


def rag_answer(messages: list[BaseMessage]) -> str:
    first = block(block(str(messages[0].content), "retrieved_context"), "document")
    return f"According to the documents: {first}" if first else "I don't know."


# -- a tool-calling agent: parallel weather calls for every city named, then one answer ----

CITIES = ("Lisbon", "Oslo", "Nairobi", "Lima", "Osaka", "Quebec", "Tunis", "Perth")
_call_ids = iter(range(1, 10_000))


def weather_agent(messages: list[BaseMessage]) -> AIMessage:
    last = messages[-1]
    if last.type == "human":
        cities = [c for c in CITIES if c.lower() in str(last.content).lower()] or ["Lisbon"]
        calls = [
            {"name": "get_weather", "args": {"city": c}, "id": f"call_{next(_call_ids)}"}
            for c in cities
        ]
        return AIMessage("", tool_calls=calls)
    results = []
    for message in reversed(messages):  # the results of the latest parallel calls
        if message.type != "tool":
            break
        results.insert(0, str(message.content))
    return AIMessage("Here is what I found: " + " ".join(results))


# -- an agent that looks things up: recall_history for "remember" questions, then answers ----

_RECALLED_LINE = re.compile(r"^\[(?:[^\]]+ )?user\] (.*)$", re.MULTILINE)


def recall_agent(messages: list[BaseMessage]) -> AIMessage:
    last = messages[-1]
    if last.type == "tool":  # answer from the first thing the user said in the recalled turns
        found = _RECALLED_LINE.search(html.unescape(str(last.content)))
        return AIMessage(f"You told me: {found.group(1)}" if found else "I could not find it.")
    question = str(last.content)
    if "remember" in question.lower():
        call = {
            "name": "recall_history",
            "args": {"query": question},
            "id": f"call_{next(_call_ids)}",
        }
        return AIMessage("", tool_calls=[call])
    return AIMessage(f"Noted: {clip(question, 8)}")
