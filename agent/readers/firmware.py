"""Firmware running and stored: ``devlink -j dev info <PF handle>`` per rail PF, on the devlink
interval (docs/design.md §3 "firmware", §4 ``FirmwarePendingActivation``).

On mlx5 ``dev info`` reads the flash and the running image through firmware commands, so it goes to
rail PFs only (never the restricted PFs of an HGX baseboard, docs/design.md §3 "Which functions are touched"),
one handle at a time, in the devlink thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent.config import ReadConfig
from agent.host import Host
from agent.model import FirmwareInfo
from agent.naming import NOT_PF_BUSES
from agent.readers.common import BDF_RE, Notes, parse_json
from agent.readers.scope import excluded, touchable_bdfs
from agent.readers.source import Context, Part, Source, part

__all__ = ["SOURCE", "argv", "parse_dev_info", "read_firmware"]


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
            # the reason names the PF: one skipped behind its firmware gate, or refused, is told apart
            # from the rail PFs that answered
            why = res.why()
            notes.missing("firmware", why if handle in why else f"devlink dev info {handle}: {why}")
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


def rail_pf_handles(ctx: Context) -> list[str]:
    """The devlink handles of the rail PFs: ``pci/<bdf>``, or ``<bus>/<dev>`` for a rail whose parent
    is on another bus (netdevsim: ``netdevsim/netdevsim10``, which ``rail_bdfs`` does not hold); VFs never."""
    vfs = {f.bdf for f in ctx.functions if f.is_vf}
    out = [f"pci/{bdf}" for bdf in ctx.rail_bdfs if BDF_RE.match(bdf) and bdf not in vfs]
    rails = set(ctx.rails)
    for lk in ctx.links:
        if lk.ifname in rails and lk.parent_dev and lk.parent_bus and lk.parent_bus != "pci" \
                and lk.parent_bus not in NOT_PF_BUSES:
            out.append(f"{lk.parent_bus}/{lk.parent_dev}")
    return list(dict.fromkeys(out))


def read_firmware_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """``devlink dev info`` of the rail PFs only (a firmware read on mlx5: never other functions)."""
    if ctx.devlink_gone is not None:
        notes.missing("firmware", ctx.devlink_gone)
        return part("firmware", notes, fields={"firmware": ()})
    # devlink dev info asks each PF's firmware (MCQI): --exclude-devices keeps it off the excluded ones.
    handles = rail_pf_handles(ctx)
    if cfg.exclude_devices:
        keep = set(touchable_bdfs([h[4:] for h in handles if h.startswith("pci/")], ctx.links, cfg.exclude_devices))
        allowed = [h for h in handles
                   if (h[4:] in keep if h.startswith("pci/") else not excluded(cfg.exclude_devices, h))]
        for h in handles:
            if h not in allowed:
                notes.missing(f"devlink dev info {h}", "excluded by --exclude-devices")
        handles = allowed
    return part("firmware", notes, fields={"firmware": read_firmware(host, handles, cfg.command_timeout_s, notes)})


# mlx5 answers dev info from the firmware (devlink.c mlx5_devlink_info_get -> fw.c
# mlx5_fw_version_query: MCQI / MCQS register reads): firmware_touching, so the daemon's worker host
# takes the PF's firmware gate for each ``dev info <PF>`` and skips it past the wait, like the statistics
# (https://github.com/torvalds/linux/blob/master/drivers/net/ethernet/mellanox/mlx5/core/fw.c)
SOURCE = Source("firmware", "the rail PFs' running and stored firmware (devlink -j dev info <PF>)",
                (("devlink", "-j", "dev", "info"),), 60.0, 60.0, ("firmware",), read_firmware_part, order=50,
                needs=("devlink_gone", "rail_bdfs", "rails", "links", "functions"), firmware_touching=True,
                lane="devlink")
