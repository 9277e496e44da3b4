"""The demo's figures (per turn and for the run) and the report printed from them.

Example:
    >>> report = DemoReport(offline=True, model="m", turns=(), summary=None, facts={},
    ...                     resume=None, db_path="demo.sqlite")
    >>> report.savings, report.billed_tokens
    (0.0, 0)
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TextIO

from langchain_histcompress.core.facts import Fact
from langchain_histcompress.core.running_summary import RunningSummary
from langchain_histcompress.workbench.demo_script import COUNTER_MODEL, DemoScript, ScriptedSession

__all__ = ["CallKind", "DemoReport", "FoldSettings", "PricedRun", "ResumeRecord", "TurnRecord"]


CallKind = str
"""``"answer"``, ``"summarize"``, ``"extract"`` or ``"rephrase"``."""
_KINDS: tuple[str, ...] = ("answer", "summarize", "extract", "rephrase")
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True)
class FoldSettings:
    """The compressor's settings in force, as its reasons name them.

    Example:
        >>> settings = FoldSettings(keep_rounds=3, window=128, budget_tokens=108,
        ...                         budget_source="default", pricing="openai-50, the default")
        >>> reason = ("no fold: 2 rounds pending, 40 of 108 tokens (default); "
        ...           "cost (openai-50, the default): no fold pays yet")
        >>> settings.short(reason)
        'no fold: 2 rounds pending, 40 of 108 tokens; cost: no fold pays yet'
        >>> settings.why_not(reason)
        'cost: no fold pays yet'
    """

    keep_rounds: int
    """Newest rounds a fold keeps verbatim."""
    window: int
    """The answering model's input window in tokens."""
    budget_tokens: int
    """Tokens the view may hold (a share of the window)."""
    budget_source: str
    """Where the window comes from (the model's profile, or the default)."""
    pricing: str
    """The pricing folds are priced under, and where it comes from (``""``: not by cost)."""

    def short(self, reason: str) -> str:
        """``reason`` without the budget's source and the pricing (both said once elsewhere)."""
        reason = reason.replace(f" tokens ({self.budget_source})", " tokens")
        if self.pricing:
            reason = reason.replace(f"cost ({self.pricing})", "cost")
        return reason

    def why_not(self, reason: str) -> str:
        """The cause a no-fold reason gives (the trigger's part, after the view's size)."""
        short = self.short(reason)
        _, found, why = short.partition(" tokens; ")
        return why if found else short


@dataclass(frozen=True)
class PricedRun:
    """Every call of the run and the full-history baseline, priced as the provider bills them.

    A call's cached part is its longest prefix shared with an earlier call while the cache is
    warm (see `pricing.PromptCache`); the conversation's own times decide when it goes cold.

    Example:
        >>> priced = PricedRun(pricing="openai-50", description="", cache_lifetime=300.0,
        ...                    by_kind={"answer": 0.5, "summarize": 0.1}, full_cost=0.8,
        ...                    cached_share=0.2, full_cached_share=0.5)
        >>> round(priced.cost, 2), round(priced.savings, 2)
        (0.6, 0.25)
    """

    pricing: str
    """Name of the pricing model (the one the compressor folds under)."""
    description: str
    """What the pricing model is (which models, what the cache takes off)."""
    cache_lifetime: float
    """Seconds an unused cache entry lives."""
    by_kind: Mapping[str, float]
    """Price of the run's calls by kind (USD)."""
    full_cost: float
    """Price of answering with the full history every turn (USD)."""
    cached_share: float
    """Share of the run's prompt tokens read from the cache."""
    full_cached_share: float
    """Share of the full-history prompts read from the cache."""

    @property
    def cost(self) -> float:
        """Price of every call of the run, the package's own included (USD)."""
        return math.fsum(self.by_kind.values())

    @property
    def savings(self) -> float:
        """``1 - cost / full_cost`` (negative: the run cost more)."""
        return 1 - self.cost / self.full_cost if self.full_cost else 0.0


