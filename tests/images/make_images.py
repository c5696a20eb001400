#!/usr/bin/env python3
"""Build the node images in ``tests/images/`` from one base image by named mutations.

The base, ``spectrumx-2rail-healthy/``, is the shared hand-made example image (docs/design.md §2 format v1)
copied into the project with its symlinks restored. Every other image is the base (or the 4-rail
image built from it) plus the mutations listed in ``IMAGES``: each changes every door that shows the
fault (netlink dump, sysfs, recorded commands, events, flight recorder) so the image stays a
consistent node. The manifest's ``items[]`` are recomputed (bytes, sha256), so they match the files.

Deterministic: run it again and ``git diff`` shows nothing.

    python tests/images/make_images.py                 # rebuild every image from the base
    python tests/images/make_images.py --out /tmp/x    # build elsewhere (the determinism test)
    python tests/images/make_images.py --import-base /path/to/spectrumx-2rail-healthy
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # run as a script: the format code of this tree

from agent.host import slug  # noqa: E402
from agent.host.image import ManifestItem, item_of, manifest_to_json, parse_manifest  # noqa: E402

BASE = "spectrumx-2rail-healthy"
ENDED_AT = 1793197233  # the base manifest's ended_at, 2026-10-28T14:20:33Z
NET_RULES = "fs/etc/udev/rules.d/10-nic-net-interface-naming.rules"
RDMA_RULES = "fs/etc/udev/rules.d/10-nic-rdma-interface-naming.rules"
OVS_ARGV = ["ovs-vsctl", "--format=json", "--columns=name,type,ifindex,ofport,link_state,error", "list", "Interface"]


def _item(doc: dict, data: bytes | None) -> ManifestItem:
    """An ``items[]`` entry of the format (``agent.host.image``), its size and sha256 over ``data``."""
    fields = {"argv": tuple(doc["argv"]) if doc.get("argv") is not None else None, "rc": doc.get("rc"),
              "duration_s": doc.get("duration_s", 0.0), "truncated": doc.get("truncated", False),
              "timed_out": doc.get("timed_out", False), "skipped": doc.get("skipped", False),
              "reason": doc.get("reason")}
    if data is None:
        return ManifestItem(path=doc.get("path"), kind=doc["kind"], bytes=doc.get("bytes", 0),
                            sha256=doc.get("sha256"), **fields)
    return item_of(doc["path"], data, doc["kind"], **fields)


# --------------------------------------------------------------------------------------------
# an image in memory


@dataclass
class Image:
    files: dict[str, bytes] = field(default_factory=dict)  # image-relative path -> bytes
    links: dict[str, str] = field(default_factory=dict)  # image-relative path -> symlink target
    manifest: dict = field(default_factory=dict)

    @classmethod
    def load(cls, root: Path, restore_links: bool = False) -> Image:
        img = cls()
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in [*sorted(filenames), *[d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]]:
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                if rel in ("README.md", "expected.json"):
                    continue
                if os.path.islink(full):
                    img.links[rel] = os.readlink(full)
                    continue
                data = Path(full).read_bytes()
                if restore_links and rel.startswith("fs/") and _flat_link(data):
                    img.links[rel] = data.decode().rstrip("\n")
                else:
                    img.files[rel] = data
        img.manifest = json.loads(img.files.pop("manifest.json"))
        return img

    def copy(self) -> Image:
        return Image(dict(self.files), dict(self.links), copy.deepcopy(self.manifest))

    # -- node paths through symlinks (sysfs) ---------------------------------------------
    def resolve(self, node_path: str) -> str:
        parts = [p for p in node_path.split("/") if p]
        done: list[str] = []
        while parts:
            name = parts.pop(0)
            if name == "..":
                done.pop()
                continue
            cand = "fs/" + "/".join([*done, name])
            if cand in self.links:
                parts = [p for p in self.links[cand].split("/") if p] + parts
                continue
            done.append(name)
        return "fs/" + "/".join(done)

    def read(self, node_path: str) -> str:
        return self.files[self.resolve(node_path)].decode()

    def write(self, node_path: str, text: str) -> None:
        self.files[self.resolve(node_path)] = text.encode()

    # -- commands --------------------------------------------------------------------------
    def cmd(self, argv: list[str]) -> str:
        return self.files[f"cmd/{slug(argv)}.stdout"].decode()

    def set_cmd(self, argv: list[str], stdout: str, rc: int = 0) -> None:
        stem = f"cmd/{slug(argv)}"
        self.files[stem + ".stdout"] = stdout.encode()
        self.files[stem + ".rc"] = f"{rc}\n".encode()
        items = self.manifest["items"]
        for item in items:
            if item.get("argv") == argv:
                item.update(path=stem + ".stdout", rc=rc, skipped=False)
                item.pop("reason", None)
                return
        items.append({"path": stem + ".stdout", "kind": "command", "argv": argv, "rc": rc, "duration_s": 0.02,
                      "bytes": 0, "sha256": None, "truncated": False, "timed_out": False, "skipped": False})

    def jcmd(self, argv: list[str]) -> Any:
        return json.loads(self.cmd(argv))

    def set_jcmd(self, argv: list[str], doc: object) -> None:
        self.set_cmd(argv, json.dumps(doc, separators=(",", ":")) + "\n")

    # -- netlink ---------------------------------------------------------------------------
    def netlinks(self) -> list[dict]:
        return json.loads(self.files["netlink/links.json"])["links"]

    def set_netlinks(self, links: list[dict]) -> None:
        self.files["netlink/links.json"] = (json.dumps({"links": links}, indent=1) + "\n").encode()

    def update_link(self, ifname: str, **changes: object) -> None:
        links = self.netlinks()
        for ln in links:
            if ln["ifname"] == ifname:
                ln.update(changes)
        self.set_netlinks(links)

    # -- writing ---------------------------------------------------------------------------
    def save(self, root: Path, readme: str, expected: dict) -> None:
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        for rel, data in sorted(self.files.items()):
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        for rel, target in sorted(self.links.items()):
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, p)
        # The manifest is written by the format's own writer, its items recomputed over the files.
        items = [_item(doc, None if doc.get("path") is None else self.files[doc["path"]])
                 for doc in self.manifest["items"] if doc.get("path") is None or doc["path"] in self.files]
        listed = {i.path for i in items}
        for rel in sorted(self.files):
            if rel in listed or rel.endswith((".rc", ".stderr")):
                continue
            kind = "file" if rel.startswith("fs/") else "netlink" if rel.startswith("netlink/") else "generated"
            items.append(item_of(rel, self.files[rel], kind))
        head, problems = parse_manifest(json.dumps({**self.manifest, "items": []}).encode())
        assert not problems, problems
        (root / "manifest.json").write_text(manifest_to_json(replace(head, items=tuple(items))))
        (root / "README.md").write_text(readme)
        (root / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


def _flat_link(data: bytes) -> bool:
    """A symlink that a copy flattened into a small file holding the relative target."""
    return len(data) < 4096 and data.startswith(b"../") and b"\n" not in data.rstrip(b"\n")


# --------------------------------------------------------------------------------------------
# mutations


def sub_all(text: str, mapping: dict[str, str]) -> str:
    if not mapping:
        return text
    pat = re.compile("|".join(re.escape(k) for k in sorted(mapping, key=len, reverse=True)))
    return pat.sub(lambda m: mapping[m.group(0)], text)


def rename_netdev(img: Image, old: str, new: str) -> None:
    """Give a netdev another name on every door: netlink, sysfs, devlink, rdma, ethtool records."""
    mapping = {old: new}
    pat = re.compile(rf"(?<![A-Za-z0-9]){re.escape(old)}(?![A-Za-z0-9_])")
    for rel in list(img.links):
        new_rel = pat.sub(new, rel)
        target = pat.sub(new, img.links.pop(rel))
        img.links[new_rel] = target
    for rel in list(img.files):
        data = img.files.pop(rel)
        new_rel = pat.sub(new, rel)
        if rel.startswith(("cmd/", "netlink/")) or rel.endswith("/ifname"):
            data = pat.sub(new, data.decode()).encode()
        img.files[new_rel] = data
    for item in img.manifest["items"]:
        if item.get("path"):
            item["path"] = pat.sub(new, item["path"])
        if item.get("argv"):
            item["argv"] = [mapping.get(a, a) for a in item["argv"]]


def set_counters(img: Image, netdev: str, drop: tuple[str, ...] = (), **values: int) -> None:
    """Change ``ethtool -S`` counters: new values (appended when absent), dropped keys removed."""
    argv = ["ethtool", "-S", netdev]
    lines = img.cmd(argv).splitlines()
    out, seen = [], set()
    for line in lines:
        key = line.split(":", 1)[0].strip()
        if key in drop:
            continue
        if key in values:
            line = f"     {key}: {values[key]}"
            seen.add(key)
        out.append(line)
    out.extend(f"     {k}: {v}" for k, v in values.items() if k not in seen)
    img.set_cmd(argv, "\n".join(out) + "\n")


def counters(img: Image, netdev: str) -> dict[str, int]:
    out = {}
    for line in img.cmd(["ethtool", "-S", netdev]).splitlines()[1:]:
        k, _, v = line.partition(":")
        try:
            out[k.strip()] = int(v)
        except ValueError:
            continue
    return out


def link_down(img: Image, netdev: str, rdma: str) -> None:
    ln = next(x for x in img.netlinks() if x["ifname"] == netdev)
    img.update_link(netdev, operstate="DOWN", carrier=0, carrier_changes=ln["carrier_changes"] + 1,
                    carrier_down_count=ln["carrier_down_count"] + 1)
    base = f"/sys/class/net/{netdev}"
    img.write(f"{base}/operstate", "down\n")
    img.write(f"{base}/carrier", "0\n")
    img.write(f"{base}/speed", "-1\n")
    img.write(f"{base}/carrier_changes", f"{ln['carrier_changes'] + 1}\n")
    img.write(f"{base}/carrier_down_count", f"{ln['carrier_down_count'] + 1}\n")
    rdma_down(img, rdma, "DOWN", "DISABLED", "1: DOWN", "3: Disabled")


def rdma_down(img: Image, rdma: str, state: str, phys: str, sys_state: str, sys_phys: str) -> None:
    argv = ["rdma", "-j", "link", "show"]
    doc = img.jcmd(argv)
    for e in doc:
        if e["ifname"] == rdma:
            e.update(state=state, physical_state=phys)
    img.set_jcmd(argv, doc)
    img.write(f"/sys/class/infiniband/{rdma}/ports/1/state", sys_state + "\n")
    img.write(f"/sys/class/infiniband/{rdma}/ports/1/phys_state", sys_phys + "\n")


def set_events(img: Image, events: list[dict]) -> None:
    img.files["events.json"] = (json.dumps({"events": events}, indent=1) + "\n").encode()


def set_recorder(img: Image, rows: list[dict]) -> None:
    img.files["recorder.jsonl"] = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()


def recorder_rows(img: Image, netdevs: list[str], seconds: int,
                  grow: Callable[[str, int], dict[str, int]]) -> list[dict]:
    """One sample per netdev per second up to the capture time; the last one equals ``ethtool -S``.

    ``grow(netdev, seconds_before_end)`` gives, per counter, how much less it was then.
    """
    keys = ("tx_prio3_pause_duration", "rx_prio3_pause_duration", "tx_prio3_pause", "rx_prio3_pause",
            "tx_pause_storm_warning_events", "tx_pause_storm_error_events", "rx_prio3_discards",
            "rx_prio3_buf_discard", "rx_prio3_cong_discard", "rx_discards_phy")
    rows = []
    for i in range(seconds - 1, -1, -1):
        for nd in netdevs:
            now = counters(img, nd)
            link = next(x for x in img.netlinks() if x["ifname"] == nd)
            c = {k: now[k] for k in keys if k in now}
            c["carrier_down_count"] = link["carrier_down_count"]
            for k, less in grow(nd, i).items():
                c[k] = c.get(k, 0) - less
            rows.append({"ts": ENDED_AT - i, "netdev": nd, "counters": c})
    return rows


def set_driver(img: Image, version: str | None = None, firmware: str | None = None,
               netdevs: tuple[str, ...] = ("net_rail0", "net_rail1")) -> None:
    for nd in netdevs:
        argv = ["ethtool", "-i", nd]
        text = img.cmd(argv)
        if version:
            text = re.sub(r"(?m)^version: .*$", f"version: {version}", text)
        if firmware:
            text = re.sub(r"(?m)^firmware-version: (\S+)", f"firmware-version: {firmware}", text)
        img.set_cmd(argv, text)
    if version:
        img.write("/sys/module/mlx5_core/version", version + "\n")


def set_kernel(img: Image, release: str) -> None:
    old = img.read("/proc/sys/kernel/osrelease").strip()
    img.write("/proc/sys/kernel/osrelease", release + "\n")
    img.write("/proc/cmdline", img.read("/proc/cmdline").replace(old, release))


# -- the 4-rail node: rails 2 and 3 cloned from rail 0 ----------------------------------------

def clone_rail(img: Image, rail: int, bus: str, root: str, pf_aux: int, vf_aux: int, ifindex: int,
               switch_id: str, tag: str) -> None:
    """A rail like rail 0 (same NIC model, firmware, driver) on another PCI device."""
    src_switch = "d4c2a10003d23fb8"
    mapping = {
        "pci0000:0b/0000:0b:01.0": f"pci{root}/{root}:01.0",
        "0000:0c:00": f"0000:{bus}:00",
        "0000-0c-00": f"0000-{bus}-00",
        "net_rail0": f"net_rail{rail}",
        "rdma_rail0": f"rdma_rail{rail}",
        "mlx5_core.eth.0": f"mlx5_core.eth.{pf_aux}",
        "mlx5_core.eth.2": f"mlx5_core.eth.{vf_aux}",
        src_switch: switch_id,
        "b83f:d203:00a1:c2d4": f"b83f:d203:00a1:{tag}{tag}",
        "b8:3f:d2:7a:40:1c": f"b8:3f:d2:7a:40:{tag}",
        "f2:5b:88:31:c7:02": f"f2:5b:88:31:c7:{tag}",
        "62:d1:0e:7a:40:01": f"62:d1:0e:7a:{tag}:01",
    }
    keys = ("0000:0c:00", "0000-0c-00", "net_rail0", "rdma_rail0", "mlx5_core.eth.0", "mlx5_core.eth.2")
    combined = {"netlink/links.json", "cmd/devlink_-j_dev_show.stdout", "cmd/devlink_-j_port_show.stdout",
                "cmd/rdma_-j_link_show.stdout", NET_RULES, RDMA_RULES}
    for rel in list(img.files):
        if rel in combined or not any(k in rel for k in keys):
            continue
        new_rel = sub_all(rel, mapping)
        data = img.files[rel]
        try:
            data = sub_all(data.decode(), mapping).encode()
        except UnicodeDecodeError:
            pass
        img.files[new_rel] = data
    for rel, target in list(img.links.items()):
        if any(k in rel for k in keys) or any(k in target for k in keys):
            img.links[sub_all(rel, mapping)] = sub_all(target, mapping)
    for item in list(img.manifest["items"]):
        path = item.get("path") or ""
        if path in combined or not any(k in path for k in keys):
            continue
        img.manifest["items"].append({**item, "path": sub_all(path, mapping),
                                      "argv": [sub_all(a, mapping) for a in item["argv"]] if item.get("argv") else None})

    def clone_json(obj: object) -> object:
        return json.loads(sub_all(json.dumps(obj), mapping))

    links = img.netlinks()
    new = []
    for ln in links:
        if ln["ifname"] in ("net_rail0", "net_rail0_0"):
            c = clone_json(ln)
            c["ifindex"] = ifindex + len(new)
            new.append(c)
    img.set_netlinks(links + new)
    for argv, key in ((["devlink", "-j", "dev", "show"], "dev"), (["devlink", "-j", "port", "show"], "port")):
        doc = img.jcmd(argv)
        extra = {sub_all(k, mapping): clone_json(v) for k, v in doc[key].items() if any(s in k for s in keys)}
        doc[key].update(extra)
        img.set_jcmd(argv, doc)
    argv = ["rdma", "-j", "link", "show"]
    doc = img.jcmd(argv)
    src = next(e for e in doc if e["ifname"] == "rdma_rail0")
    e = clone_json(src)
    e["ifindex"] = len(doc)
    e["netdev_index"] = ifindex
    img.set_jcmd(argv, [*doc, e])
    for rules in (NET_RULES, RDMA_RULES):
        text = img.files[rules].decode()
        line = next(ln for ln in text.splitlines() if "0000:0c:00.0" in ln)
        img.files[rules] = (text.rstrip("\n") + "\n" + sub_all(line, mapping) + "\n").encode()


def four_rails(img: Image) -> None:
    clone_rail(img, 2, "1a", "0000:19", 4, 5, 8, "e6d3a10003d23fb8", "2a")
    clone_rail(img, 3, "9b", "0000:9a", 6, 7, 10, "a7e4a10003d23fb8", "3b")


# -- the faults ---------------------------------------------------------------------------

def rail_missing(img: Image) -> None:
    img.set_netlinks([ln for ln in img.netlinks() if ln["ifname"] != "net_rail1"])
    for rel in [r for r in img.links if r.endswith("/net_rail1") or "/net/net_rail1/" in r]:
        del img.links[rel]
    for rel in [r for r in img.files if "/net/net_rail1/" in r or r.endswith("_net_rail1.stdout")
                or r.endswith("_net_rail1.rc")]:
        del img.files[rel]
    argv = ["devlink", "-j", "port", "show"]
    doc = img.jcmd(argv)
    for port in doc["port"].values():
        if port.get("netdev") == "net_rail1":
            del port["netdev"]
    img.set_jcmd(argv, doc)
    argv = ["rdma", "-j", "link", "show"]
    doc = img.jcmd(argv)
    for e in doc:
        if e.get("netdev") == "net_rail1":
            e.pop("netdev")
            e.pop("netdev_index")
    img.set_jcmd(argv, doc)


def template_invalid(img: Image) -> None:
    rename_netdev(img, "net_rail0", "enp12s0f0np0")
    rename_netdev(img, "net_rail0_0", "enp12s0f0npf0vf0")
    rename_netdev(img, "net_rail1", "enp141s0f0np0")
    rename_netdev(img, "net_rail1_0", "enp141s0f0npf0vf0")
    text = img.files[NET_RULES].decode()
    text = text.replace('NAME="net_rail0"', 'NAME="net_rail0_plane0"').replace('NAME="net_rail1"', 'NAME="net_rail1_plane0"')
    img.files[NET_RULES] = text.encode()


def representor_stale(img: Image) -> None:
    """numvfs of PF 0000:8d:00.0 went from 3 to 1; the representors of VFs 1 and 2 stayed."""
    links = img.netlinks()
    rep = next(x for x in links if x["ifname"] == "net_rail1_0")
    port_argv = ["devlink", "-j", "port", "show"]
    ports = img.jcmd(port_argv)
    src_port = ports["port"]["pci/0000:8d:00.0/1"]
    for vf in (1, 2):
        c = {**rep, "ifindex": 20 + vf, "ifname": f"net_rail1_{vf}", "phys_port_name": f"pf0vf{vf}",
             "operstate": "DOWN", "carrier": 0, "address": f"f2:5b:88:31:c7:{0x93 + vf:02x}"}
        links.append(c)
        ports["port"][f"pci/0000:8d:00.0/{vf + 1}"] = {**src_port, "netdev": f"net_rail1_{vf}", "vfnum": vf,
                                                       "function": {**src_port["function"],
                                                                    "hw_addr": f"62:d1:0e:7a:5e:{vf + 1:02x}"}}
    img.set_netlinks(links)
    img.set_jcmd(port_argv, ports)
    ovs = {"data": [
        ["net_rail0", "", 4, 1, "up", ["set", []]],
        ["net_rail0_0", "", 6, 2, "up", ["set", []]],
        ["net_rail0_4", "", 0, -1, "down", "could not open network device net_rail0_4 (No such device)"],
        ["net_rail1", "", 5, 3, "up", ["set", []]],
        ["net_rail1_0", "", 7, 4, "up", ["set", []]],
        ["br-int", "internal", 9, 65534, "down", ["set", []]],
        ["vxlan_sys_4789", "vxlan", 0, 5, "up", ["set", []]],
    ], "headings": ["name", "type", "ifindex", "ofport", "link_state", "error"]}
    img.set_jcmd(OVS_ARGV, ovs)


def eswitch_legacy(img: Image) -> None:
    """PF 0000:8d:00.0 is back in legacy mode (its VF stays, its representor is gone)."""
    argv = ["devlink", "-j", "dev", "eswitch", "show", "pci/0000:8d:00.0"]
    img.set_jcmd(argv, {"dev": {"pci/0000:8d:00.0": {"mode": "legacy", "inline-mode": "none", "encap-mode": "basic"}}})
    img.set_netlinks([ln for ln in img.netlinks() if ln["ifname"] != "net_rail1_0"])
    port_argv = ["devlink", "-j", "port", "show"]
    ports = img.jcmd(port_argv)
    del ports["port"]["pci/0000:8d:00.0/1"]
    img.set_jcmd(port_argv, ports)
    for rel in [r for r in img.links if r.endswith("/net_rail1_0")]:
        del img.links[rel]
    for rel in [r for r in img.files if "/net/net_rail1_0/" in r]:
        del img.files[rel]


def multiport_torn(img: Image) -> None:
    """The two rail PFs as the two ports of one NIC (one switch id); multiport is on for one only."""
    sw = "d4c2a10003d23fb8"
    for ln in img.netlinks():
        if ln["ifname"] in ("net_rail1", "net_rail1_0"):
            img.update_link(ln["ifname"], phys_switch_id=sw)
            img.write(f"/sys/class/net/{ln['ifname']}/phys_switch_id", sw + "\n")
    for f in ("node_guid", "sys_image_guid"):
        img.write(f"/sys/class/infiniband/rdma_rail1/{f}", img.read(f"/sys/class/infiniband/rdma_rail0/{f}"))
    argv = ["devlink", "-j", "dev", "param", "show", "pci/0000:8d:00.0", "name", "esw_multiport"]
    doc = img.jcmd(argv)
    doc["param"]["pci/0000:8d:00.0"][0]["values"][0]["value"] = True
    img.set_jcmd(argv, doc)


def pfc_disabled(img: Image) -> None:
    set_counters(img, "net_rail1", drop=("rx_prio3_pause", "rx_prio3_pause_duration", "tx_prio3_pause",
                                         "tx_prio3_pause_duration", "rx_prio3_pause_transition"))


def global_pause(img: Image) -> None:
    c = counters(img, "net_rail0")
    set_counters(img, "net_rail0", rx_global_pause=c["rx_pause_ctrl_phy"], rx_global_pause_duration=28674,
                 tx_global_pause=c["tx_pause_ctrl_phy"], tx_global_pause_duration=17728, rx_global_pause_transition=7058)


def storm_counters(img: Image) -> None:
    set_counters(img, "net_rail0", tx_pause_storm_warning_events=12, tx_pause_storm_error_events=3)


def storm_recorder(img: Image) -> None:
    storm_counters(img)
    # The NIC's cumulative pause counters cover the 45 s storm (u64 counters: never below 0 a second ago).
    set_counters(img, "net_rail0", tx_prio3_pause_duration=36_017_728, tx_prio3_pause=274_325)

    def grow(nd: str, before: int) -> dict[str, int]:
        if nd != "net_rail0":
            return {}
        # the last 45 s: the NIC sent pause 80 % of the time; the watchdog fired twice 10 s ago
        storm = min(before, 45)
        return {"tx_prio3_pause_duration": 800_000 * storm, "tx_prio3_pause": 6_000 * storm,
                "tx_pause_storm_error_events": 2 if before > 10 else 0,
                "tx_pause_storm_warning_events": 5 if before > 30 else 0}

    set_recorder(img, recorder_rows(img, ["net_rail0", "net_rail1"], 90, grow))


def drops_counters(img: Image) -> None:
    set_counters(img, "net_rail1", rx_prio3_buf_discard=1234, rx_discards_phy=1302)


def drops_recorder(img: Image) -> None:
    drops_counters(img)

    def grow(nd: str, before: int) -> dict[str, int]:
        if nd != "net_rail1" or before < 20:
            return {}
        return {"rx_prio3_buf_discard": 400, "rx_discards_phy": 420}

    set_recorder(img, recorder_rows(img, ["net_rail0", "net_rail1"], 90, grow))


def flap_events(img: Image) -> None:
    img.update_link("net_rail1", carrier_changes=8, carrier_up_count=4, carrier_down_count=4)
    set_events(img, [
        {"ts": ENDED_AT - 3600, "code": "LinkFlapping", "severity": "warning", "subject": "net_rail0",
         "message": "net_rail0: 3 carrier losses within 300 s", "evidence": {"carrier_losses": 3}},
        {"ts": ENDED_AT - 95, "code": "LinkFlapping", "severity": "warning", "subject": "net_rail1",
         "message": "net_rail1: 3 carrier losses within 300 s", "evidence": {"carrier_losses": 3, "window_s": 300}},
    ])


def flap_recorder(img: Image) -> None:
    img.update_link("net_rail0", carrier_changes=8, carrier_up_count=4, carrier_down_count=4)

    def grow(nd: str, before: int) -> dict[str, int]:
        if nd != "net_rail0":
            return {}
        return {"carrier_down_count": sum(1 for t in (70, 40, 15) if before >= t)}

    set_recorder(img, recorder_rows(img, ["net_rail0", "net_rail1"], 90, grow))


def config_flap_events(img: Image) -> None:
    set_events(img, [
        {"ts": ENDED_AT - 200, "code": "ConfigFlapping", "severity": "warning", "subject": "pci/0000:8d:00.0",
         "message": "pci/0000:8d:00.0: sriov_numvfs changed 1 -> 0 -> 1 -> 0 -> 1 within 300 s",
         "evidence": {"what": "sriov_numvfs", "values": [1, 0, 1, 0, 1]}},
    ])


def firmware_skew(img: Image) -> None:
    set_driver(img, firmware="28.43.1014", netdevs=("net_rail1",))
    img.write("/sys/class/infiniband/rdma_rail1/fw_ver", "28.43.1014\n")


def kernel_beyond(img: Image) -> None:
    set_driver(img, version="26.01-0.5.2")
    set_kernel(img, "6.8.0-106-generic")


def kernel_unknown(img: Image) -> None:
    set_driver(img, version="26.01-0.5.2")
    set_kernel(img, "6.11.0-29-generic")


def netns_shared(img: Image) -> None:
    img.set_jcmd(["rdma", "-j", "system", "show"],
                 [{"netns": "shared", "privileged-qkey": False, "monitor": True, "copy-on-fork": True}])
    img.write("/sys/module/ib_core/parameters/netns_mode", "Y\n")
    img.files["fs/etc/modprobe.d/ib_core.conf"] = b"# written by the RDMA CNI setup\noptions ib_core netns_mode=0\n"


# -- real clusters: site naming rules, failed RDMA renames, older tools ----------------------

RULES_DIR = "fs/etc/udev/rules.d"


def drop_operator_rules(img: Image) -> None:
    """A node whose rails are not named by nic-configuration-operator: its two files are absent."""
    for rel in (NET_RULES, RDMA_RULES):
        img.files.pop(rel, None)


def move_pci(img: Image, mapping: dict[str, str]) -> None:
    """Give PCI functions other addresses on every door (paths, symlinks, file and command text)."""
    for rel in list(img.files):
        data = img.files.pop(rel)
        try:
            data = sub_all(data.decode(), mapping).encode()
        except UnicodeDecodeError:
            pass
        img.files[sub_all(rel, mapping)] = data
    img.links = {sub_all(rel, mapping): sub_all(target, mapping) for rel, target in img.links.items()}
    for item in img.manifest["items"]:
        if item.get("path"):
            item["path"] = sub_all(item["path"], mapping)
        if item.get("argv"):
            item["argv"] = [sub_all(a, mapping) for a in item["argv"]]


# The site file of github.com/schmaustech/gpu-nic-rail-mapping (README): one line per net and RDMA
# name, rails and storage NICs ("eth_sec") side by side, the same key order.
def _site_line(pci: str, net: str, rdma: str) -> str:
    return (f'ACTION=="add", KERNELS=="{pci}", SUBSYSTEM=="net", NAME="{net}"\n'
            f'ACTION=="add", KERNELS=="{pci}", SUBSYSTEM=="infiniband", PROGRAM="rdma_rename %k NAME_FIXED {rdma}"\n')


def site_rules(img: Image) -> None:
    drop_operator_rules(img)
    rename_netdev(img, "net_rail0", "enp12s0f0np0")  # the net rename of rail 0 failed
    rename_netdev(img, "net_rail0_0", "enp12s0f0npf0vf0")
    rename_netdev(img, "net_rail1", "eth_rail1")
    rename_netdev(img, "net_rail1_0", "eth_rail1_0")
    rename_netdev(img, "rdma_rail0", "roce_rail0")
    rename_netdev(img, "rdma_rail1", "mlx5_1")  # the RDMA rename of rail 1 failed
    rename_netdev(img, "ens7f0np0", "eth_sec0")
    rename_netdev(img, "ens7f1np1", "eth_sec1")
    img.files[f"{RULES_DIR}/70-persistent-net.rules"] = (
        _site_line("0000:0c:00.0", "eth_rail0", "roce_rail0") + _site_line("0000:a1:00.0", "eth_sec0", "roce_sec0")
        + _site_line("0000:a1:00.1", "eth_sec1", "roce_sec1") + _site_line("0000:8d:00.0", "eth_rail1", "roce_rail1")
    ).encode()


def kernel_names(img: Image) -> None:
    """No rule names the rails and the netdevs keep systemd's predictable names (``enp<bus>s<slot>f<fn>np<port>``,
    ``enp12s0f0np0`` for ``0000:0c:00.0``), the RDMA devices the kernel's (``mlx5_<N>``): no template matches.
    The representors keep their kernel names (``eth4``): systemd's would be longer than IFNAMSIZ."""
    drop_operator_rules(img)
    for old, new in (("net_rail0", "enp12s0f0np0"), ("net_rail0_0", "eth4"),
                     ("net_rail1", "enp141s0f0np0"), ("net_rail1_0", "eth5"),
                     ("rdma_rail0", "mlx5_0"), ("rdma_rail1", "mlx5_1")):
        rename_netdev(img, old, new)


