"""``railscope``: a thin layer that parses arguments and calls into the parts.

Each subcommand lives in ``agent/commands/<name>.py`` with ``register(subparsers)`` and
``run(args) -> int``; a module is imported only when its subcommand runs, so ``railscope doctor``
never pays for aiohttp or prometheus_client. ``railscope completion`` and ``docs/cli.md``
(``scripts/gen_cli_doc.py``) are made from the parser that ``build_parser()`` returns.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Iterator

#: subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": ("agent.commands.doctor", "Diagnose this node, or a node image / bundle (--from)."),
    "metrics": ("agent.commands.metrics", "Print the Prometheus exposition the agent would serve for a node image."),
    "agent": ("agent.commands.agent", "Run the node agent: /metrics, detectors, flight recorder."),
    "capture": ("agent.commands.capture", "Capture this node into a bundle (tar.gz + .sha256) that replays with doctor --from."),
    "record": ("agent.commands.record", "Record this node (or a running agent) into a node image directory."),
    "collector": ("agent.commands.collector", "Run the collector: receive, verify and store bundles."),
    "bundles": ("agent.commands.bundles", "List, fetch and verify bundles stored by the collector."),
    "report": ("agent.commands.report", "Report on a bundle: diagnosis, flight recorder, events, manifest (--html FILE)."),
    "diff": ("agent.commands.diff", "Compare two captures of a node: regressions, changes, counter rates."),
    "events": ("agent.commands.events", "Print the running agent's event log, read over its data socket."),
    "preflight": ("agent.commands.preflight", "The upgrade gate: is this node ready for NCCL again? Verdict, exit 0/1."),
    "snapshot": ("agent.commands.snapshot", "Snapshot the operators' cluster objects (--cluster -o FILE) for diff."),
    "rollout": ("agent.commands.rollout", "Did the operators' rollout converge on every node? Read-only, exit 0/1/2."),
    "completion": ("agent.commands.completion", "Print a shell completion script: railscope completion bash|zsh."),
}


def version() -> str:
    """The installed package's version (``importlib.metadata``), else the source's (``agent.__version__``):
    a checkout run as ``python -m agent.cli`` without ``pip install`` still says one."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("railscope")
    except PackageNotFoundError:
        from agent import __version__

        return __version__


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # bad usage exits 3 (doctor's contract), not argparse's 2
        self.print_usage(sys.stderr)
        self.exit(3, f"{self.prog}: error: {message}\n")


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser under ``parser`` with its command path (``()``, ``("bundles",)``, ``("bundles", "ls")``)."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, (*path, name))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="railscope", description="railscope: network diagnosis for Spectrum-X / ConnectX GPU nodes.")
    parser.add_argument("--version", action="version", version=f"railscope {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (modname, helptext) in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=helptext, add_help=False)
            continue
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name and modname.startswith(exc.name):
                continue  # subcommand not built in this version
            raise
        p = sub.add_parser(name, help=helptext, description=helptext)
        mod.register(p)
        p.set_defaults(_module=mod)
        for _path, q in walk(p):
            # `railscope doctor --version` as `railscope --version`; and an unknown flag is told with the
            # usage of the (sub)command it was given to, not the top level's.
            if not any("--version" in a.option_strings for a in q._actions):
                q.add_argument("--version", action="version", version=f"railscope {version()}",
                               help="Print railscope's version and exit.")
            q.set_defaults(_parser=q)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(only=first if first in COMMANDS else None)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if not getattr(args, "_module", None):
        parser.print_help(sys.stderr)
        return 3
    try:
        return int(args._module.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