@dataclass(frozen=True)
class TurnRecord:
    """What one turn cost and changed."""

    number: int
    """Turn number."""
    session: int
    """Session number."""
    sent_tokens: int
    """Prompt tokens of the answering call."""
    full_tokens: int
    """Prompt tokens the full history would have cost (system + every message)."""
    reply_tokens: int
    """Completion tokens of the answer (billed in both cases)."""
    billed: Mapping[str, tuple[int, int]]
    """Calls and tokens (prompt + completion) of this turn, by kind."""
    summary_version: int
    """Running summary version after the turn (0: none yet)."""
    fact_count: int
    """Facts in state after the turn."""
    facts_added: int
    """Facts added by this turn's extraction."""
    facts_updated: int
    """Facts updated (content changed or merged) by this turn's extraction."""
    facts_deleted: int
    """Facts deleted by this turn's extraction."""
    extraction_status: str
    """Status of this turn's extraction (``ok`` / ``empty`` / ``failed`` / ``skipped``)."""
    standalone_question: str | None
    """The standalone question used this turn (follow-ups only)."""
    rephrase_fallback: str | None
    """Why a follow-up kept its original wording (``None`` when rephrased or not a follow-up)."""
    resumed: bool = False
    """The turn ran on the app reopened from the checkpoint."""
    fold_reason: str = ""
    """Why the compressor folded this turn or did not (`CompressionPlan.reason`)."""
    planned_folds: int = 0
    """Summarizer calls the compressor planned for this turn."""
    fold_failed: str | None = None
    """Why a planned fold failed (the turn went on with the stored summary), else ``None``."""

    @property
    def folded(self) -> bool:
        """Whether the compressor folded rounds into the summary this turn."""
        return bool(self.billed.get("summarize", (0, 0))[0])


@dataclass(frozen=True)
class ResumeRecord:
    """The reopened thread: what was restored and what the next turn cost."""

    thread_id: str
    """The LangGraph thread id."""
    messages: int
    """Messages restored from the checkpoint."""
    summary_version: int
    """Restored summary version (0: none)."""
    rounds_covered: int
    """Rounds the restored summary covers."""
    facts: int
    """Facts restored."""
    matches_before: bool
    """The restored summary and facts equal those in memory before the app was closed."""
    expected_summarizer_calls: int
    """Summarizer calls the new turn needs by itself (planned on the restored summary)."""
    summarizer_calls: int
    """Summarizer calls the new turn made."""

    @property
    def extra_summarizer_calls(self) -> int:
        """Calls beyond what the new turn needed (0 when nothing was summarized again)."""
        return self.summarizer_calls - self.expected_summarizer_calls


@dataclass(frozen=True)
class DemoReport:
    """Everything the demo measured."""

    offline: bool
    """Scripted replay (``True``) or a real model."""
    model: str
    """The model's name."""
    turns: tuple[TurnRecord, ...]
    """One record per turn, in order."""
    summary: RunningSummary | None
    """The final running summary."""
    facts: dict[str, Fact]
    """The final facts by id."""
    resume: ResumeRecord | None
    """The reopened thread (``None`` when only one turn ran)."""
    db_path: str
    """The SQLite file of the checkpointer."""
    folding: FoldSettings | None = None
    """The compressor's settings in force (``None``: not recorded)."""
    priced: PricedRun | None = None
    """The calls priced with the provider's prompt cache (``None``: not priced)."""

    def billed_by_kind(self) -> dict[str, tuple[int, int]]:
        """Calls and billed tokens per kind over the whole run."""
        out: dict[str, tuple[int, int]] = {}
        for turn in self.turns:
            for kind, (calls, tokens) in turn.billed.items():
                before = out.get(kind, (0, 0))
                out[kind] = (before[0] + calls, before[1] + tokens)
        return out

    @property
    def billed_tokens(self) -> int:
        """Prompt + completion tokens of every model call, the package's own included."""
        return sum(tokens for _, tokens in self.billed_by_kind().values())

    @property
    def full_history_tokens(self) -> int:
        """What answering with the full history every turn would have billed."""
        return sum(t.full_tokens + t.reply_tokens for t in self.turns)

    @property
    def savings(self) -> float:
        """``1 - billed / full history``."""
        full = self.full_history_tokens
        return 1 - self.billed_tokens / full if full else 0.0

    @property
    def internal_share(self) -> float:
        """Share of the billed tokens spent on the package's own calls (not answering)."""
        billed = self.billed_tokens
        answer = self.billed_by_kind().get("answer", (0, 0))[1]
        return (billed - answer) / billed if billed else 0.0

    @property
    def updates_applied(self) -> int:
        """Fact updates applied over the run."""
        return sum(t.facts_updated for t in self.turns)