#: where the kernel_names images' names come from
SYSTEMD_NAMES = ("The netdev names are systemd's bus-path names (systemd.net-naming-scheme(7), "
                 "man.archlinux.org/man/systemd.net-naming-scheme.7.en: `[P<domain>]p<bus>s<slot>[f<function>]"
                 "[n<phys_port_name>]`, the bus in decimal: `0000:0c:00.0` with phys_port_name `p0` is `enp12s0f0np0`), "
                 "the names a node keeps without the operator's naming rules; `mlx5_<N>` is the kernel's RDMA name.")

#: the base image's rails by PCI function, as ``--rail-map`` states them
RAIL_MAP = "0=0000:0c:00.0,1=0000:8d:00.0"


def rail_map_recorded(img: Image) -> None:
    """``kernel_names``, captured by an agent run with ``--rail-map``: the manifest records the map, so a
    replay finds the rails the node had."""
    kernel_names(img)
    img.manifest["expectations"] = {"rail_map": [[0, "0000:0c:00.0"], [1, "0000:8d:00.0"]]}


def azure_rules(img: Image) -> None:
    """PCI domains 0101 / 0102 as Hyper-V gives them, rails named by Azure's RDMA rules only."""
    move_pci(img, {"pci0000:0b/0000:0b:01.0": "pci0101:00/0101:00:01.0", "0000:0c:00": "0101:00:00",
                   "0000-0c-00": "0101-00-00", "pci0000:8c/0000:8c:01.0": "pci0102:00/0102:00:01.0",
                   "0000:8d:00": "0102:00:00", "0000-8d-00": "0102-00-00"})
    drop_operator_rules(img)
    # systemd's predictable names with a PCI domain: P<domain, decimal>p<bus>s<slot>, then the port
    rename_netdev(img, "net_rail0", "enP257p0s0np0")
    rename_netdev(img, "net_rail0_0", "enP257p0s0npf0vf0")
    rename_netdev(img, "net_rail1", "enP258p0s0np0")
    rename_netdev(img, "net_rail1_0", "enP258p0s0npf0vf0")
    rename_netdev(img, "rdma_rail0", "mlx5_ib0")
    rename_netdev(img, "rdma_rail1", "mlx5_ib1")
    img.files[f"{RULES_DIR}/99-rdma-persistent-naming.rules"] = (
        b'ACTION=="add", SUBSYSTEMS=="pci", KERNELS=="0101:00:00.0", PROGRAM="rdma_rename %k NAME_FIXED mlx5_ib0"\n'
        b'ACTION=="add", SUBSYSTEMS=="pci", KERNELS=="0102:00:00.0", PROGRAM="rdma_rename %k NAME_FIXED mlx5_ib1"\n'
    )


