"""The collector's bounds on what it reads: a child's answer past its cap is cut off and the reader
says so; the summary an incident page reads holds the worst findings and the count of all."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from collector import limits


def test_a_child_answer_past_the_cap_is_refused_before_it_is_read_whole() -> None:
    async def go() -> int:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)",
            stdout=asyncio.subprocess.PIPE)
        assert proc.stdout is not None
        with pytest.raises(limits.OutputTooLarge):
            await limits.read_capped(proc.stdout, 4 << 20)
        proc.kill()
        try:
            return await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            # The exit went unreported to this loop's child watcher (seen once in a long suite run):
            # the kernel's word on the process is what the test is about.
            stat = Path(f"/proc/{proc.pid}/stat")
            return -9 if not stat.exists() or stat.read_text().split(") ")[1][0] in "ZX" else 0

    assert asyncio.run(go()) != 0  # it was still writing: killed, not finished


def test_a_child_answer_under_the_cap_is_read_whole() -> None:
    async def go() -> bytes:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "print('y' * 100000)",
                                                    stdout=asyncio.subprocess.PIPE)
        assert proc.stdout is not None
        out = await limits.read_capped(proc.stdout, 1 << 20)
        await proc.wait()
        return out

    assert asyncio.run(go()) == b"y" * 100000 + b"\n"


def test_the_summary_keeps_the_worst_findings_and_counts_them_all() -> None:
    findings = [{"code": f"C{i}", "subject": "net_rail0", "severity": "warning", "message": "m",
                 "evidence": {"x": "y" * 1000}} for i in range(5000)]
    got = limits.summarise_doctor({"schema": "railscope.doctor/v1", "findings": findings,
                                   "rails": [{"rail": i} for i in range(1000)], "unavailable": []})
    assert got["findings_total"] == 5000 and len(got["findings"]) == limits.SUMMARY_FINDINGS
    assert got["findings"][0] == {"code": "C0", "subject": "net_rail0", "severity": "warning", "message": "m"}
    assert got["rails_total"] == 1000 and len(got["rails"]) == 100
    assert len(repr(got)) < limits.SUMMARY_BYTES // 4


def test_a_summary_of_the_worst_text_still_fits_the_cap_it_is_read_under() -> None:
    """Text outside ASCII takes six bytes a character in the stored JSON: a summary of such rails,
    findings, gaps and notes is cut to fit, its lists counted whole, its envelope (what the cache is
    matched by) kept."""
    wide = "链" * 5000
    rail = {k: wide for k in ("netdev", "rdma", "pci", "driver", "driver_version", "firmware", "psid", "gpu")}
    doctor = limits.summarise_doctor({
        "schema": "railscope.doctor/v1", "node": wide, "kernel": wide,
        "rails": [{**rail, "rail": i, "peer": {"system": wide, "port": wide, "pfc": list(range(100))}}
                  for i in range(1000)],
        "findings": [{"code": wide, "subject": wide, "severity": "warning", "message": wide} for _ in range(5000)],
        "unavailable": [{"source": wide, "reason": wide} for _ in range(1000)], "notes": [wide] * 1000,
        "expectations": {f"e{i}": {"value": wide, "from": "bundle"} for i in range(1000)}})
    doc = {"schema": "railscope.analysis/v1", "sha256": "0" * 64, "version": "0.1.0", "key": "a/b/c/d",
           "expectations": "Expectations(...)+recorded", "doctor": doctor, "error": wide * 100}
    got = limits.fit_summary(doc)
    assert len(limits.summary_bytes(got)) <= limits.SUMMARY_BYTES
    assert {k: got[k] for k in ("schema", "sha256", "version", "key", "expectations")} == \
        {k: doc[k] for k in ("schema", "sha256", "version", "key", "expectations")}
    d = got["doctor"]
    assert (d["findings_total"], d["rails_total"], d["unavailable_total"], d["notes_total"]) == (5000, 1000, 1000, 1000)
    assert d["findings"] and d["rails"]  # cut, not emptied
    assert limits.summarise_doctor(d)["findings_total"] == 5000  # summarised again, still counted whole


def test_pages_forbid_forms_and_a_base_element(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """CSP ``form-action 'none'; base-uri 'none'``: an injected <form> or <base> in a page goes nowhere,
    in the header and in the page's own meta (a page saved from the browser keeps it)."""
    import aiohttp

    from tests.support.collector_helpers import OPERATOR_TOKEN, local_settings, running

    async def go() -> tuple[str, str, str]:
        async with running(local_settings(tmp_path)) as (url, _col), aiohttp.ClientSession() as s:
            async with s.get(url + "/ui/", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}) as r:
                return r.headers["Content-Security-Policy"], await r.text(), str(r.status)

    header, page, status = asyncio.run(go())
    assert status == "200"
    for policy in (header, page):
        assert "form-action 'none'" in policy and "base-uri 'none'" in policy and "default-src 'none'" in policy
