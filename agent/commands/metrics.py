"""``railscope metrics --from PATH``: the Prometheus exposition the agent would serve for a node image.

The golden-file tests and any comparison with another exporter use it (docs/design.md §4). The sample is
served as of the capture time, so ``railscope_sample_age_seconds`` is 0 and the output is the same
on every run.
"""

from __future__ import annotations

import argparse
import sys

from agent.commands.common import add_expectation_flags, add_scope_flag, env_default, fail, judged_by
from agent.settings import regex

__all__ = ["register", "run"]


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="source", required=True, metavar="PATH",
                   help="A node image: a directory, or a bundle .tar.gz with or without its top directory.")
    p.add_argument("--representor-include", type=regex, default=env_default("representor-include", None),
                   metavar="REGEX",
                   help="Also export per-representor series for representor netdevs whose name matches this "
                        "regular expression. Default: none (representors only as per-PF counts).")
    add_expectation_flags(p)
    # the readers read the image as the agent reads the node: the agent's --exclude-devices gives its exposition
    add_scope_flag(p)


def run(args: argparse.Namespace) -> int:
    from agent.commands.common import given_expectations
    from agent.metrics.exposition import render
    from agent.metrics.image import state_from_image
    from agent.offline import InputError, open_input

    try:
        exp, table = judged_by(args)
    except ValueError as exc:
        return fail("metrics", str(exc))
    try:
        with open_input(args.source) as host:
            # judged as the agent that recorded it judged the node, unless a flag says otherwise
            state = state_from_image(host, exp, table, given=given_expectations(args),
                                     exclude_devices=args.exclude_devices)
    except InputError as exc:
        return fail("metrics", str(exc))
    taken = state.sample_time or 0.0
    sys.stdout.buffer.write(render(state, clock=lambda: taken, representor_include=args.representor_include))
    sys.stdout.flush()
    return 0
