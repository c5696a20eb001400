"""Firmware running and stored: ``devlink -j dev info <PF handle>`` per rail PF, on the devlink
interval (DESIGN §3 "firmware", §4 ``FirmwarePendingActivation``).

On mlx5 ``dev info`` reads the flash and the running image through firmware commands, so it goes to
rail PFs only (never the restricted PFs of an HGX baseboard, DESIGN §3 "Which functions are touched"),
one handle at a time, in the devlink thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent.host import Host
from agent.model import FirmwareInfo
from agent.readers.common import Notes, parse_json

__all__ = ["argv", "parse_dev_info", "read_firmware"]


def argv(handle: str) -> tuple[str, ...]:
    return ("devlink", "-j", "dev", "info", handle)


def _pairs(doc: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(doc, dict):
        return ()
    return tuple((str(k), str(v).strip()) for k, v in doc.items()
                 if isinstance(k, str) and isinstance(v, (str, int)) and not isinstance(v, bool) and str(v).strip())


def parse_dev_info(doc: Any) -> tuple[FirmwareInfo, ...]:
    """``devlink -j dev info`` -> one record per handle.

    Sample (ConnectX-7, DOCA 25.10; a flashed image waits for the next reset)::

        {"info":{"pci/0000:0c:00.0":{"driver":"mlx5_core","serial_number":"MT2330X01234",
          "versions":{"fixed":{"fw.psid":"MT_0000000838"},
                      "running":{"fw.version":"28.42.1000","fw":"28.42.1000"},
                      "stored":{"fw.version":"28.43.1014","fw":"28.43.1014"}}}}}

    mlx5 since upstream 10dc35f6a443 answers a query that failed with all-ones version words instead of
    an error: after a failed flash ``"stored":{"fw.version":"255.255.65535","fw":"255.255.65535"}``
    beside a real running version (the commit's own example, tests/fixtures/public/mlx5/). It is kept
    as printed: ``FirmwareInfo.unreadable`` names it, and it is never ``pending``.

    netdevsim (Linux 6.1) prints ``{"info":{"netdevsim/netdevsim10":{"driver":"netdevsim","versions":
    {"running":{"fw.mgmt":"10.20.30"},"stored":{"fw.mgmt":"10.20.30"}}}}}``. Values that are not
    strings or numbers are dropped; a handle without versions keeps empty sets (not judged).
    """
    info = doc.get("info") if isinstance(doc, dict) else None
    if not isinstance(info, dict):
        raise ValueError('expected {"info": {<handle>: {...}}}')
    out = []
    for handle, body in info.items():
        if not isinstance(handle, str) or handle.count("/") != 1 or not isinstance(body, dict):
            continue
        versions = body.get("versions") if isinstance(body.get("versions"), dict) else {}
        fixed = dict(_pairs(versions.get("fixed")))
        driver = body.get("driver")
        out.append(FirmwareInfo(handle=handle, driver=driver if isinstance(driver, str) and driver else None,
                                running=_pairs(versions.get("running")), stored=_pairs(versions.get("stored")),
                                psid=fixed.get("fw.psid") or fixed.get("board.id")))
    return tuple(out)


def read_firmware(host: Host, handles: Iterable[str], timeout_s: float = 10.0,
                  notes: Notes | None = None) -> tuple[FirmwareInfo, ...]:
    """``devlink dev info`` of each handle, one at a time; a handle that answers nothing is noted."""
    notes = notes if notes is not None else Notes()
    out: list[FirmwareInfo] = []
    for handle in handles:
        cmd = argv(handle)
        res = host.run(list(cmd), timeout_s=timeout_s)
        if res.timed_out:
            notes.timed_out(handle)
        if not res.ok:
            notes.command("firmware", res)
            continue
        doc, err = parse_json(res.text, " ".join(cmd), res.truncated)
        if err:
            notes.missing("firmware", err)
            continue
        try:
            out.extend(fi for fi in parse_dev_info(doc) if fi.handle == handle)
        except ValueError as exc:
            notes.missing("firmware", f"{' '.join(cmd)}: {exc}")
    return tuple(out)