def _known_codec(name: str) -> bool:
    try:
        "".encode(name)
    except LookupError:
        return False
    return True


class _Printer:
    def __init__(self, writer: TextIO, *, quiet: bool) -> None:
        self.writer = writer
        self.quiet = quiet
        encoding = getattr(writer, "encoding", None) or "utf-8"
        try:
            "█░─·→↳…€–".encode(encoding)
            self.encoding: str | None = None
        except (UnicodeEncodeError, LookupError):
            self.encoding = encoding if _known_codec(encoding) else "ascii"
        self.fancy = self.encoding is None
        self.dot = " · " if self.fancy else " | "

    def line(self, text: str = "", *, always: bool = False) -> None:
        if always or not self.quiet:
            if self.encoding is not None:
                text = text.encode(self.encoding, "replace").decode(self.encoding)
            print(text, file=self.writer)

    def wrapped(self, text: str, width: int = 98) -> None:
        """A long line, continued on indented lines."""
        for line in textwrap.wrap(text, width=width, subsequent_indent="  ") or [""]:
            self.line(line)

    def rule(self, text: str) -> None:
        dash = "─" if self.fancy else "-"
        self.line(f"{dash * 2} {text} ".ljust(98, dash))

    def session(self, session: ScriptedSession) -> None:
        dot = self.dot
        self.rule(f"session {session.number}{dot}{_when(session.start)}{dot}{session.title}")

    def bar(self, share: float, width: int = 12) -> str:
        filled = max(0, min(width, round(share * width)))
        full, empty = ("█", "░") if self.fancy else ("#", ".")
        return full * filled + empty * (width - filled)


def _when(moment: datetime) -> str:
    return (
        f"{_DAYS[moment.weekday()]} {moment.day} {_MONTHS[moment.month - 1]} "
        f"{moment.year} {moment:%H:%M}"
    )


def _turn_line(printer: _Printer, record: TurnRecord, settings: FoldSettings | None = None) -> None:
    share = record.sent_tokens / record.full_tokens if record.full_tokens else 1.0
    version = f"v{record.summary_version}" if record.summary_version else "--"
    events: list[str] = []
    if record.folded:
        events.append("summarized")
    if record.fold_failed is not None:
        events.append(f"fold FAILED ({record.fold_failed})")
    changes = [
        f"{sign}{count}"
        for sign, count in (
            ("+", record.facts_added),
            ("~", record.facts_updated),
            ("-", record.facts_deleted),
        )
        if count
    ]
    if changes:
        events.append("facts " + " ".join(changes))
    if record.extraction_status == "failed":
        events.append("extraction FAILED")
    if record.standalone_question is not None:
        events.append("rephrased")
    elif record.rephrase_fallback is not None:
        events.append(f"rephrase fell back ({record.rephrase_fallback})")
    printer.line(
        f"turn {record.number:2d}  {record.sent_tokens:5,} / {record.full_tokens:5,} tok  "
        f"{printer.bar(share)} {share:4.0%}  summary {version:>3}  facts {record.fact_count:2d}"
        + (f"  {', '.join(events)}" if events else "")
    )
    if record.planned_folds and record.fold_reason:
        reason = settings.short(record.fold_reason) if settings is not None else record.fold_reason
        arrow = "↳" if printer.fancy else "->"
        _wrap(printer, f"{arrow} {reason}", indent=" " * 9, width=98)


def _wrap(printer: _Printer, text: str, indent: str = "  ", width: int = 98) -> None:
    for paragraph in text.split("\n"):
        if not paragraph.strip():
            printer.line()
            continue
        lead = len(paragraph) - len(paragraph.lstrip(" -"))
        for line in textwrap.wrap(
            paragraph,
            width=width,
            initial_indent=indent,
            subsequent_indent=indent + " " * lead,
        ):
            printer.line(line)


