"""``railscope report BUNDLE``: the diagnosis of a bundle with its flight recorder, events and
manifest, as text, or as one self-contained HTML page (``--html FILE``) to attach to a ticket.

BUNDLE is a node image directory or a bundle ``.tar.gz`` (with the incident's cluster slice,
``cluster.tar.gz``, beside it: the operators' intent against the node too, as ``doctor --from``), or with
``--collector URL`` a key of a bundle
stored by the collector (``<cluster>/<yyyy-mm-dd>/<incident>/<name>.tar.gz``, as ``railscope bundles
ls`` prints it), downloaded and checked against its sha256 first. Exit status: :data:`EXIT_STATUS` (as
``doctor``'s for the findings; ``--help`` and the README say the same).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from agent.commands.common import (
    EXIT_USAGE,
    add_collector_flags,
    add_expectation_flags,
    env_default,
    fail,
    given_expectations,
    judged_by,
)

__all__ = ["EXIT_STATUS", "register", "run"]

#: What ``railscope report`` exits with (``--help`` prints it; tests/unit/report/test_report_exit.py
#: holds the code, the help and the README to it).
EXIT_STATUS: tuple[tuple[int, str], ...] = (
    (0, "no warning or critical finding"),
    (1, "warnings only, or the --html page could not be written (nothing is left behind)"),
    (2, "a critical finding"),
    (EXIT_USAGE, "no report could be made: bad usage, not a node image, or a stored bundle the collector did "
                 "not give (refused, not found, unreachable, a digest that does not match)"),
)


def register(p: argparse.ArgumentParser) -> None:
    p.epilog = "Exit status: " + "; ".join(f"{n} {words}" for n, words in EXIT_STATUS) + "."
    p.add_argument("bundle", metavar="BUNDLE",
                   help="A node image directory, a bundle .tar.gz, or with --collector a stored bundle's key.")
    p.add_argument("--collector", default=None, metavar="URL",
                   help="Read BUNDLE from this collector (GET /v1/bundles/<key>, operator role). Default: BUNDLE "
                        "is a local path.")
    p.add_argument("--token-file", default=env_default("token-file", None), metavar="FILE",
                   help="With --collector: a file holding an operator token, readable by its owner only (mode 0600 or "
                        "0400). Default: none.")
    add_collector_flags(p)
    p.add_argument("--html", metavar="FILE",
                   help="Write one self-contained HTML page (inline styles and SVG charts, no scripts, no "
                        "network fetches) to FILE ('-' for stdout) instead of the text report.")
    add_expectation_flags(p)


def _fail(msg: str, status: int = EXIT_USAGE) -> int:
    return fail("report", msg, status)


def _write(path: str, text: str) -> None:
    """Write the page whole or not at all: a ticket never gets half a page."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".railscope-report-", suffix=".html", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _download(args: argparse.Namespace, into: str) -> str:
    """The stored bundle ``args.bundle`` in ``into``, its sha256 checked against the collector's ``.sha256``."""
    import asyncio

    from agent.clients.collector import CollectorError
    from agent.commands.common import collector_client
    from agent.offline import InputError

    url, key = args.collector, args.bundle

    async def get() -> str:
        async with collector_client("report", url, args, token_file=args.token_file,
                                    token_flag="--token-file") as client:
            path, _sha = await client.get(key, into)
            return str(path)

    try:
        return asyncio.run(get())
    except CollectorError as exc:
        raise InputError(f"{url}: {key}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    from agent.commands.doctor import not_judged, with_cluster_slice
    from agent.offline import InputError, diagnose_image
    from agent.report.content import build_report

    try:
        exp, table = judged_by(args)
    except ValueError as exc:
        return _fail(str(exc))
    with tempfile.TemporaryDirectory(prefix="railscope-report-") as tmp:
        try:
            path = _download(args, tmp) if args.collector else args.bundle
            got = diagnose_image(path, exp, table, given=given_expectations(args))
        except InputError as exc:
            return _fail(str(exc))
    diagnosis = got.diagnosis
    if not args.collector:
        # the incident's cluster slice beside a local bundle: the operators' intent against this node
        try:
            diagnosis = with_cluster_slice(diagnosis, args.bundle)
        except ValueError as exc:
            return _fail(str(exc))
    judged_with = None
    if got.judged is not None:
        # the bundle's own expectations, under the command line's
        exp = got.judged.expectations
        judged_with = got.judged.words()
    rep = build_report(args.bundle, diagnosis, got.history, got.manifest, manifest_error=got.manifest_error,
                       lossless_prio=exp.lossless_prio)
    if args.html:
        from agent import __version__
        from agent.report.html import render_html

        page = render_html(rep, not_judged=not_judged(exp), version=__version__, judged_with=judged_with)
        if args.html == "-":
            sys.stdout.write(page)
        else:
            try:
                _write(args.html, page)
            except OSError as exc:
                return _fail(f"{args.html}: {exc.strerror or exc}", 1)
            print(f"railscope report: wrote {args.html} ({len(page.encode()) / 1024:.0f} KiB)", file=sys.stderr)
    else:
        from agent.report.report_text import render_report

        render_report(rep, sys.stdout, not_judged=not_judged(exp), judged_with=judged_with)
    return diagnosis.exit_status()