def _old_system_show(img: Image) -> None:
    # iproute2 before 5.2 has no "rdma system": rd_exec_cmd prints "Unknown object" and fails.
    argv = ["rdma", "-j", "system", "show"]
    img.set_cmd(argv, "", rc=1)
    img.files[f"cmd/{slug(argv)}.stderr"] = b"Unknown object 'system'.\n"


def old_rdma_text(img: Image) -> None:
    """iproute2 < 5.5 that ignores -j: "<dev index>/<port>: <dev>/<port>: ..." lines (trailing space)."""
    rdma_down(img, "rdma_rail1", "DOWN", "POLLING", "1: DOWN", "2: Polling")
    img.set_cmd(["rdma", "-j", "link", "show"],
                "0/1: rdma_rail0/1: state ACTIVE physical_state LINK_UP netdev net_rail0 \n"
                "1/1: rdma_rail1/1: state DOWN physical_state POLLING netdev net_rail1 \n")
    _old_system_show(img)


def old_rdma_json(img: Image) -> None:
    """iproute2 < 5.5 JSON: the port is also in "ifname" ("rdma_rail0/1"), keys in its order."""
    rdma_down(img, "rdma_rail1", "DOWN", "POLLING", "1: DOWN", "2: Polling")
    argv = ["rdma", "-j", "link", "show"]
    doc = [{"ifindex": e["ifindex"], "port": e["port"], "ifname": f"{e['ifname']}/{e['port']}", "state": e["state"],
            "physical_state": e["physical_state"], "netdev": e["netdev"], "netdev_index": e["netdev_index"]}
           for e in img.jcmd(argv)]
    img.set_jcmd(argv, doc)
    _old_system_show(img)


def cx8_smi(img: Image) -> None:
    """An SMI device ``smi1`` (InfiniBand link layer, no netdev) on rail 0's function."""
    dev = "sys/devices/pci0000:0b/0000:0b:01.0/0000:0c:00.0"
    base = f"fs/{dev}/infiniband/smi1"
    src = f"fs/{dev}/infiniband/rdma_rail0"
    for name in ("board_id", "fw_ver", "hca_type", "hw_rev", "node_type"):
        img.files[f"{base}/{name}"] = img.files[f"{src}/{name}"]
    img.files[f"{src}/hca_type"] = b"MT4131\n"
    img.files[f"{base}/hca_type"] = b"MT4131\n"
    img.files[f"{base}/node_guid"] = b"b83f:d203:00a1:c2d5\n"
    img.files[f"{base}/node_desc"] = b"gpu-node-017 smi1\n"
    img.files[f"{base}/ports/1/state"] = b"2: INIT\n"  # no subnet manager on the SMI plane yet
    img.files[f"{base}/ports/1/phys_state"] = b"5: LinkUp\n"
    img.files[f"{base}/ports/1/link_layer"] = b"InfiniBand\n"
    img.links[f"{base}/device"] = "../../../0000:0c:00.0"
    img.links["fs/sys/class/infiniband/smi1"] = "../../devices/pci0000:0b/0000:0b:01.0/0000:0c:00.0/infiniband/smi1"
    argv = ["rdma", "-j", "link", "show"]
    doc = img.jcmd(argv)
    doc.append({"ifindex": 2, "ifname": "smi1", "port": 1, "state": "INIT", "physical_state": "LINK_UP"})
    img.set_jcmd(argv, doc)


def malformed_rule(img: Image) -> None:
    text = img.files[NET_RULES].decode()
    img.files[NET_RULES] = text.replace('KERNELS=="0000:8d:00.0"', 'KERNELS=="0000:s2:00.0"').encode()


# --------------------------------------------------------------------------------------------
# the images

HEALTH_ARGV = ["devlink", "-j", "health", "show"]


def _reporter(name: str, state: str = "healthy", error: int = 0, recover: int = 0) -> dict:
    return {"reporter": name, "state": state, "error": error, "recover": recover, "grace_period": 500,
            "auto_recover": True, "auto_dump": True}


def set_health(img: Image, changes: dict[tuple[str, str], dict], extra: dict[str, list[dict]] | None = None) -> None:
    """``devlink -j health show`` as mlx5 on kernel >= 6.7 prints it for the two rail PFs (``fw``,
    ``fw_fatal`` on the PF, ``tx``, ``rx`` on the uplink port of its nested auxiliary instance), all
    healthy but for ``changes`` ((handle, reporter) -> fields); ``extra`` adds other handles."""
    doc: dict[str, list[dict]] = {}
    for pf, aux in (("pci/0000:0c:00.0", "auxiliary/mlx5_core.eth.0/65535"),
                    ("pci/0000:8d:00.0", "auxiliary/mlx5_core.eth.1/65535")):
        doc[pf] = [_reporter("fw"), _reporter("fw_fatal")]
        doc[aux] = [_reporter("tx"), _reporter("rx")]
    for (handle, name), fields in changes.items():
        for rep in doc[handle]:
            if rep["reporter"] == name:
                rep.update(fields)
    doc.update(extra or {})
    img.set_jcmd(HEALTH_ARGV, {"health": doc})



# -- degradation: PHY counters, optics, PCIe, NIC temperature ---------------------------------------

OPTICS = HERE.parent / "fixtures" / "public" / "optics"
PF0_DIR = "/sys/bus/pci/devices/0000:0c:00.0"
PF1_DIR = "/sys/bus/pci/devices/0000:8d:00.0"
#: 400 Gb/s of line-rate bits a second (``rx_bits_phy`` counts them whether or not traffic flows)
LINE_BITS = 400_000_000_000


def _module(name: str) -> str:
    """A public ``ethtool -m`` sample without its provenance header (the README names it)."""
    return "".join(ln + "\n" for ln in (OPTICS / name).read_text().splitlines() if not ln.startswith("#"))


def set_optics(img: Image, netdev: str, text: str) -> None:
    img.set_cmd(["ethtool", "-m", netdev], text)


def healthy_optics(img: Image) -> None:
    for nd in ("net_rail0", "net_rail1"):
        set_optics(img, nd, _module("ethtool-m-qsfp28-finisar-cwdm4.txt"))


def pcie_files(img: Image, pf: str, speed: str = "32.0 GT/s PCIe", width: int = 16,
               max_speed: str = "32.0 GT/s PCIe", max_width: int = 16, up_speed: str = "32.0 GT/s PCIe",
               up_width: int = 16, aer: dict[str, int] | None = None) -> None:
    img.write(f"{pf}/current_link_speed", speed + "\n")
    img.write(f"{pf}/current_link_width", f"{width}\n")
    img.write(f"{pf}/max_link_speed", max_speed + "\n")
    img.write(f"{pf}/max_link_width", f"{max_width}\n")
    up = img.resolve(pf).rsplit("/", 1)[0][len("fs"):]
    img.write(f"{up}/max_link_speed", up_speed + "\n")
    img.write(f"{up}/max_link_width", f"{up_width}\n")
    counts = {"TOTAL_ERR_COR": 0, "TOTAL_ERR_NONFATAL": 0, "TOTAL_ERR_FATAL": 0, **(aer or {})}
    img.write(f"{pf}/aer_dev_correctable", "RxErr 0\nBadTLP 0\nBadDLLP 0\nRollover 0\nTimeout 0\nNonFatalErr 0\n"
              f"CorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR {counts['TOTAL_ERR_COR']}\n")
    img.write(f"{pf}/aer_dev_nonfatal", "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\n"
              f"UnxCmplt 0\nRxOF 0\nMalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\n"
              f"AtomicOpBlocked 0\nTLPBlockedErr 0\nPoisonTLPBlocked 0\nTOTAL_ERR_NONFATAL {counts['TOTAL_ERR_NONFATAL']}\n")
    img.write(f"{pf}/aer_dev_fatal", "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\n"
              f"UnxCmplt 0\nRxOF 0\nMalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\n"
              f"AtomicOpBlocked 0\nTLPBlockedErr 0\nPoisonTLPBlocked 0\nTOTAL_ERR_FATAL {counts['TOTAL_ERR_FATAL']}\n")


