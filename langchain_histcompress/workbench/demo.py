"""The ``histcompress demo``: a LangGraph chat app that keeps a 64-turn conversation small.

The app is an ordinary ``StateGraph`` with a SQLite checkpointer::

    START -> extract_facts -> compress -> [rephrase, follow-ups only] -> model -> END

The bundled conversation (``demo_data/conversation.json``) is replayed offline by
`ScriptedChatModel`, or answered by a real model with ``--model provider:name``. Every call is
metered and compared with sending the full history; at the end the thread is reopened from
the SQLite file for one more turn. The app is described in docs/design/workbench.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TextIO

from langchain_core.language_models import BaseChatModel

from langchain_histcompress.core.errors import ConfigurationError, HistCompressError
from langchain_histcompress.edge.models import chat_model_from_spec
from langchain_histcompress.workbench.demo_graph import DemoState, build_demo_graph
from langchain_histcompress.workbench.demo_model import ScriptedChatModel
from langchain_histcompress.workbench.demo_replay import UsageMeter, replay_conversation
from langchain_histcompress.workbench.demo_report import (
    CallKind,
    DemoReport,
    FoldSettings,
    ResumeRecord,
    TurnRecord,
    _Printer,
    _problems,
    _report,
)
from langchain_histcompress.workbench.demo_script import (
    DemoScript,
    ScriptedSession,
    ScriptedTurn,
    check_script,
    load_script,
)

__all__ = [
    "CallKind",
    "DemoReport",
    "DemoScript",
    "DemoState",
    "FoldSettings",
    "ResumeRecord",
    "ScriptedChatModel",
    "ScriptedSession",
    "ScriptedTurn",
    "TurnRecord",
    "UsageMeter",
    "build_demo_graph",
    "check_script",
    "load_script",
    "replay_conversation",
    "run_demo",
]

_PROG = "histcompress demo"


def _parser(total: int) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description=(
            "Replay a long multi-session chat through a LangGraph app with round compression, "
            "fact memory and follow-up rephrasing, and report the tokens saved."
        ),
    )
    parser.add_argument(
        "--model",
        metavar="PROVIDER:NAME",
        help="real chat model for every role, e.g. openai:gpt-4o-mini (needs its API key; "
        "default: offline replay of the scripted answers)",
    )
    parser.add_argument(
        "--turns", type=int, metavar="N", help=f"replay the first N turns (2-{total}; default all)"
    )
    parser.add_argument("--db", metavar="PATH", help="SQLite checkpoint file (default: temporary)")
    parser.add_argument("--quiet", action="store_true", help="print only the final figures")
    return parser


def _make_model(spec: str) -> BaseChatModel:
    return chat_model_from_spec(spec, option="--model")


def _fail(errors: TextIO, message: object, code: int = 2) -> int:
    errors.write(f"{_PROG}: error: {' '.join(str(message).split())}\n")
    return code


def run_demo(
    argv: list[str] | None = None,
    *,
    writer: TextIO | None = None,
    errors: TextIO | None = None,
) -> int:
    """Run the demo (what ``histcompress demo`` and ``make demo`` call) and return its exit code.

    Options: ``--model provider:name`` (a real model does everything; needs its key),
    ``--turns N``, ``--db PATH``, ``--quiet``. Exit codes: 0 success; 2 bad option, model
    that cannot be created (e.g. no API key) or unusable ``--db``; 1 the run failed (a model
    error, or an offline replay that did not go as scripted).

    Args:
        argv: Options, without the program name (default: ``sys.argv[1:]``).
        writer: Where the report goes (default: ``sys.stdout``).
        errors: Where errors go (default: ``sys.stderr``).

    Example:
        >>> import io
        >>> run_demo(["--turns", "1"], errors=io.StringIO())
        2
        >>> import io
        >>> out = io.StringIO()
        >>> run_demo(["--turns", "8", "--quiet"], writer=out)
        0
        >>> print(out.getvalue())  # doctest: +ELLIPSIS
        resumed from checkpoint: no summary, 8 facts, 0 extra summarizer calls
        savings: ...% (... vs ... billed tokens, 8 turns)
        <BLANKLINE>
    """
    out = writer or sys.stdout
    err = errors or sys.stderr
    model: BaseChatModel | None = None
    try:
        script = load_script()
    except ConfigurationError as exc:
        return _fail(err, exc, 1)
    parser = _parser(len(script.turns))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        model = _make_model(args.model) if args.model else None
        printer = _Printer(out, quiet=args.quiet)
        report = replay_conversation(
            script,
            model=model,
            turns=args.turns,
            db_path=args.db,
            writer=out,
            quiet=args.quiet,
        )
    except ConfigurationError as exc:
        return _fail(err, exc)
    except HistCompressError as exc:
        return _fail(err, f"the demo run failed: {exc}", 1)
    except Exception as exc:
        if model is None:
            raise
        return _fail(err, f"the model call failed ({type(exc).__name__}: {exc})", 1)
    _report(printer, report, script)
    if report.offline:
        problems = _problems(report)
        if problems:
            return _fail(
                err, "the offline replay did not go as scripted: " + "; ".join(problems), 1
            )
    return 0
