"""The validated-kernel table: the rows shipped in ``agent/data/kernel_table.json`` plus the rows of
the operator's ``--kernel-table`` file.

Both are the agent's own files, not the node's: they are read from the agent's filesystem once at
start (the CLI, the daemon and the collector call ``load_kernel_table``), never through the host seam
and its ``--host-root``. ``parse_kernel_table`` is pure; ``diagnose`` is handed the rows.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache

from agent.model import KernelRow

__all__ = ["KernelTableError", "load_kernel_table", "parse_kernel_table", "shipped_kernel_table"]

_SHIPPED = "data/kernel_table.json"


class KernelTableError(ValueError):
    """A ``--kernel-table`` file that cannot be used (one line, for the CLI)."""


def parse_kernel_table(text: str, where: str) -> tuple[KernelRow, ...]:
    """Rows of a kernel table: ``{"rows": [{driver, flavour, kernel_line, max_abi, source}]}`` or a bare list.

    Sample: ``{"rows": [{"driver": "25.10", "flavour": "generic", "kernel_line": "6.8.0",
    "max_abi": "6.8.0-100", "source": "DOCA 25.10 release notes"}]}``; a row without ``source`` gets
    ``where``.
    """
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise KernelTableError(f"{where}: not JSON ({exc})") from None
    rows = doc.get("rows") if isinstance(doc, dict) else doc
    if not isinstance(rows, list):
        raise KernelTableError(f'{where}: expected {{"rows": [...]}} or a list of rows')
    out = []
    for n, row in enumerate(rows):
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) and row.get(k)
                                                for k in ("driver", "flavour", "kernel_line", "max_abi")):
            raise KernelTableError(f"{where}: row {n} needs the strings driver, flavour, kernel_line, max_abi")
        out.append(KernelRow(row["driver"], row["flavour"], row["kernel_line"], row["max_abi"],
                             str(row.get("source") or where)))
    return tuple(out)


@lru_cache(maxsize=1)
def shipped_kernel_table() -> tuple[KernelRow, ...]:
    """The rows shipped with the package (read once: they never change while the process runs)."""
    # Beside the package's modules (pyproject package-data; the image installs a wheel, never a zip):
    # a plain path, because importlib.resources costs every doctor process about 5 ms of imports
    # (zipfile, tempfile, pathlib) for one small file.
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), *_SHIPPED.split("/"))
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    return parse_kernel_table(text, f"agent/{_SHIPPED}")


def load_kernel_table(extra_file: str | None = None) -> tuple[KernelRow, ...]:
    """The shipped table, plus the rows of ``extra_file`` (``--kernel-table``)."""
    rows = shipped_kernel_table()
    if extra_file:
        try:
            with open(extra_file, encoding="utf-8") as fh:
                text = fh.read(1 << 20)
        except OSError as exc:
            raise KernelTableError(f"--kernel-table {extra_file}: {exc.strerror or exc}") from None
        rows = rows + parse_kernel_table(text, extra_file)
    return rows