def hwmon(img: Image, pf: str, asic_c: float, crit_c: float = 105.0, module_c: float | None = 45.0) -> None:
    base = f"{pf}/hwmon/hwmon3"
    img.write(f"{base}/name", "mlx5\n")
    img.write(f"{base}/temp1_label", "asic\n")
    img.write(f"{base}/temp1_input", f"{int(asic_c * 1000)}\n")
    img.write(f"{base}/temp1_crit", f"{int(crit_c * 1000)}\n")
    img.write(f"{base}/temp1_highest", f"{int(max(asic_c, 60.0) * 1000)}\n")
    if module_c is not None:
        img.write(f"{base}/temp2_label", "Module0\n")
        img.write(f"{base}/temp2_input", f"{int(module_c * 1000)}\n")
        img.write(f"{base}/temp2_crit", "75000\n")


def degradation_healthy(img: Image) -> None:
    """Every new source read and healthy: optics in range, PCIe Gen5 x16 both ends, cool ASICs."""
    healthy_optics(img)
    for pf in (PF0_DIR, PF1_DIR):
        pcie_files(img, pf)
        hwmon(img, pf, 62.0)
    for nd in ("net_rail0", "net_rail1"):
        set_counters(img, nd, rx_bits_phy=LINE_BITS * 86_400)


def phy_recorder(img: Image, seconds: int, grow: Callable[[str, int], dict[str, int]]) -> None:
    """A recorder of the PHY counters, one line per rail per second; the last equals ``ethtool -S``."""
    keys = ("rx_bits_phy", "rx_corrected_bits_phy", "rx_pcs_symbol_err_phy", "rx_err_lane_0_phy",
            "rx_err_lane_1_phy", "rx_err_lane_2_phy", "rx_err_lane_3_phy", "carrier_down_count")
    rows = []
    for i in range(seconds - 1, -1, -1):
        for nd in ("net_rail0", "net_rail1"):
            now = counters(img, nd)
            c = {k: now[k] for k in keys if k in now}
            c["rx_bits_phy"] = now["rx_bits_phy"] - LINE_BITS * i
            for k, less in grow(nd, i).items():
                c[k] = c.get(k, 0) - less
            rows.append({"ts": ENDED_AT - i, "netdev": nd, "counters": c})
    set_recorder(img, rows)


