"""`ScriptedChatModel`: the offline model that plays every role of the demo from its script.

Example:
    >>> from langchain_core.messages import HumanMessage
    >>> from langchain_histcompress.workbench.demo_script import load_script
    >>> ScriptedChatModel(script=load_script()).reply_for([HumanMessage("hi", id="u01")])[:5]
    'Hi Ma'
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.outputs import ChatResult
from pydantic import ConfigDict, InstanceOf, PrivateAttr

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.core.facts import normalize_content
from langchain_histcompress.core.render import message_text, read_turn_lines
from langchain_histcompress.core.tokens import TiktokenCounter
from langchain_histcompress.workbench.demo_script import COUNTER_MODEL, DemoScript, ScriptedTurn
from langchain_histcompress.workbench.replay import counted_reply

__all__ = ["ScriptedChatModel"]

_MESSAGE_ID = re.compile(r'<message\b[^>]*?\bid="([^"]*)"')


def _block(text: str, tag: str) -> str | None:
    start = text.rfind(f"<{tag}")
    if start < 0:
        return None
    open_end = text.find(">", start)
    end = text.find(f"</{tag}>", open_end)
    if open_end < 0 or end < 0:
        return None
    return text[open_end + 1 : end]


class ScriptedChatModel(BaseChatModel):
    """Offline chat model that plays every role of the demo from the shipped script.

    It recognises the prompt in front of it and answers with the scripted output:

    * the answering call (its last message is a scripted user message, by id): the reply;
    * a summarizer prompt (``<conversation>`` + the ``ConversationSummary`` format): the
      summary through the newest message id shown (``[id role]`` lines), whichever it is
      (the script composes one through every message, from what the conversation says up
      to there);
    * a fact-extraction prompt (``<new_messages>``): the operations scripted for the newest
      message id shown, ``UPDATE`` / ``DELETE`` pointed at the fact ids the prompt's
      ``<current_facts>`` block shows (the package assigns fact ids, the script cannot);
    * a rephrasing prompt (``<question>``): the scripted standalone question.

    Anything else raises `ConfigurationError`, so a prompt that drifts from the script fails
    loudly. Usage metadata counts prompt and reply with the model's `TiktokenCounter`.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_histcompress.workbench.demo_script import load_script
        >>> model = ScriptedChatModel(script=load_script())
        >>> print(model.invoke([HumanMessage("How would you split the nights?", id="u03")])
        ...       .content[:32])
        For a relaxed pace I'd do 8 nigh
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    script: InstanceOf[DemoScript]
    """The conversation and its scripted internal outputs."""
    counter: InstanceOf[TiktokenCounter] | None = None
    """Token counter for the usage metadata (default: the ``gpt-4o-mini`` encoding)."""
    _replies: dict[str, ScriptedTurn] = PrivateAttr(default_factory=dict)
    _standalone: dict[str, str] = PrivateAttr(default_factory=dict)
    _tokens: TiktokenCounter = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        """Build the lookups."""
        super().model_post_init(context)
        self._replies = self.script.turn_by_user_id()
        self._standalone = self.script.standalone_by_question()
        self._tokens = self.counter or TiktokenCounter(COUNTER_MODEL)

    @property
    def _llm_type(self) -> str:
        return "histcompress-demo-script"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"script": self.script.title}

    def reply_for(self, messages: Sequence[BaseMessage]) -> str:
        """The scripted answer to a prompt (see the class docstring)."""
        last = messages[-1] if messages else None
        if isinstance(last, HumanMessage) and last.id in self._replies:
            return self._replies[last.id].reply_text
        text = "\n".join(message_text(m) for m in messages)
        # Conversation text is escaped inside every package prompt, so these tags are the
        # package's own delimiters.
        if "<new_messages>" in text:
            return self._fact_operations(text)
        if "<question>" in text:
            return self._rephrasing(text)
        if "<conversation>" in text and "ConversationSummary" in text:
            return self._summary(text)
        msg = "the demo script has no answer for this prompt (not a scripted turn or call)"
        raise ConfigurationError(msg)

    @staticmethod
    def _newest_id(block: str | None, what: str) -> str:
        ids = [html.unescape(m) for m in _MESSAGE_ID.findall(block or "")]
        ids += [line_id for line_id, _role, _text in read_turn_lines(block or "")]
        if not ids:
            msg = f"the {what} prompt shows no message (<message id=...> or [id role] line)"
            raise ConfigurationError(msg)
        return ids[-1]

    def _summary(self, text: str) -> str:
        through = self._newest_id(_block(text, "conversation"), "summarizer")
        output = self.script.summaries.get(through)
        if output is None:
            msg = f"the demo script has no summary for messages through {through!r}"
            raise ConfigurationError(msg)
        return json.dumps(output, ensure_ascii=False)

    def _shown_facts(self, text: str) -> dict[str, str]:
        block = _block(text, "current_facts") or ""
        shown: dict[str, str] = {}
        for line in block.splitlines():  # "<id> <type> <confidence> | <content>"
            head, bar, content = html.unescape(line.strip()).partition(" | ")
            if bar and head.split():
                shown[normalize_content(content)] = head.split()[0]
        return shown

    def _fact_id(self, key: str, shown: Mapping[str, str]) -> str:
        for content in reversed(self.script.key_contents.get(key, ())):
            fact_id = shown.get(normalize_content(content))
            if fact_id is not None:
                return fact_id
        msg = f"the extraction prompt does not show the scripted fact {key!r}"
        raise ConfigurationError(msg)

    def _fact_operations(self, text: str) -> str:
        through = self._newest_id(_block(text, "new_messages"), "extraction")
        operations = self.script.fact_batches.get(through)
        if operations is None:
            msg = f"the demo script has no fact operations for messages through {through!r}"
            raise ConfigurationError(msg)
        shown = self._shown_facts(text)
        out: list[dict[str, Any]] = []
        for op in operations:
            item = {k: v for k, v in op.items() if k != "key"}
            if op["op"] != "ADD":
                item["id"] = self._fact_id(str(op["key"]), shown)
            out.append(item)
        return json.dumps(out, ensure_ascii=False)

    def _rephrasing(self, text: str) -> str:
        question = html.unescape(_block(text, "question") or "").strip()
        standalone = self._standalone.get(question)
        if standalone is None:
            msg = "the demo script has no standalone question for this follow-up"
            raise ConfigurationError(msg)
        return standalone

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return counted_reply(self.reply_for(messages), messages, self._tokens)
