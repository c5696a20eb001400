"""What the degradation findings add to the rail table of ``railscope doctor``: the PCIe link of a rail
trained below what both ends support (``Gen5 x8``) and the worst pre-FEC corrected-bit ratio, from the
findings' evidence. A table with no such finding keeps its columns."""

from __future__ import annotations

from agent.findings import Diagnosis

__all__ = ["rail_notes"]

_GEN = {2.5: "Gen1", 5.0: "Gen2", 8.0: "Gen3", 16.0: "Gen4", 32.0: "Gen5", 64.0: "Gen6"}


def rail_notes(diag: Diagnosis) -> dict[str, str]:
    """Rail netdev -> ``PCIe Gen5 x8 (of x16)``, ``BER 5.0e-04``, or both; only rails that have one."""
    notes: dict[str, list[str]] = {}
    for f in diag.findings:
        ev = f.evidence
        netdev = ev.get("netdev")
        if not isinstance(netdev, str):
            continue
        if f.code == "PcieLinkDegraded" and ev.get("link_gone"):
            notes.setdefault(netdev, []).append("PCIe link gone")
        elif f.code == "PcieLinkDegraded":
            speed, width = ev.get("speed_gts"), ev.get("width")
            gen = _GEN.get(speed, f"{speed} GT/s") if isinstance(speed, (int, float)) else "?"
            could = ev.get("max_width")
            up = ev.get("upstream_max_width")
            if isinstance(could, int) and isinstance(up, int):
                could = min(could, up)
            notes.setdefault(netdev, []).append(f"PCIe {gen} x{width}" + (f" (of x{could})" if could else ""))
        elif f.code == "LinkDegrading":
            ratio = ev.get("corrected_bit_ratio")
            if isinstance(ratio, (int, float)):
                notes.setdefault(netdev, []).append(f"BER {ratio:.1e}")
            elif ev.get("rx_pcs_symbol_err") or ev.get("rx_pcs_symbol_err_phy"):
                notes.setdefault(netdev, []).append("symbol errors")
    return {nd: ", ".join(v) for nd, v in notes.items()}