def _print_summary(printer: _Printer, report: DemoReport) -> None:
    summary = report.summary
    printer.line()
    if summary is None:
        printer.line("running summary: none yet (too few rounds)")
        return
    printer.line(
        f"running summary v{summary.version} (covers {summary.rounds_covered} rounds, "
        f"{len(summary.covered_ids)} messages):"
    )
    _wrap(printer, summary.text)


def _print_facts(printer: _Printer, report: DemoReport) -> None:
    facts = list(report.facts.values())
    deleted = sum(t.facts_deleted for t in report.turns)
    printer.line()
    printer.line(
        f"facts ({len(facts)}; {report.updates_applied} updates and {deleted} deletions "
        "applied along the way):"
    )
    arrow = "→" if printer.fancy else "->"
    for fact in facts:
        shown = fact.source_ids[-3:]
        sources = ("… " if printer.fancy else "... ") if len(fact.source_ids) > 3 else ""
        sources += " ".join(shown)
        lines = textwrap.wrap(fact.content, width=62) or [""]
        printer.line(f"  {fact.type[:16]:<16}  {lines[0]:<62}  {sources}")
        for extra in lines[1:]:
            printer.line(f"  {'':<16}  {extra}")
        if fact.supersedes:
            history = f" {arrow} ".join(fact.supersedes)
            for index, extra in enumerate(textwrap.wrap(f"was: {history}", width=76)):
                printer.line(f"  {'':<16}  {'  ' if index else ''}{extra}")


def _print_follow_ups(printer: _Printer, report: DemoReport, script: DemoScript) -> None:
    follow = [
        (t, script.turns[t.number - 1])
        for t in report.turns
        if script.turns[t.number - 1].standalone_question is not None
    ]
    if not follow:
        return
    arrow = "→" if printer.fancy else "->"
    printer.line()
    printer.line(f"follow-ups rephrased before choosing the facts to show ({len(follow)}):")
    for record, turn in follow:
        result = record.standalone_question or f"(kept as is: {record.rephrase_fallback})"
        printer.line(f"  turn {record.number:2d}  {turn.user_text}")
        _wrap(printer, f"{arrow} {result}", indent="           ", width=98)


def _ranges(numbers: list[int]) -> str:
    """``[1, 2, 3, 5, 7, 8]`` as ``"1-3, 5, 7-8"``."""
    spans: list[list[int]] = []
    for number in numbers:
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


def _print_folds(printer: _Printer, report: DemoReport) -> None:
    settings = report.folding
    turns = report.turns
    if settings is None or not turns:
        return
    folded = [t.number for t in turns if t.folded]
    failed = [t.number for t in turns if t.fold_failed is not None]
    printer.line()
    count = f"{len(folded)} fold{'' if len(folded) == 1 else 's'} in {len(turns)} turns"
    rule = f"cost under {settings.pricing}" if settings.pricing else "the trigger"
    printer.wrapped(
        f"folding ({rule}; budget {settings.budget_tokens:,} tokens): {count}"
        + (f" (turn{'' if len(folded) == 1 else 's'} {_ranges(folded)})" if folded else "")
        + (f", {len(failed)} failed (turns {_ranges(failed)})" if failed else "")
    )
    groups: dict[str, list[int]] = {}
    for turn in turns:
        if not turn.fold_reason:
            continue
        if turn.planned_folds:
            _wrap(printer, f"turn {turn.number}: {settings.short(turn.fold_reason)}", width=98)
        else:
            groups.setdefault(settings.why_not(turn.fold_reason), []).append(turn.number)
    for why, numbers in groups.items():
        plural = "s" if len(numbers) > 1 else ""
        _wrap(printer, f"no fold, turn{plural} {_ranges(numbers)}: {why}", width=98)


def _change(cost: float, baseline: float) -> str:
    """``cost`` against ``baseline``, in words: ``"12.3% less"`` or ``"4.0% more"``."""
    if not baseline:
        return "no baseline"
    share = 1 - cost / baseline
    return f"{share:.1%} less" if share >= 0 else f"{-share:.1%} more"