def ber_recorder(img: Image) -> None:
    degradation_healthy(img)
    now = counters(img, "net_rail1")
    # the last 300 s: a corrected-bit ratio of 5e-4 on net_rail1, 90 % of it on lane 2 (one bad fibre)
    per_s = LINE_BITS * 5 // 10_000
    set_counters(img, "net_rail1", rx_corrected_bits_phy=now["rx_corrected_bits_phy"] + per_s * 300,
                 rx_err_lane_2_phy=now["rx_err_lane_2_phy"] + per_s * 300 * 9 // 10)

    def grow(nd: str, before: int) -> dict[str, int]:
        if nd != "net_rail1":
            return {}
        return {"rx_corrected_bits_phy": per_s * before, "rx_err_lane_2_phy": per_s * before * 9 // 10}

    phy_recorder(img, 300, grow)


def ber_warning_recorder(img: Image) -> None:
    """A ratio between --ber-warning (1e-5) and the FEC's limit (2.4e-4): 2e-5 on net_rail1 over 300 s, split
    between lanes 0 and 1 as on the 2-lane ConnectX-6 Dx of Dell KB 000286734 (lane 1 190266147 of 191025837
    corrected bits, lane 0 759699: 99.6 %; tests/fixtures/public/phy/), lanes 2-3 reading 0."""
    degradation_healthy(img)
    now = counters(img, "net_rail1")
    per_s = LINE_BITS * 2 // 100_000
    lane1 = 190_266_147 / 191_025_837

    def grow(nd: str, before: int) -> dict[str, int]:
        if nd != "net_rail1":
            return {}
        corr = per_s * before
        return {"rx_corrected_bits_phy": corr, "rx_err_lane_1_phy": round(corr * lane1),
                "rx_err_lane_0_phy": corr - round(corr * lane1), "rx_err_lane_2_phy": 0, "rx_err_lane_3_phy": 0}

    end = grow("net_rail1", 300)
    set_counters(img, "net_rail1", **{k: now.get(k, 0) + v for k, v in end.items()})
    phy_recorder(img, 300, grow)


def symbol_recorder(img: Image) -> None:
    degradation_healthy(img)
    set_counters(img, "net_rail0", rx_pcs_symbol_err_phy=42)

    def grow(nd: str, before: int) -> dict[str, int]:
        return {"rx_pcs_symbol_err_phy": 40 if before > 20 else 0} if nd == "net_rail0" else {}

    phy_recorder(img, 120, grow)


def idle_link(img: Image) -> None:
    """Too few bits to judge: the link came up 2 s before the capture (rx_bits_phy +8e11 < 1e12)."""
    degradation_healthy(img)
    set_counters(img, "net_rail0", rx_bits_phy=LINE_BITS * 2, rx_corrected_bits_phy=800_000_000,
                 rx_err_lane_0_phy=200_000_000, rx_err_lane_1_phy=200_000_000, rx_err_lane_2_phy=200_000_000,
                 rx_err_lane_3_phy=200_000_000)
    rows = []
    for i in (2, 1, 0):
        c = {"rx_bits_phy": LINE_BITS * (2 - i), "rx_corrected_bits_phy": 400_000_000 * (2 - i),
             "rx_pcs_symbol_err_phy": 0}
        rows.append({"ts": ENDED_AT - i, "netdev": "net_rail0", "counters": c})
    set_recorder(img, rows)


def optics_warning(img: Image) -> None:
    degradation_healthy(img)
    text = _module("ethtool-m-qsfp28-finisar-cwdm4.txt").replace(
        "Rcvr signal avg optical power(Channel 3)  : 0.9101 mW / -0.41 dBm",
        "Rcvr signal avg optical power(Channel 3)  : 0.0501 mW / -13.00 dBm")
    set_optics(img, "net_rail1", text)


def optics_alarm(img: Image) -> None:
    degradation_healthy(img)
    set_optics(img, "net_rail0", _module("ethtool-m-qsfp28-finisar-cwdm4-laser-off.txt"))


def optics_no_thresholds(img: Image) -> None:
    degradation_healthy(img)
    text = _module("ethtool-m-qsfp-dd-cmis-no-thresholds.txt").replace(
        "Rcvr signal avg optical power (Channel 5) : 1.1751 mW / 0.70 dBm",
        "Rcvr signal avg optical power (Channel 5) : 0.0001 mW / -40.00 dBm")
    set_optics(img, "net_rail1", text)


def set_optics_json(img: Image, netdev: str, name: str) -> None:
    """``ethtool --json -m`` of ``netdev`` from a public sample (an ethtool 6.14 node: the other rails'
    JSON is absent, so they replay their text)."""
    img.set_cmd(["ethtool", "--version"], "ethtool version 6.14\n")
    img.set_cmd(["ethtool", "--json", "-m", netdev], (OPTICS / name).read_text())


def optics_lanes_not_in_use(img: Image) -> None:
    degradation_healthy(img)
    set_optics(img, "net_rail1", _module("ethtool-m-qsfp-plus-avago-sr4-mlx4-one-lane.txt"))


DR4_8 = "ethtool-m-qsfp-dd-400g-xdr4-arista-4-of-8-lanes-unwrapped.txt"


def optics_dr4_cool(img: Image) -> None:
    """The 400G DR4 below its warning temperature: 4 lanes in use of the 8 ethtool prints."""
    degradation_healthy(img)
    text = _module(DR4_8)
    for old, new in (("70.49 degrees C / 158.89 degrees F", "55.49 degrees C / 131.88 degrees F"),
                     ("Module temperature high warning           : On", "Module temperature high warning           : Off")):
        assert old in text
        text = text.replace(old, new)
    set_optics(img, "net_rail1", text)


def optics_dr4_warm(img: Image) -> None:
    degradation_healthy(img)
    set_optics(img, "net_rail1", _module(DR4_8))


def optics_aoc_far_end_dark(img: Image) -> None:
    degradation_healthy(img)
    link_down(img, "net_rail1", "rdma_rail1")
    set_optics_json(img, "net_rail1", "ethtool-6.14-json-m-qsfp56-aoc-mfs1s00-rx-los-unwrapped.json")


def optics_dark_port(img: Image) -> None:
    degradation_healthy(img)
    link_down(img, "net_rail1", "rdma_rail1")
    set_optics_json(img, "net_rail1", "ethtool-6.14-json-m-qsfp-dd-sr8-ftcd8613-rx-los-unwrapped.json")


def nic_hot(img: Image) -> None:
    degradation_healthy(img)
    hwmon(img, PF1_DIR, 107.0)


def pcie_x8(img: Image) -> None:
    degradation_healthy(img)
    pcie_files(img, PF0_DIR, width=8)


def pcie_slower_slot(img: Image) -> None:
    degradation_healthy(img)
    pcie_files(img, PF1_DIR, speed="16.0 GT/s PCIe", up_speed="16.0 GT/s PCIe")


def pcie_fatal(img: Image) -> None:
    degradation_healthy(img)
    pcie_files(img, PF1_DIR, aer={"TOTAL_ERR_NONFATAL": 2, "TOTAL_ERR_FATAL": 1})


def pcie_correctable(img: Image) -> None:
    degradation_healthy(img)
    pcie_files(img, PF0_DIR, aer={"TOTAL_ERR_COR": 311})


def no_hwmon(img: Image) -> None:
    """Every degradation source but thermal: the kernel (before 6.5) registers no mlx5 hwmon device."""
    degradation_healthy(img)
    for name in [n for n in img.files if "/hwmon/" in n]:
        del img.files[name]


def management_mlx5(img: Image) -> None:
    """The management NIC is an SR-IOV capable mlx5 function devlink lists, named by no rule."""
    degradation_healthy(img)
    doc = img.jcmd(["devlink", "-j", "dev", "show"])
    for bdf in ("0000:a1:00.0", "0000:a1:00.1"):
        doc["dev"][f"pci/{bdf}"] = {}
        img.write(f"/sys/bus/pci/devices/{bdf}/vendor", "0x15b3\n")
    img.set_jcmd(["devlink", "-j", "dev", "show"], doc)

# -- readiness: firmware, GPUs and GPUDirect, MTU, driver kind, naming conflicts --------------

DEV_INFO = ["devlink", "-j", "dev", "info"]
DRIVER_VERSION = "570.133.20"  # an R570 data-centre driver: nvidia, nvidia_peermem


def set_dev_info(img: Image, running: dict[str, str], stored: dict[str, str]) -> None:
    """``devlink -j dev info`` of both rail PFs as mlx5 prints it: ``fw.version`` and ``fw`` running and
    stored, ``fw.psid`` fixed; ``running`` / ``stored`` map a handle to its version (default 28.42.1000)."""
    for handle in ("pci/0000:0c:00.0", "pci/0000:8d:00.0"):
        run, st = running.get(handle, "28.42.1000"), stored.get(handle, running.get(handle, "28.42.1000"))
        serial = "MT2330X0" + handle[-7:-5].upper() + "01"
        img.set_jcmd([*DEV_INFO, handle], {"info": {handle: {
            "driver": "mlx5_core", "serial_number": serial,
            "versions": {"fixed": {"fw.psid": "MT_0000000838"},
                         "running": {"fw.version": run, "fw": run},
                         "stored": {"fw.version": st, "fw": st}}}}})


def firmware_pending(img: Image) -> None:
    set_dev_info(img, {}, {"pci/0000:0c:00.0": "28.43.1014"})


def firmware_stored_unreadable(img: Image) -> None:
    """mlx5 since upstream 10dc35f6a443: the pending image of ``0000:0c:00.0`` could not be read (a failed
    flash), so ``devlink dev info`` reports the stored version as all-ones words, 255.255.65535."""
    set_dev_info(img, {}, {"pci/0000:0c:00.0": "255.255.65535"})


def pcie_link_gone(img: Image) -> None:
    """``0000:8d:00.0`` fell off its link: its Link Status register reads all ones, which the kernel
    prints as ``current_link_speed`` Unknown and ``current_link_width`` 63 (speed field 0xf, width 0x3f)."""
    degradation_healthy(img)
    pcie_files(img, PF1_DIR, speed="Unknown", width=63)


def rdma_gone(img: Image) -> None:
    """mlx5_ib not loaded after a driver upgrade: no RDMA device (``/sys/class/infiniband`` and each PF's
    ``infiniband/`` gone), ``rdma link show`` lists nothing; ib_core stays (``rdma system show`` answers)."""
    for rel in [r for r in img.links if "/infiniband" in r]:
        del img.links[rel]
    for rel in [r for r in img.files if "/infiniband/" in r or r.endswith("/infiniband")]:
        del img.files[rel]
    img.set_jcmd(["rdma", "-j", "link", "show"], [])


def enable_roce(img: Image, value: bool) -> None:
    """``devlink -j dev param show <PF> name enable_roce`` of both rail PFs (generic, driverinit; kernel
    mlx5 devlink.rst "Read RoCE enablement state")."""
    for handle in ("pci/0000:0c:00.0", "pci/0000:8d:00.0"):
        img.set_jcmd(["devlink", "-j", "dev", "param", "show", handle, "name", "enable_roce"],
                     {"param": {handle: [{"name": "enable_roce", "type": "generic",
                                          "values": [{"cmode": "driverinit", "value": value}]}]}})


def rdma_gone_roce(img: Image) -> None:
    """No RDMA naming rule (the site names only its netdevs); the rail PFs are mlx5 with RoCE enabled."""
    rdma_gone(img)
    del img.files[RDMA_RULES]
    enable_roce(img, True)


def rdma_absent_roce_off(img: Image) -> None:
    """No RDMA naming rule, no RDMA device, RoCE disabled on the rail PFs: nothing expects RDMA."""
    rdma_gone(img)
    del img.files[RDMA_RULES]
    enable_roce(img, False)


def _gpu(img: Image, parent: str, bdf: str, numa: int) -> None:
    """An H100 SXM5 function (10de:2330, 3D controller) at ``parent/bdf`` in the PCIe tree."""
    base = f"fs/sys/devices/{parent}/{bdf}"
    for name, value in (("vendor", "0x10de"), ("device", "0x2330"), ("class", "0x030200"),
                        ("numa_node", str(numa)), ("current_link_speed", "32.0 GT/s PCIe"),
                        ("current_link_width", "16")):
        img.files[f"{base}/{name}"] = f"{value}\n".encode()
    img.links[f"fs/sys/bus/pci/devices/{bdf}"] = "../../../devices/" + parent + "/" + bdf


def _numa(img: Image, bdf: str, numa: int) -> None:
    img.write(f"/sys/bus/pci/devices/{bdf}/numa_node", f"{numa}\n")


def nvidia_modules(img: Image, peermem: bool = True, taint: str = "PO") -> None:
    img.files["fs/sys/module/nvidia/version"] = f"{DRIVER_VERSION}\n".encode()
    img.files["fs/sys/module/nvidia/taint"] = f"{taint}\n".encode()
    if peermem:
        img.files["fs/sys/module/nvidia_peermem/version"] = f"{DRIVER_VERSION}\n".encode()


# HGX H100: each ConnectX-7 rail sits with one GPU below a PCIe switch (a Broadcom PEX890xx on the
# baseboard): root port -> switch upstream port -> two downstream ports -> the GPU and the NIC.
HGX_RAIL0 = "pci0000:08/0000:08:01.0/0000:09:00.0"
HGX_RAIL1 = "pci0000:88/0000:88:01.0/0000:89:00.0"


def hgx_pix(img: Image) -> None:
    move_pci(img, {"pci0000:0b/0000:0b:01.0/0000:0c:00": f"{HGX_RAIL0}/0000:0a:01.0/0000:0c:00",
                   "pci0000:8c/0000:8c:01.0/0000:8d:00": f"{HGX_RAIL1}/0000:8a:01.0/0000:8d:00"})
    _gpu(img, f"{HGX_RAIL0}/0000:0a:00.0", "0000:0b:00.0", 0)
    _gpu(img, f"{HGX_RAIL1}/0000:8a:00.0", "0000:8b:00.0", 1)
    for bdf, numa in (("0000:0c:00.0", 0), ("0000:0c:00.1", 0), ("0000:8d:00.0", 1), ("0000:8d:00.1", 1)):
        _numa(img, bdf, numa)
    nvidia_modules(img)


def peermem_lost(img: Image) -> None:
    hgx_pix(img)
    del img.files["fs/sys/module/nvidia_peermem/version"]


def open_modules_dmabuf(img: Image) -> None:
    hgx_pix(img)
    del img.files["fs/sys/module/nvidia_peermem/version"]
    img.files["fs/sys/module/nvidia/taint"] = b"OE\n"


def phb_sys(img: Image) -> None:
    """Rail 0's NIC and the one GPU on two root ports of one host bridge (PHB); rail 1's NIC on the
    other socket's host bridge (SYS)."""
    move_pci(img, {"pci0000:0b/0000:0b:01.0/0000:0c:00": "pci0000:08/0000:08:01.0/0000:0c:00"})
    _gpu(img, "pci0000:08/0000:08:03.0", "0000:0b:00.0", 0)
    for bdf, numa in (("0000:0c:00.0", 0), ("0000:0c:00.1", 0), ("0000:8d:00.0", 1), ("0000:8d:00.1", 1)):
        _numa(img, bdf, numa)
    nvidia_modules(img)


def mtu_rail1(img: Image) -> None:
    img.update_link("net_rail1", mtu=1500)


def mtu_management_only(img: Image) -> None:
    img.update_link("ens7f0np0", mtu=1500)
    img.update_link("ens7f1np1", mtu=9216)


def inbox_driver(img: Image) -> None:
    """The DOCA driver pod ended and put the inbox driver back: no module version, the kernel release
    in ethtool -i, a new srcversion."""
    kernel = img.read("/proc/sys/kernel/osrelease").strip()
    set_driver(img, version=kernel)
    del img.files[img.resolve("/sys/module/mlx5_core/version")]
    img.files["fs/sys/module/mlx5_core/srcversion"] = b"8A1F1D7E2C3B4A5968776655\n"


def mlnx_ofed_driver(img: Image) -> None:
    set_driver(img, version="5.8-1.0.1.1")


def conflict_function(img: Image) -> None:
    """A site file names rail 1's function eth5 too; udev applies the later file, so the netdev is eth5."""
    rename_netdev(img, "net_rail1", "eth5")
    rename_netdev(img, "net_rail1_0", "eth5_0")
    img.files[f"{RULES_DIR}/70-persistent-net.rules"] = (
        b'SUBSYSTEM=="net", ACTION=="add", KERNELS=="0000:8d:00.0", NAME="eth5"\n')


def conflict_name(img: Image) -> None:
    """The operator's net rules give net_rail0 to both functions (a template rendered with one rail id):
    the second rename fails and rail 1's uplink keeps its kernel name."""
    rename_netdev(img, "net_rail1", "enp141s0f0np0")
    rename_netdev(img, "net_rail1_0", "enp141s0f0npf0vf0")
    text = img.files[NET_RULES].decode()
    img.files[NET_RULES] = text.replace('NAME="net_rail1"', 'NAME="net_rail0"').encode()


def resources_lost_event(img: Image) -> None:
    set_events(img, [{"ts": ENDED_AT - 120, "code": "RailResourcesLost", "severity": "critical",
                      "subject": "nvidia.com/rail1", "message": "nvidia.com/rail1: allocatable dropped to 0 on "
                      "gpu-node-017 (was 1): the device plugin lost the rails",
                      "evidence": {"before": 1, "after": 0, "node": "gpu-node-017"}}])


HGX_ORIGIN = ("Hand-made in the shape of an HGX H100 node: one ConnectX-7 rail per GPU (the NVIDIA DGX H100 User "
              "Guide, 1.2.3 \"Network Modules\", pairs each ConnectX-7 with one GPU), each pair below one PCIe switch "
              "(root port, the switch's upstream port, two downstream ports: the GPU 10de:2330 class 0x030200 on one, "
              "the NIC on the other), which `nvidia-smi topo -m` shows as PIX (NVML's NVML_TOPOLOGY_SINGLE: one PCIe "
              "switch); two of the eight pairs kept, one per socket. Bus numbers are this image's, values "
              "illustrative. Module files as an R570 driver installs them: `/sys/module/nvidia/{version,taint}`, "
              "`/sys/module/nvidia_peermem/version`.")


NET_RULES_PATH = "/etc/udev/rules.d/10-nic-net-interface-naming.rules"
OPTICS_ORIGIN = ("The `ethtool -m` text is a real module's, from `tests/fixtures/public/optics/` (see its SOURCES.md: "
                 "github.com/robinchrist/100G-CWDM4-docs for the QSFP28 dumps, Ido Schimmel's ethtool CMIS patch mail "
                 "for the QSFP-DD lines); the edits are named below.")


# -- LLDP neighbours (the lldp source) -------------------------------------------------------------

LLDPCLI_ARGV = ["lldpcli", "-f", "json", "show", "neighbors", "details"]
CABLING = "tests/fixtures/cabling/RECONSTRUCTED-gpu-node-017.csv"
#: a real leaf's LLDPDU: a Big Cloud Fabric switch (leaf0b, port leaf0b-eth10) with PFC on priority 4,
#: from tcpdump's test suite (tests/fixtures/public/lldp/SOURCES.md)
BCF_PCAP = HERE.parents[1] / "tests/fixtures/public/lldp/tcpdump-lldp-app-priority.pcap"


def _tlv(kind: int, value: bytes) -> bytes:
    return ((kind << 9) | len(value)).to_bytes(2, "big") + value


def lldp_frame(mac: str, system: str, port: str, descr: str, mfs: int | None = None,
               pfc: tuple[int, ...] | None = None, mgmt: str | None = None) -> bytes:
    """An LLDP frame as a Spectrum leaf running Cumulus / NVUE sends it (chassis MAC, port ID ifname, TTL 120,
    port description, system name, management IPv4, 802.3 MFS, 802.1Qaz PFC): built byte by byte."""
    src = bytes.fromhex(mac.replace(":", ""))
    body = _tlv(1, b"\x04" + src) + _tlv(2, b"\x05" + port.encode()) + _tlv(3, (120).to_bytes(2, "big"))
    body += _tlv(4, descr.encode()) + _tlv(5, system.encode())
    if mgmt:
        body += _tlv(8, bytes([5, 1, *(int(x) for x in mgmt.split("."))]) + b"\x02\x00\x00\x00\x01\x00")
    if mfs is not None:
        body += _tlv(127, b"\x00\x12\x0f\x04" + mfs.to_bytes(2, "big"))
    if pfc is not None:
        body += _tlv(127, b"\x00\x80\xc2\x0b" + bytes([0x08, sum(1 << p for p in pfc)]))
    return bytes.fromhex("0180c200000e") + src + b"\x88\xcc" + body + _tlv(0, b"")


def pcap_frames(path: Path) -> list[bytes]:
    data = path.read_bytes()
    end = "little" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else "big"
    out, off = [], 24
    while off + 16 <= len(data):
        incl = int.from_bytes(data[off + 8:off + 12], end)
        out.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return out


def set_frames(img: Image, frames: dict[str, bytes], age_s: float = 12.0) -> None:
    """What the passive listener (--lldp listen) heard, as a capture records it: lldp/frames.json."""
    from agent.readers.lldp import encode_frames

    since = {k: float(ENDED_AT - 3600) for k in ("net_rail0", "net_rail1")}
    img.files["lldp/frames.json"] = encode_frames({k: (ENDED_AT - age_s, v) for k, v in frames.items()}, since)


def _neighbour(netdev: str, mac: str, system: str, port: str, descr: str, mfs: int, mgmt: str,
               pfc: tuple[int, ...] | None = (3,)) -> dict:
    # lldpd 1.0.16's JSON shape (tests/fixtures/public/lldp/RECONSTRUCTED-lldpcli-1.0.16-details-two-neighbours.json)
    port_doc: dict[str, Any] = {"id": {"type": "ifname", "value": port}, "descr": descr, "ttl": "120", "mfs": str(mfs)}
    doc: dict[str, Any] = {"via": "LLDP", "rid": "1", "age": "0 day, 00:00:12",
                           "chassis": {system: {"id": {"type": "mac", "value": mac}, "mgmt-ip": mgmt, "mgmt-iface": "2"}},
                           "port": port_doc}
    if pfc is not None:
        doc["unknown-tlvs"] = {"unknown-tlv": [{"oui": "00,80,C2", "subtype": "11", "len": "2",
                                                "value": f"08,{sum(1 << p for p in pfc):02X}"}]}
    return {netdev: doc}


def set_lldpcli(img: Image, *neighbours: dict) -> None:
    img.set_jcmd(LLDPCLI_ARGV, {"lldp": {"interface": list(neighbours)}})


def lldp_peers_healthy(img: Image) -> None:
    set_lldpcli(img, _neighbour("net_rail0", "1c:34:da:5a:10:00", "leaf-02", "swp1", "to gpu-node-017 rail 0", 9216,
                                "10.20.0.12"),
                _neighbour("net_rail1", "1c:34:da:5a:10:00", "leaf-02", "swp2", "to gpu-node-017 rail 1", 9216,
                           "10.20.0.12"))


def rail_peer_moved(img: Image) -> None:
    set_lldpcli(img, _neighbour("net_rail0", "1c:34:da:5a:10:00", "leaf-02", "swp1", "to gpu-node-017 rail 0", 9216,
                                "10.20.0.12"),
                _neighbour("net_rail1", "1c:34:da:5a:30:00", "leaf-03", "swp2", "to gpu-node-031 rail 1", 9216,
                           "10.20.0.13"))


def lldp_peer_small_mfs(img: Image) -> None:
    set_lldpcli(img, _neighbour("net_rail0", "1c:34:da:5a:10:00", "leaf-02", "swp1", "to gpu-node-017 rail 0", 9216,
                                "10.20.0.12"),
                _neighbour("net_rail1", "1c:34:da:5a:10:00", "leaf-02", "swp2", "to gpu-node-017 rail 1", 4114,
                           "10.20.0.12"))


def lldp_listen_bcf_pfc(img: Image) -> None:
    leaf = next(f for f in pcap_frames(BCF_PCAP) if f[12:14] == b"\x88\xcc")
    set_frames(img, {"net_rail0": lldp_frame("1c:34:da:5a:10:00", "leaf-02", "swp1", "to gpu-node-017 rail 0", 9216,
                                             (3,), "10.20.0.12"),
                     "net_rail1": leaf})


def lldp_listen_hostile(img: Image) -> None:
    """Frames a hostile or broken sender could put on a rail: a system name with terminal escapes and a
    bidirectional override (kept, escaped), and a TLV whose length runs past the frame (refused, named)."""
    bad = lldp_frame("02:00:00:00:66:66", "leaf\x1b[2J\u202e-evil", "swp\x07", "9" * 300, 9216, (3,))
    # a system name TLV that says 400 bytes where 7 are left
    cut = lldp_frame("02:00:00:00:66:67", "leaf-09", "swp3", "y")[:-2] + ((5 << 9) | 400).to_bytes(2, "big") + b"leaf-09"
    set_frames(img, {"net_rail0": bad, "net_rail1": cut})


@dataclass(frozen=True)
class Spec:
    name: str
    base: str  # "2rail" | "4rail"
    mutations: tuple[Callable[[Image], None], ...]
    findings: tuple[tuple[str, str, str], ...]
    what: str  # what was changed, for the README
    args: tuple[str, ...] = ()
    #: rails[] rows (rail, plane, netdev, rdma, pci, oper, rdma_state) the image must give, when stated
    rails: tuple[tuple[object, ...], ...] = ()
    #: (source, reason) entries that must be in "unavailable", when stated
    unavailable: tuple[tuple[str, str], ...] = ()
    #: where the image's real shape comes from, for the README (public sources)
    origin: str = ""


IMAGES: tuple[Spec, ...] = (
    Spec("spectrumx-4rail-switchdev-healthy", "4rail", (), (),
         "Rails 2 and 3 (`0000:1a:00.0`, `0000:9b:00.0`) cloned from rail 0, each with its own switch id, "
         "MACs, GUID, VF, representor, devlink instances (`auxiliary/mlx5_core.eth.4`-`7`) and naming rules.",
         ("--expect-eswitch-mode", "switchdev", "--expect-esw-multiport", "false", "--expect-rdma-netns", "exclusive")),
    Spec("rail-missing", "2rail", (rail_missing,), (("RailMissing", "critical", "net_rail1"),),
         "The uplink netdev `net_rail1` is gone from every door (netlink, sysfs, ethtool, devlink port, rdma link "
         "netdev); its PCI function, VF, representor and RDMA device remain."),
    Spec("rail-name-mismatch", "2rail", (lambda i: rename_netdev(i, "net_rail1", "enp141s0f0np0"),),
         (("RailNameMismatch", "critical", "net_rail1"),),
         "The uplink of `0000:8d:00.0` kept its kernel name `enp141s0f0np0` (the udev rename did not apply); "
         "the representor `net_rail1_0` still matches the rule's PCI function and must not count."),
    Spec("rail-template-invalid", "2rail", (template_invalid,),
         (("RailTemplateInvalid", "critical", NET_RULES_PATH),),
         "The net rules name `net_rail0_plane0` / `net_rail1_plane0` (16 characters, above IFNAMSIZ), so the "
         "netdevs kept their kernel names `enp12s0f0np0` / `enp141s0f0np0`: one finding for the rules file, "
         "no per-rail mismatch."),
    Spec("rail-link-down", "2rail", (lambda i: link_down(i, "net_rail0", "rdma_rail0"),),
         (("RailLinkDown", "critical", "net_rail0"), ("RdmaLinkDown", "critical", "rdma_rail0")),
         "`net_rail0` lost carrier (operstate DOWN, carrier 0, speed -1, one more carrier loss) and its RDMA "
         "port `rdma_rail0/1` is DOWN / DISABLED."),
    Spec("rdma-link-down", "2rail",
         (lambda i: rdma_down(i, "rdma_rail1", "DOWN", "POLLING", "1: DOWN", "2: Polling"),),
         (("RdmaLinkDown", "critical", "rdma_rail1"),),
         "`rdma_rail1/1` is DOWN / POLLING while `net_rail1` stays up."),
    Spec("rdma-netns-unexpected", "2rail", (netns_shared,), (("RdmaNetnsModeUnexpected", "warning", "node"),),
         "ib_core runs in `shared` RDMA netns mode (`rdma system show`, `netns_mode` Y) although "
         "`/etc/modprobe.d/ib_core.conf` asks for `netns_mode=0` (exclusive) and exclusive is expected.",
         ("--expect-rdma-netns", "exclusive")),
    Spec("representor-stale", "2rail", (representor_stale,),
         (("RepresentorStale", "warning", "pci/0000:0c:00.0"), ("RepresentorStale", "warning", "pci/0000:8d:00.0")),
         "Representors `net_rail1_1`, `net_rail1_2` (`pf0vf1`, `pf0vf2`, with devlink ports) of VFs that no "
         "longer exist (`sriov_numvfs` 1), and an OVS port `net_rail0_4` whose netdev is gone (ifindex 0, "
         "ofport -1, error); the OVS record replaces the base image's skipped `ovs-vsctl` item."),
    Spec("eswitch-mode-unexpected", "2rail", (eswitch_legacy,),
         (("EswitchModeUnexpected", "warning", "pci/0000:8d:00.0"),),
         "PF `0000:8d:00.0` (1 VF) is in eswitch mode `legacy` (its representor is gone) while switchdev is "
         "expected.", ("--expect-eswitch-mode", "switchdev")),
    Spec("esw-multiport-torn", "2rail", (multiport_torn,),
         (("EswMultiportUnexpected", "warning", "pci/0000:8d:00.0"),),
         "The two rail PFs made the two ports of one NIC (one `phys_switch_id` and system image GUID); "
         "`esw_multiport` reads true on `pci/0000:8d:00.0` and false on the NIC's lowest PF (torn LAG state)."),
    Spec("pfc-disabled", "2rail", (pfc_disabled,), (("PfcDisabled", "warning", "net_rail1"),),
         "`ethtool -S net_rail1` has no prio-3 pause counters (PFC off on the lossless priority)."),
    Spec("global-pause-enabled", "2rail", (global_pause,), (("GlobalPauseEnabled", "warning", "net_rail0"),),
         "`ethtool -S net_rail0` has the `*_global_pause*` counters of 802.3x link pause (the CX-4 Lx public "
         "sample's names)."),
    Spec("pfc-storm-counters", "2rail", (storm_counters,), (("PfcStorm", "info", "net_rail0"),),
         "`tx_pause_storm_error_events` 3 (warning events 12) on `net_rail0`, cumulative: no recorder, so info."),
    Spec("pfc-storm-recorder", "2rail", (storm_recorder,), (("PfcStorm", "critical", "net_rail0"),),
         "As pfc-storm-counters, plus a 90 s `recorder.jsonl`: over the last 45 s `net_rail0` sent prio-3 "
         "pause 80 % of the time and the storm watchdog fired twice 10 s before the capture."),
    Spec("lossless-drops-counters", "2rail", (drops_counters,), (("LosslessDrops", "info", "net_rail1"),),
         "`rx_prio3_buf_discard` 1234 on `net_rail1`, cumulative: info."),
    Spec("lossless-drops-recorder", "2rail", (drops_recorder,), (("LosslessDrops", "critical", "net_rail1"),),
         "As lossless-drops-counters, plus a 90 s `recorder.jsonl` in which `rx_prio3_buf_discard` rose by 400 "
         "20 s before the capture."),
    Spec("link-flapping-events", "2rail", (flap_events,), (("LinkFlapping", "warning", "net_rail1"),),
         "`events.json` holds a LinkFlapping event on `net_rail1` 95 s before the capture (inside the 15 min "
         "window) and an older one on `net_rail0` an hour before (outside: not a finding)."),
    Spec("link-flapping-recorder", "2rail", (flap_recorder,), (("LinkFlapping", "warning", "net_rail0"),),
         "A 90 s `recorder.jsonl` in which `carrier_down_count` of `net_rail0` rose three times (70, 40 and 15 s "
         "before the capture)."),
    Spec("config-flapping-events", "2rail", (config_flap_events,),
         (("ConfigFlapping", "warning", "pci/0000:8d:00.0"),),
         "`events.json` holds a ConfigFlapping event: `sriov_numvfs` of `0000:8d:00.0` went 1 -> 0 -> 1 -> 0 -> 1."),
    Spec("firmware-skew", "2rail", (firmware_skew,), (("FirmwareSkew", "info", "node"),),
         "`net_rail1` runs firmware 28.43.1014 (ethtool -i, `fw_ver`), `net_rail0` 28.42.1000, same model MT4129."),
    Spec("driver-kernel-beyond-abi", "2rail", (kernel_beyond,), (("DriverKernelUnvalidated", "warning", "node"),),
         "DOCA driver 26.01-0.5.2 on kernel 6.8.0-106-generic, above the validated 6.8.0-100 of the shipped "
         "table's row."),
    Spec("driver-kernel-unknown-line", "2rail", (kernel_unknown,), (("DriverKernelUnvalidated", "info", "node"),),
         "DOCA driver 26.01-0.5.2 on kernel 6.11.0-29-generic, a kernel line the table has no row for."),
    Spec("site-rules-rename-failed", "2rail", (site_rules,),
         (("RailNameMismatch", "critical", "eth_rail0"), ("RdmaNameMismatch", "critical", "roce_rail1")),
         "The operator's two rules files are gone; `/etc/udev/rules.d/70-persistent-net.rules` names the rails "
         "`eth_rail0` / `roce_rail0` (`0000:0c:00.0`) and `eth_rail1` / `roce_rail1` (`0000:8d:00.0`) and the E810 "
         "storage ports `eth_sec0` / `eth_sec1` (renamed from `ens7f0np0` / `ens7f1np1`, not rails). Rail 0's netdev "
         "kept its kernel name `enp12s0f0np0` (its RDMA device was renamed `roce_rail0`); rail 1's netdev is "
         "`eth_rail1` but its RDMA device kept `mlx5_1` (the `rdma_rename` failed) on every door: sysfs, "
         "`rdma link`.",
         rails=((0, None, "enp12s0f0np0", "roce_rail0", "0000:0c:00.0", "up", "ACTIVE"),
                (1, None, "eth_rail1", "mlx5_1", "0000:8d:00.0", "up", "ACTIVE")),
         origin="The rules file's lines, names and key order are those github.com/schmaustech/gpu-nic-rail-mapping "
                "(README) generates for a Dell XE9680 H200 node (BlueField-3 rails `eth_rail<N>` / `roce_rail<N>`, "
                "storage `eth_sec<N>` / `roce_sec<N>`); the PCI addresses are this image's."),
    Spec("azure-domain-rdma-rules-healthy", "2rail", (azure_rules,), (),
         "PCI functions moved to domains `0101` / `0102` (`0101:00:00.0`, `0102:00:00.0` and their VFs, on every "
         "door: sysfs paths, devlink handles, command slugs); the operator's files are gone and "
         "`/etc/udev/rules.d/99-rdma-persistent-naming.rules` names the RDMA devices `mlx5_ib0` / `mlx5_ib1` "
         "(applied); the netdevs carry systemd's domain names `enP257p0s0np0` / `enP258p0s0np0`.",
         rails=((0, None, "enP257p0s0np0", "mlx5_ib0", "0101:00:00.0", "up", "ACTIVE"),
                (1, None, "enP258p0s0np0", "mlx5_ib1", "0102:00:00.0", "up", "ACTIVE")),
         origin="The rules file is Azure's (learn.microsoft.com, HBv5-series VM sizes, \"Known Issues with IB RDMA "
                "and NUMA Node Affinity\": `ACTION==\"add\", SUBSYSTEMS==\"pci\", KERNELS==\"0101:00:00.0\", "
                "PROGRAM=\"rdma_rename %k NAME_FIXED mlx5_ib0\"`), cut to two devices. Azure's RDMA NICs are "
                "InfiniBand VFs; here the shape (domain, RDMA-only rules) sits on the base image's RoCE rails."),
    Spec("rdma-link-iproute2-old-text", "2rail", (old_rdma_text,), (("RdmaLinkDown", "critical", "rdma_rail1"),),
         "`rdma -j link show` answers in the text of iproute2 before 5.5 (a tool that ignores `-j`), rail 1's "
         "port DOWN / POLLING (sysfs too); `rdma system show` fails as a tool without `system` does (rc 1, "
         "`Unknown object 'system'.`), so the netns mode comes from `ib_core`'s `netns_mode`.",
         rails=((0, None, "net_rail0", "rdma_rail0", "0000:0c:00.0", "up", "ACTIVE"),
                (1, None, "net_rail1", "rdma_rail1", "0000:8d:00.0", "up", "DOWN")),
         unavailable=(("rdma system", "rdma -j system show: exit 1: Unknown object 'system'."),),
         origin="The line format is iproute2's rdma/link.c before 5.5: `link_parse_cb` printed "
                "`pr_out(\"%u/%u: %s: \", idx, port, name)` with `name` = `<dev>/<port>`, then `state X `, "
                "`physical_state X `, `netdev X ` (github.com/iproute2/iproute2 history of rdma/link.c)."),
    Spec("rdma-link-iproute2-old-json", "2rail", (old_rdma_json,), (("RdmaLinkDown", "critical", "rdma_rail1"),),
         "`rdma -j link show` answers in the JSON of iproute2 before 5.5 (`\"ifname\": \"rdma_rail1/1\"`), rail 1's "
         "port DOWN / POLLING; `rdma system show` fails as in rdma-link-iproute2-old-text.",
         rails=((0, None, "net_rail0", "rdma_rail0", "0000:0c:00.0", "up", "ACTIVE"),
                (1, None, "net_rail1", "rdma_rail1", "0000:8d:00.0", "up", "DOWN")),
         origin="The JSON keys and their order are iproute2's rdma/link.c before 5.5: `ifindex`, `port`, then "
                "`ifname` = the same `<dev>/<port>` string as the text form, `state`, `physical_state`, `netdev`, "
                "`netdev_index` (github.com/iproute2/iproute2 history of rdma/link.c)."),
    Spec("connectx8-smi-device-healthy", "2rail", (cx8_smi,), (),
         "Rail 0's function `0000:0c:00.0` (hca_type MT4131, ConnectX-8) carries a second RDMA device `smi1` "
         "(InfiniBand link layer, port 1 INIT / LinkUp, no netdev) beside `rdma_rail0`, in sysfs and in "
         "`rdma link`. The rail's RDMA device is `rdma_rail0` (its port's netdev is the rail's); `smi1` is never "
         "judged.",
         rails=((0, None, "net_rail0", "rdma_rail0", "0000:0c:00.0", "up", "ACTIVE"),
                (1, None, "net_rail1", "rdma_rail1", "0000:8d:00.0", "up", "ACTIVE")),
         origin="ConnectX-8 SMI devices are made with `rdma dev add smi<N> type SMI parent mlx5_<N>` (one per "
                "ConnectX-8, named `smi<N>` by public cluster scripts); the sysfs values are the base image's."),
    Spec("udev-rule-malformed-line", "2rail", (malformed_rule,), (("RailRuleUnreadable", "warning", NET_RULES_PATH),),
         "Line 5 of the operator's net rules file says `KERNELS==\"0000:s2:00.0\"` (not a PCI function): it is "
         "a RailRuleUnreadable finding on the rules file and is listed under unavailable with its file and line; "
         "rail 1 is still named by its RDMA rule.",
         rails=((0, None, "net_rail0", "rdma_rail0", "0000:0c:00.0", "up", "ACTIVE"),
                (1, None, "net_rail1", "rdma_rail1", "0000:8d:00.0", "up", "ACTIVE")),
         unavailable=(("udev rules", f"{NET_RULES_PATH} line 5: KERNELS==\"0000:s2:00.0\" is not a PCI function "
                                     "address"),)),

    Spec("nic-health-fw-fatal", "2rail",
         (lambda i: set_health(i, {("pci/0000:0c:00.0", "fw_fatal"): {"state": "error", "error": 1, "recover": 0}}),),
         (("NicHealthError", "critical", "pci/0000:0c:00.0"),),
         "`devlink -j health show`: the `fw_fatal` reporter of `pci/0000:0c:00.0` is in state `error` (1 error, "
         "not recovered); every other reporter healthy."),
    Spec("nic-health-port-error", "2rail",
         (lambda i: set_health(i, {("auxiliary/mlx5_core.eth.1/65535", "tx"): {"state": "error", "error": 4,
                                                                             "recover": 3}}),),
         (("NicHealthError", "warning", "pci/0000:8d:00.0"),),
         "The `tx` reporter of the uplink port `auxiliary/mlx5_core.eth.1/65535` (kernel >= 6.7: the PF's nested "
         "auxiliary instance) is in state `error`; it maps back to `pci/0000:8d:00.0` through `nested_devlink`."),
    Spec("nic-health-recovered", "2rail",
         (lambda i: set_health(i, {("auxiliary/mlx5_core.eth.0/65535", "rx"): {"error": "2", "recover": "2"}}),),
         (("NicHealthError", "info", "pci/0000:0c:00.0"),),
         "The `rx` reporter of `net_rail0`'s uplink port is healthy again after 2 errors and 2 recoveries since "
         "the driver loaded (counts printed as strings, as old iproute2 does)."),
    Spec("nic-health-vf-reporter", "2rail",
         (lambda i: set_health(i, {}, {"pci/0000:0c:00.1": [_reporter("vnic", "error", 5, 0)],
                                       "auxiliary/mlx5_core.eth.2/131071": [_reporter("tx", "error", 2, 0)],
                                       "pci/0000:0c:00.0/1": [{"reporter": "rx", "error": 7}]}),),
         (),
         "Traps, none judged: reporters in `error` on the VF `pci/0000:0c:00.1` and on its nested instance "
         "`auxiliary/mlx5_core.eth.2` (a VF's, not a rail PF's), and a port reporter of a rail PF without a "
         "state. Every rail PF reporter is healthy."),

    Spec("degradation-sources-healthy", "2rail", (degradation_healthy,), (),
         "Every degradation source read and in range: `ethtool -m` of both rails answers with a real QSFP28 dump "
         "(in range of its own thresholds), both PFs and their upstream ports read PCIe Gen5 x16 with zero AER "
         "totals, the mlx5 hwmon ASIC sensor reads 62 °C of a 105 °C crit.",
         origin=OPTICS_ORIGIN),
    Spec("link-degrading-counters", "2rail",
         (degradation_healthy, lambda i: set_counters(i, "net_rail0", rx_pcs_symbol_err_phy=17)),
         (("LinkDegrading", "info", "net_rail0"),),
         "`rx_pcs_symbol_err_phy` 17 on `net_rail0`, cumulative and no recorder: info with the count."),
    Spec("link-degrading-ber-recorder", "2rail", (ber_recorder,), (("LinkDegrading", "critical", "net_rail1"),),
         "A 300 s `recorder.jsonl` of the PHY counters: `net_rail1` corrected 5e-4 of its 1.2e14 received bits "
         "(at / above --ber-critical, the RS(544,514) FEC's 2.4e-4 limit: critical), 90 % of the errors on lane 2; "
         "no uncorrectable symbol error."),
    Spec("link-degrading-ber-warning-recorder", "2rail", (ber_warning_recorder,),
         (("LinkDegrading", "warning", "net_rail1"),),
         "A 300 s `recorder.jsonl` of the PHY counters: `net_rail1` corrected 2e-5 of its received bits, above "
         "--ber-warning (1e-5) and below the FEC's 2.4e-4 limit: a warning while FEC still hides it. Lane 1 "
         "carries 99.6 % of the corrected bits and lanes 2-3 read 0, the lane split of the 2-lane ConnectX-6 Dx "
         "in Dell KB 000286734 (`tests/fixtures/public/phy/`)."),
    Spec("link-degrading-symbol-recorder", "2rail", (symbol_recorder,), (("LinkDegrading", "critical", "net_rail0"),),
         "A 120 s `recorder.jsonl`: `rx_pcs_symbol_err_phy` of `net_rail0` rose by 40 twenty seconds before the "
         "capture (errors FEC could not correct)."),
    Spec("link-idle-too-few-bits", "2rail", (idle_link,), (),
         "Trap: `net_rail0` came up 2 s before the capture; its recorder lines show a corrected-bit ratio of 1e-3 "
         "over 8e11 bits, below the 1e12 bits a ratio is judged over: no finding."),
    Spec("optics-out-of-range-warning", "2rail", (optics_warning,), (("OpticsOutOfRange", "warning", "net_rail1"),),
         "The module of `net_rail1` reads 0.0501 mW on RX lane 3, below its own low warning threshold (0.0631 mW) "
         "and above its low alarm (0.0251 mW).", origin=OPTICS_ORIGIN),
    Spec("optics-out-of-range-alarm", "2rail", (optics_alarm,), (("OpticsOutOfRange", "critical", "net_rail0"),),
         "The module of `net_rail0` is the real dump of a ConnectX-4 holding a foreign-OUI module's laser off: "
         "bias 0 mA and TX / RX power 0.0001 mW on every lane, below the module's low alarm thresholds.",
         origin=OPTICS_ORIGIN),
    Spec("optics-module-without-thresholds", "2rail", (optics_no_thresholds,), (),
         "Trap: `net_rail1`'s QSFP-DD (CMIS) module prints no thresholds; one of its RX lanes reads 0.0001 mW. "
         "Thresholds are the module's own, never ours: not judged.", origin=OPTICS_ORIGIN),
    Spec("optics-lanes-not-in-use-healthy", "2rail", (optics_lanes_not_in_use,), (),
         "Trap: `net_rail1`'s QSFP+ SR4 (a real mlx4 dump) uses lane 1 only: lanes 2-4 read 0 mA, 0 mW TX and RX "
         "with every flag Off, below the module's low alarm thresholds; its TX power thresholds are all 0 (none "
         "programmed). Only lanes in use are judged, and the module's flags, all Off, decide: no finding.",
         unavailable=(("ethtool -m net_rail1", "the module's tx_power_mw thresholds are all 0 (none programmed): "
                       "that quantity is not judged"),), origin=OPTICS_ORIGIN),
    Spec("optics-400g-dr4-4-of-8-lanes-healthy", "2rail", (optics_dr4_cool,), (),
         "Trap: `net_rail1` holds a 400G DR4 QSFP-DD (CMIS, a real dump) that uses 4 of the 8 lanes ethtool prints: "
         "lanes 5-8 read 0 mA and 0 mW with every flag Off, below its low alarms. Its temperature is set to 55.49 °C "
         "and its temperature warning flag Off (the dump's are 70.49 °C, On). Only lanes in use are judged: no "
         "finding.", origin=OPTICS_ORIGIN),
    Spec("optics-400g-dr4-4-of-8-lanes-warm", "2rail", (optics_dr4_warm,), (("OpticsOutOfRange", "warning", "net_rail1"),),
         "The same 400G DR4 as the dump has it: 70.49 °C with its own module temperature high warning flag On "
         "(threshold 70 °C): a warning led by that flag, lanes 1-4 judged, 5-8 not in use (not critical for "
         "twelve zero readings of unused lanes).", origin=OPTICS_ORIGIN),
    Spec("optics-aoc-far-end-dark", "2rail", (optics_aoc_far_end_dark,),
         (("OpticsOutOfRange", "critical", "net_rail1"), ("RailLinkDown", "critical", "net_rail1"),
          ("RdmaLinkDown", "critical", "rdma_rail1")),
         "`net_rail1` is down; its QSFP56 AOC (`ethtool --json -m`, a real dump of ethtool 6.14 with the far end "
         "down) raises only its RX power low alarm and warning flags on lanes 1-4, RX loss of signal on all: the "
         "finding leads with that flag (no light from the far end), not with its TX bias of 0 mA.",
         origin=OPTICS_ORIGIN),
    Spec("optics-dark-port-link-down", "2rail", (optics_dark_port,),
         (("RailLinkDown", "critical", "net_rail1"), ("RdmaLinkDown", "critical", "rdma_rail1")),
         "Trap: `net_rail1` is down and its QSFP-DD SR8 (`ethtool --json -m`, a real dump of ethtool 6.14) is dark: "
         "bias 0 mA, TX and RX 0.0001 mW on all 8 lanes, RX loss of signal, no flag raised. RailLinkDown says it; "
         "no OpticsOutOfRange for values below the low alarms.", origin=OPTICS_ORIGIN),
    Spec("nic-temperature-high", "2rail", (nic_hot,), (("NicTemperatureHigh", "warning", "pci/0000:8d:00.0"),),
         "The mlx5 hwmon `asic` sensor of `0000:8d:00.0` reads 107 °C, above its own `temp1_crit` 105 °C "
         "(sensor layout of drivers/net/ethernet/mellanox/mlx5/core/hwmon.c, Linux 6.5+)."),
    Spec("pcie-link-degraded", "2rail", (pcie_x8,), (("PcieLinkDegraded", "warning", "pci/0000:0c:00.0"),),
         "`0000:0c:00.0` trained at Gen5 x8 while it and its upstream port `0000:0b:01.0` are x16 capable."),
    Spec("pcie-slower-slot", "2rail", (pcie_slower_slot,), (),
         "Trap: `0000:8d:00.0` runs at 16 GT/s, its own max is 32 GT/s, but its upstream port `0000:8c:01.0` can "
         "give only 16 GT/s: a NIC in a slower slot is evidence, not a finding."),
    Spec("pcie-errors-aer", "2rail", (pcie_fatal,), (("PcieErrors", "warning", "pci/0000:8d:00.0"),),
         "`aer_dev_fatal` of `0000:8d:00.0` says TOTAL_ERR_FATAL 1 and `aer_dev_nonfatal` TOTAL_ERR_NONFATAL 2 "
         "(file layout of drivers/pci/pcie/aer.c)."),
    Spec("pcie-errors-correctable", "2rail", (pcie_correctable,), (("PcieErrors", "info", "pci/0000:0c:00.0"),),
         "`aer_dev_correctable` of `0000:0c:00.0` says TOTAL_ERR_COR 311: cumulative, info."),
    Spec("thermal-kernel-without-hwmon", "2rail", (no_hwmon,), (),
         "Trap: as degradation-sources-healthy but the kernel registers no mlx5 hwmon device (before Linux 6.5): "
         "no NicTemperatureHigh, and `unavailable` says why.",
         unavailable=(("thermal", "no mlx5 hwmon sensors on 0000:0c:00.0, 0000:8d:00.0 (kernel before 6.5, or not "
                                  "mlx5)"),)),
    Spec("rail-map-pci-healthy", "2rail", (rail_map_recorded,), (),
         "The operator's two rules files are gone and no rule names a rail; the netdevs keep systemd's names "
         "`enp12s0f0np0` (`0000:0c:00.0`) and `enp141s0f0np0` (`0000:8d:00.0`), their representors "
         "`eth4` / `eth5`, the RDMA devices `mlx5_0` / `mlx5_1` on every door. The "
         f"manifest records the agent's `--rail-map {RAIL_MAP}`: the replay judges rails 0 and 1 by PCI function.",
         rails=((0, None, "enp12s0f0np0", "mlx5_0", "0000:0c:00.0", "up", "ACTIVE"),
                (1, None, "enp141s0f0np0", "mlx5_1", "0000:8d:00.0", "up", "ACTIVE")),
         origin=SYSTEMD_NAMES),
    Spec("rail-map-function-missing", "2rail", (kernel_names,), (("RailMissing", "critical", "0000:0d:00.0"),),
         "As `rail-map-pci-healthy` without a recorded map; `--rail-map` names rail 1 `0000:0d:00.0`, a function "
         "the node does not have (a map written for another server model): rail 1 is missing, and "
         "`0000:8d:00.0` is no rail.",
         ("--rail-map", "0=0000:0c:00.0,1=0000:0d:00.0"),
         rails=((0, None, "enp12s0f0np0", "mlx5_0", "0000:0c:00.0", "up", "ACTIVE"),
                (1, None, None, None, "0000:0d:00.0", None, None)),
         origin=SYSTEMD_NAMES),
    Spec("management-mlx5-outside-rails", "2rail", (management_mlx5,), (),
         "Trap: the management NIC (`0000:a1:00.0` / `.1`, `ens7f0np0` / `ens7f1np1`) is an SR-IOV capable mlx5 "
         "function that devlink lists and no rule names (as an HGX baseboard's restricted PF): it is no rail, "
         "and no firmware-touching read reaches it (no `ethtool -S` / `-m`, no devlink eswitch / param command for "
         "it is in this image: replay would say `not recorded` if a reader asked)."),
    Spec("firmware-pending-activation", "2rail", (firmware_pending,),
         (("FirmwarePendingActivation", "info", "pci/0000:0c:00.0"),),
         "`devlink -j dev info` of both rail PFs recorded: `pci/0000:0c:00.0` runs 28.42.1000 with 28.43.1014 "
         "stored (flashed, waiting for a reset), `pci/0000:8d:00.0` runs and stores 28.42.1000; the stored "
         "versions differ across the node's NICs (evidence).",
         origin="The JSON shape is mlx5's `devlink dev info` (versions fixed `fw.psid`, running / stored "
                "`fw.version` and `fw`) as iproute2 prints it with `-j`."),
    Spec("firmware-stored-unreadable", "2rail", (firmware_stored_unreadable,),
         (("FirmwareStoredUnreadable", "warning", "pci/0000:0c:00.0"),),
         "`devlink -j dev info` of `pci/0000:0c:00.0` reports stored `fw.version` / `fw` 255.255.65535 while "
         "28.42.1000 runs (the pending image could not be read after a failed flash); `pci/0000:8d:00.0` runs "
         "and stores 28.42.1000. Not a FirmwarePendingActivation: that firmware does not exist.",
         origin="The stored version is what upstream mlx5 commit 10dc35f6a443 prints when the pending image "
                "cannot be read (its commit message, tests/fixtures/public/mlx5/, shows `fw.version 255.255.65535` "
                "under `stored:`); the JSON shape is iproute2's `devlink -j dev info`."),
    Spec("pcie-link-gone", "2rail", (pcie_link_gone,), (("PcieLinkDegraded", "critical", "pci/0000:8d:00.0"),),
         "`0000:8d:00.0` fell off its link: `current_link_speed` Unknown, `current_link_width` 63 (the Link Status "
         "register reads all ones); its max and its upstream port's stay Gen5 x16. Every other degradation source "
         "is read and healthy.",
         origin="x63 as all ones of the width field: Keith Busch on linux-pci, 2020-10-07 "
                "(tests/fixtures/public/pcie/)."),
    Spec("rdma-gone-rules-name-rdma", "2rail", (rdma_gone,),
         (("RailRdmaMissing", "critical", "net_rail0"), ("RailRdmaMissing", "critical", "net_rail1")),
         "The healthy image after a driver upgrade that left mlx5_ib unloaded: `/sys/class/infiniband` and the "
         "PFs' `infiniband/` directories are gone and `rdma -j link show` prints `[]`; the netdevs are up. The "
         "RDMA naming rules still name `rdma_rail0` / `rdma_rail1`."),
    Spec("rdma-gone-mlx5-roce-enabled", "2rail", (rdma_gone_roce,),
         (("RailRdmaMissing", "critical", "net_rail0"), ("RailRdmaMissing", "critical", "net_rail1")),
         "As rdma-gone-rules-name-rdma, and the RDMA naming rules are gone too (a site that names only its "
         "netdevs); both rail PFs are mlx5 with `enable_roce` true (devlink param, driverinit).",
         origin="The `enable_roce` answer is the kernel's mlx5 devlink.rst example (\"Read RoCE enablement "
                "state\") as iproute2 prints it with `-j`."),
    Spec("rdma-absent-roce-disabled", "2rail", (rdma_absent_roce_off,), (),
         "Trap: no RDMA naming rule, no RDMA device and `enable_roce` false on both rail PFs (an Ethernet-only "
         "node): nothing expects RDMA, so no RailRdmaMissing without `--expect-rdma`."),
    Spec("gpudirect-hgx-pix-healthy", "2rail", (hgx_pix,), (),
         "Two H100 GPUs added; each rail PF moved below a PCIe switch it shares with one GPU (rail 0 with "
         "`0000:0b:00.0` on NUMA 0, rail 1 with `0000:8b:00.0` on NUMA 1): `gpu_link` PIX for both; "
         "`nvidia_peermem` loaded beside the proprietary `nvidia` module (taint PO).",
         origin=HGX_ORIGIN),
    Spec("gpudirect-not-ready-peermem-lost", "2rail", (peermem_lost,),
         (("GpuDirectNotReady", "warning", "node"),),
         "As gpudirect-hgx-pix-healthy after a driver upgrade that lost `nvidia_peermem`: none of the three "
         "peer-memory paths NCCL probes exists, and the `nvidia` module is the proprietary one (taint PO), "
         "so no DMA-BUF either.", origin=HGX_ORIGIN),
    Spec("gpudirect-open-modules-dmabuf-healthy", "2rail", (open_modules_dmabuf,), (),
         "Trap: as gpudirect-not-ready-peermem-lost, but the `nvidia` module is the open one (taint OE, no P) "
         "on kernel 6.8: NCCL registers GPU memory through DMA-BUF, ready without `nvidia_peermem`.",
         origin=HGX_ORIGIN),
    Spec("gpu-topology-phb-sys-healthy", "2rail", (phb_sys,), (),
         "One H100 (`0000:0b:00.0`, NUMA 0) on its own root port of rail 0's host bridge `pci0000:08` "
         "(`gpu_link` PHB for rail 0); rail 1's NIC on the other socket's host bridge (NUMA 1): SYS. "
         "`nvidia_peermem` loaded.",
         origin="Two root ports of one host bridge, and a NIC on the other socket, as on 2-socket PCIe servers "
                "without a switch between GPU and NIC; bus numbers illustrative."),
    Spec("mtu-mismatch", "2rail", (mtu_rail1,), (("MtuMismatch", "warning", "net_rail1"),),
         "`net_rail1` is at MTU 1500 (left behind by an upgrade) while `net_rail0` is at 9000: of a tie "
         "the largest MTU is the rails' one."),
    Spec("lldp-peers-healthy", "2rail", (lldp_peers_healthy,), (),
         "Both rails hear their leaf through lldpd (`lldpcli -f json show neighbors details`): `leaf-02` ports `swp1` "
         "and `swp2`, maximum frame size 9216, PFC on priority 3, as the cabling map says.",
         ("--cabling", CABLING)),
    Spec("rail-peer-mismatch", "2rail", (rail_peer_moved,), (("RailPeerMismatch", "warning", "net_rail1"),),
         "`net_rail1`'s LLDP neighbour is `leaf-03` port `swp2` while the cabling map names `leaf-02` `swp2`: a cable "
         "swapped during a repair.", ("--cabling", CABLING)),
    Spec("lldp-peer-mfs-below-mtu", "2rail", (lldp_peer_small_mfs,), (("MtuMismatch", "warning", "net_rail1"),),
         "`net_rail1`'s leaf port advertises an IEEE 802.3 maximum frame size of 4114 bytes (4096 of payload) while "
         "the rail's MTU is 9000, as every rail's: frames above 4096 bytes are dropped at the leaf."),
    Spec("lldp-peer-pfc-mismatch", "2rail", (lldp_listen_bcf_pfc,), (("PfcPeerMismatch", "warning", "net_rail1"),),
         "The passive listener's frames (`lldp/frames.json`): `net_rail1` hears a real leaf's LLDPDU with PFC on "
         "priority 4 (a Big Cloud Fabric leaf, `leaf0b` port `leaf0b-eth10`, tcpdump's test capture) while the rail's "
         "lossless priority 3 has PFC on; `net_rail0`'s leaf (a frame built byte by byte) has PFC on 3.",
         origin="The rail 1 frame is the real capture `tests/fixtures/public/lldp/tcpdump-lldp-app-priority.pcap`."),
    Spec("lldp-frames-hostile-healthy", "2rail", (lldp_listen_hostile,), (),
         "Trap: the listener's frames carry a system name with a terminal escape and a bidirectional override and a "
         "300-character port description (`net_rail0`: kept escaped and cut), and a TLV that says 400 bytes where 7 are left "
         "(`net_rail1`: refused and named under not available). Neither is a fault of the rail.",
         unavailable=(("lldp", "net_rail1: the last LLDP frame (2026-10-28T14:20:21Z) is not a well-formed LLDPDU: "
                               "TLV type 5 says 400 bytes, 7 left in the frame"),)),
    Spec("mtu-management-nic-healthy", "2rail", (mtu_management_only,), (),
         "Trap: the E810 management / storage ports `ens7f0np0` (1500) and `ens7f1np1` (9216) differ from "
         "the rails' 9000, which match `--expect-mtu 9000`: not rails, not judged.",
         ("--expect-mtu", "9000")),
    Spec("driver-not-doca", "2rail", (inbox_driver,), (("DriverNotDoca", "warning", "node"),),
         "The DOCA driver container ended and restored the inbox driver: `/sys/module/mlx5_core/version` is "
         "gone, `ethtool -i` says version 6.8.0-60-generic (the kernel release), `srcversion` changed.",
         ("--expect-driver", "doca")),
    Spec("driver-mlnx-ofed-healthy", "2rail", (mlnx_ofed_driver,), (),
         "Trap: the rails run MLNX_OFED 5.8-1.0.1.1 (an out-of-tree OFED driver, `N.N-x.y.z`), which is not "
         "inbox: no DriverNotDoca with `--expect-driver doca`.", ("--expect-driver", "doca")),
    Spec("rail-naming-conflict-function", "2rail", (conflict_function,),
         (("RailNamingConflict", "critical", "pci/0000:8d:00.0"),),
         "`/etc/udev/rules.d/70-persistent-net.rules` names `0000:8d:00.0` `eth5` while the operator's file "
         "names it `net_rail1`; udev applied the later file, so the uplink is `eth5`. One finding for the "
         "cause (no RailNameMismatch for `net_rail1`)."),
    Spec("rail-naming-conflict-name", "2rail", (conflict_name,),
         (("RailNamingConflict", "critical", "net_rail0"),),
         "The operator's net rules give `net_rail0` to both `0000:0c:00.0` and `0000:8d:00.0`: the second "
         "rename failed and rail 1's uplink kept `enp141s0f0np0`. One finding for the name (no "
         "RailNameMismatch)."),
    Spec("rail-resources-lost-event", "2rail", (resources_lost_event,),
         (("RailResourcesLost", "critical", "nvidia.com/rail1"),),
         "`events.json` holds the agent's RailResourcesLost event for `nvidia.com/rail1` 120 s before the "
         "capture (allocatable 1 -> 0 on the Node object): events within the window are findings."),
)


def exit_status(findings: tuple[tuple[str, str, str], ...]) -> int:
    sev = {f[1] for f in findings}
    return 2 if "critical" in sev else 1 if "warning" in sev else 0


README = """# {name}

A railscope node image (format v1, docs/design.md §2), generated by `tests/images/make_images.py` — do not
edit by hand; change the generator and run it again.

**Where it came from.** {origin}

**What was changed.** {what}

**What `railscope doctor --from` must report** ({args}): {report}; exit status {exit}.
`expected.json` says the same for the table test `tests/unit/test_images.py`.
"""

BASE_ORIGIN = ("The shared hand-made example image `spectrumx-2rail-healthy` (two single-port ConnectX-7, "
               "DOCA 25.10-1.7.1, Ubuntu 6.8.0-60-generic, switchdev with one VF each, PFC on prio 3, "
               "RDMA netns exclusive; formats from the public samples in `tests/fixtures/public/`, values "
               "illustrative), see `../spectrumx-2rail-healthy/README.md`.")


def build(only: set[str] | None = None, out: Path = HERE) -> list[str]:
    base = Image.load(HERE / BASE)
    four = base.copy()
    four_rails(four)
    made = []
    for spec in IMAGES:
        if only and spec.name not in only:
            continue
        img = (four if spec.base == "4rail" else base).copy()
        for m in spec.mutations:
            m(img)
        report = ", ".join(f"`{c}` {s} on `{subj}`" for c, s, subj in spec.findings) or \
            "no finding of any severity, every rail up and healthy"
        origin = BASE_ORIGIN if spec.base == "2rail" else BASE_ORIGIN + " Extended to four rails by the generator."
        if spec.origin:
            origin += " **What is real.** " + spec.origin
        readme = README.format(name=spec.name, origin=origin, what=spec.what, args=f"with `{' '.join(spec.args)}`" if spec.args else "no flags",
                               report=report, exit=exit_status(spec.findings))
        expected = {"args": list(spec.args), "findings": [list(f) for f in spec.findings],
                    "exit": exit_status(spec.findings)}
        if spec.rails:
            expected["rails"] = [list(r) for r in spec.rails]
        if spec.unavailable:
            expected["unavailable"] = [list(u) for u in spec.unavailable]
        img.save(out / spec.name, readme, expected)
        made.append(spec.name)
    return made


def import_base(src: Path) -> None:
    """Copy the shared example into ``spectrumx-2rail-healthy/`` with real relative symlinks."""
    img = Image.load(src, restore_links=True)
    readme = (src / "README.md").read_text()
    note = ("\n## In this project\n\nCopied from the shared example image by `make_images.py --import-base` "
            "(symlinks that the copy had flattened into files are real relative symlinks again); the public "
            "samples named above as `../../public/` are in `tests/fixtures/public/` here. It is the base every "
            "other image in `tests/images/` is generated from. `expected.json`: no flags, no findings, exit 0.\n")
    img.save(HERE / BASE, readme + note, {"args": [], "findings": [], "exit": 0})
    # keep the base manifest exactly as shipped, apart from items recomputed over the same bytes
    (HERE / BASE / "manifest.json").write_text((src / "manifest.json").read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--import-base", type=Path, metavar="DIR", help="Copy the base image from DIR first.")
    ap.add_argument("--out", type=Path, default=HERE, metavar="DIR",
                    help="Write the generated images under DIR. Default: next to this script.")
    ap.add_argument("names", nargs="*", help="Only these images. Default: all.")
    args = ap.parse_args()
    if args.import_base:
        import_base(args.import_base)
    for name in build(set(args.names) or None, args.out):
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
