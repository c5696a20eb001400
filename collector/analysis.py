"""The analysis of one stored bundle: the doctor document and the report page, in a process of its own.

``python -m collector.analysis PATH SOURCE MEMORY_BYTES`` reads the bundle at PATH with the offline
pipeline (``agent.offline``, as ``railscope report`` does), judged by the expectations the bundle
records under the ``RAILSCOPE_<FLAG>`` variables, and prints ``{"doctor": …, "html": …}`` or ``{"error": …}`` with SOURCE (the stored name)
in place of PATH. The pages run it under an address-space limit and a timeout, so a bundle built to
exhaust either costs this process, never the collector; it imports no server code.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from agent import __version__
from agent.config import Expectations
from agent.expectations import expectations_from_env, stated_by_env
from collector.limits import summarise_doctor

__all__ = ["analyse_file", "main"]


def analyse_file(path: str, source: str, exp: Expectations) -> dict[str, Any]:
    """Doctor and report of a bundle on disk; what cannot be read is an error document, never raised."""
    from agent.offline import InputError, diagnose_image
    from agent.readers.kernel_table import load_kernel_table
    from agent.report.content import build_report
    from agent.report.html import render_html

    try:
        # the bundle's own expectations, under the collector's RAILSCOPE_* variables (its command line)
        got = diagnose_image(path, exp, load_kernel_table(exp.kernel_table_file), given=stated_by_env())
        judged = got.judged
        rep = build_report(source, got.diagnosis, got.history, got.manifest, manifest_error=got.manifest_error,
                           lossless_prio=(got.expectations or exp).lossless_prio)
        page = render_html(rep, version=__version__, judged_with=judged.words() if judged is not None else None)
    except InputError as exc:
        return {"error": str(exc).replace(path, source)}
    except Exception as exc:  # a damaged bundle must give a page that says so, not a 500
        return {"error": f"could not analyse: {type(exc).__name__}: {exc}".replace(path, source)}
    doctor = got.diagnosis.as_json()
    if judged is not None:
        doctor["expectations"] = judged.as_json()
    # The summary an incident page reads, cut here already: the answer is read under a cap.
    return {"doctor": summarise_doctor(doctor), "html": page}


def main(argv: list[str] | None = None) -> int:
    import resource

    path, source, memory = (argv if argv is not None else sys.argv[1:])[:3]
    resource.setrlimit(resource.RLIMIT_AS, (int(memory), int(memory)))
    sys.stdout.write(json.dumps(analyse_file(path, source, expectations_from_env())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