def _print_savings(printer: _Printer, report: DemoReport) -> None:
    priced = report.priced
    printer.line()
    title = f"billed tokens (prompt + completion of every call, tiktoken {COUNTER_MODEL})"
    if priced is not None:
        title += (
            f" and their price as {priced.pricing} bills them ({priced.description}; a cache "
            f"unused for {priced.cache_lifetime / 60:g} minutes is gone)"
        )
    printer.wrapped(title + ":")

    def price(kind: str | None) -> str:
        if priced is None:
            return ""
        if kind is None:
            cost = priced.full_cost
        else:
            cost = priced.cost if kind == "total" else priced.by_kind.get(kind, 0.0)
        return f"  {'$' + format(cost, '.4f'):>9}"

    by_kind = report.billed_by_kind()
    for kind in (*_KINDS, *sorted(set(by_kind) - set(_KINDS))):
        if kind in by_kind:
            calls, tokens = by_kind[kind]
            printer.line(f"  {kind:<11} {calls:4d} calls  {tokens:>10,}{price(kind)}")
    total_calls = sum(calls for calls, _ in by_kind.values())
    printer.line(
        f"  {'total':<11} {total_calls:4d} calls  {report.billed_tokens:>10,}{price('total')}"
    )
    printer.line(
        f"  {'full history':<11} {len(report.turns):4d} calls  {report.full_history_tokens:>10,}"
        f"{price(None)}   (every message sent on every turn)"
    )
    last = report.turns[-1]
    if last.full_tokens:
        printer.line(
            f"last turn: {last.sent_tokens:,} prompt tokens sent instead of "
            f"{last.full_tokens:,} ({1 - last.sent_tokens / last.full_tokens:.0%} smaller)"
        )
    printer.line(
        f"summarize + extract + rephrase: {report.internal_share:.0%} of the billed tokens"
    )
    if priced is not None:
        compressing = priced.by_kind.get("answer", 0.0) + priced.by_kind.get("summarize", 0.0)
        printer.wrapped(
            f"price: ${priced.cost:.4f} instead of ${priced.full_cost:.4f}, "
            f"{_change(priced.cost, priced.full_cost)} (input read from the cache: "
            f"{priced.cached_share:.0%} instead of {priced.full_cached_share:.0%}); answering and "
            f"summarizing alone: ${compressing:.4f}, {_change(compressing, priced.full_cost)}"
        )
    printer.line(
        f"savings: {report.savings:.1%} ({report.billed_tokens:,} vs "
        f"{report.full_history_tokens:,} billed tokens, {len(report.turns)} turns)",
        always=True,
    )


def _print_resume(printer: _Printer, report: DemoReport) -> None:
    resume = report.resume
    if resume is None:
        return
    summary = f"summary v{resume.summary_version}" if resume.summary_version else "no summary"
    if not resume.matches_before:
        printer.line(
            "warning: the restored state differs from the state before closing", always=True
        )
    printer.line(
        f"resumed from checkpoint: {summary}, {resume.facts} facts, "
        f"{resume.extra_summarizer_calls} extra summarizer calls",
        always=True,
    )


def _report(printer: _Printer, report: DemoReport, script: DemoScript) -> None:
    _print_resume(printer, report)
    _print_folds(printer, report)
    _print_summary(printer, report)
    _print_facts(printer, report)
    _print_follow_ups(printer, report, script)
    _print_savings(printer, report)


def _problems(report: DemoReport) -> list[str]:
    """Integrity problems of an offline run (the script should replay cleanly)."""
    problems = [
        f"turn {t.number}: fact extraction failed"
        for t in report.turns
        if t.extraction_status == "failed"
    ]
    problems += [
        f"turn {t.number}: the planned fold failed ({t.fold_failed})"
        for t in report.turns
        if t.fold_failed is not None
    ]
    problems += [
        f"turn {t.number}: {t.planned_folds} summarizer calls planned, "
        f"{t.billed.get('summarize', (0, 0))[0]} made"
        for t in report.turns
        if t.fold_failed is None and t.planned_folds != t.billed.get("summarize", (0, 0))[0]
    ]
    problems += [
        f"turn {t.number}: rephrasing fell back ({t.rephrase_fallback})"
        for t in report.turns
        if t.rephrase_fallback is not None
    ]
    if report.resume is not None and (
        report.resume.extra_summarizer_calls or not report.resume.matches_before
    ):
        problems.append("the reopened thread did not continue from the stored state")
    return problems
