"""The node's rails, PFs and NICs, resolved from one snapshot (pure: no I/O, no clock).

Checks, metrics and detectors all ask the same questions of a snapshot — which netdev is rail 1,
which PF owns this representor, which PFs form one NIC — so the answers live here, once, by the rules
of docs/design.md §4:

- **Rails** come from ``--rail-map`` (rail -> PCI function) where given, else from the udev naming rules
  (PCI function -> expected name; the operator's files, and a site's own files where a name matches a
  template: ``agent.naming.rail_rules``), else from netdev names that match a template, else from
  ``--rails N`` (names rendered with the first template whose only number is the rail's). A rail is keyed
  by its PCI function; its rail / plane numbers are parsed from the rule's *expected* name, or are the
  map's. A mapped function's rule still gives the name it should have; without one, the name its uplink
  has is the expected one (the map declares functions, not names).
- **A rail's netdev** is the uplink of its PCI function: ``parent_dev`` is the function and
  ``phys_port_name`` is ``p<N>``, or, with no switch id, the function's own netdev. Representors
  share the function (a ``KERNELS==`` rule matches them too) and never count. A rail found by a
  netdev's name is that netdev, also when it has no ``parent_dev``; a ``--rails`` rail is the link of
  its name, a virtual one too (a test namespace's veth), never a representor or a VF's netdev.
- **A rail's RDMA port** is the ``rdma link`` whose netdev is the rail netdev, else port 1 of the RDMA
  device on the rail's function — of several (ConnectX-8's SMI device beside the RoCE one), the only
  Ethernet one, else the one the RDMA rule names, never the first by name. Representor ports (one per
  VF in switchdev) are never a rail's.
- **Representors** (``pf<N>vf<M>``) belong to the PF that is their ``parent_dev``, cross-checked with
  the devlink port; ``c<C>pf..`` names with C >= 1 belong to another host (a DPU's) and are ignored.
  A representor is *stale* when its VF index is >= the PF's ``sriov_numvfs`` (or VFs are 0).
- **NICs** are the PFs sharing a ``phys_switch_id`` (VFs never count). mlx5 reports that id in any
  eswitch mode, so it proves the NIC, not switchdev. A NIC's ``esw_multiport`` is its lowest PF's.
- **OVS orphans** are OVS ports whose netdev is gone (``ifindex 0``, an ``error``, ``ofport -1``),
  owned by the PF whose netdev name prefixes ``<pf netdev>_<vf>``, else by ``node``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from agent.config import Expectations
from agent.model import DevlinkPort, Link, OvsInterface, RailRule, RdmaDevice, RdmaLink, Snapshot, value_of
from agent.naming import (
    DEFAULT_NET_TEMPLATES,
    DEFAULT_RDMA_TEMPLATES,
    IFNAMSIZ_MAX,
    NOT_PF_BUSES,
    SITE_NET_TEMPLATES,
    SITE_RDMA_TEMPLATES,
    PortName,
    RailName,
    is_vf_netdev_of,
    net_twin,
    parse_name,
    parse_port_name,
    pci_of_handle,
    pci_order,
    rail_only_template,
    rail_rules,
    rdma_twin,
    render,
)

__all__ = [
    "Nic",
    "OvsOrphan",
    "Pf",
    "Rail",
    "Representor",
    "TemplateProblem",
    "Topology",
    "build_topology",
]

@dataclass(frozen=True, slots=True)
class Representor:
    """A VF (or SF) representor netdev of this host (controller 0)."""

    netdev: str
    kind: str  # "vf" | "sf"
    pfnum: int | None  # pf<N> of the name: the NIC's device index
    index: int  # the VF / SF number
    link: Link
    stale: bool = False  # VF index >= sriov_numvfs, or VFs are 0
    #: the devlink port's pfnum when it disagrees with the name (evidence only)
    devlink_pfnum: int | None = None

    @property
    def up(self) -> bool:
        return self.link.is_oper_up


@dataclass(frozen=True, slots=True)
class Pf:
    """A physical function: a rail's function, or any SR-IOV capable / devlink-managed one.

    ``params`` holds the devlink params read on this PF (``esw_multiport`` ...) as the reader gave them;
    ``eswitch_mode`` / params are None when devlink could not be read ("not available").
    """

    bdf: str
    #: the devlink handle, and the subject of PF findings: ``pci/<bdf>``, or ``<bus>/<dev>`` for a
    #: device on another bus (netdevsim: ``netdevsim/netdevsim10``, ``bdf`` then being ``netdevsim10``)
    handle: str
    netdev: str | None  # the uplink netdev's name
    link: Link | None
    switch_id: str | None
    numvfs: int | None
    totalvfs: int | None
    eswitch_mode: str | None
    params: tuple[tuple[str, Any], ...] = ()
    representors: tuple[Representor, ...] = ()
    stale_representors: tuple[str, ...] = ()
    representors_down: tuple[str, ...] = ()
    sfs: tuple[str, ...] = ()
    #: devlink instances nested under this PF (``auxiliary/mlx5_core.eth.N``, kernel >= 6.7)
    nested: tuple[str, ...] = ()
    driver: str | None = None

    def param(self, name: str) -> Any:
        return value_of(self.params, name)

    @property
    def esw_multiport(self) -> bool | None:
        # The reader gives a bool in every form devlink printed; anything else was not readable.
        v = self.param("esw_multiport")
        return v if isinstance(v, bool) else None

    @property
    def vf_representors(self) -> tuple[Representor, ...]:
        return tuple(r for r in self.representors if r.kind == "vf")


@dataclass(frozen=True, slots=True)
class Nic:
    """The PFs of one adapter (one ``phys_switch_id``; a PF without one is a NIC of its own)."""

    switch_id: str | None
    pfs: tuple[str, ...]  # PF BDFs, lowest first
    esw_multiport: bool | None  # the lowest PF's value (the one that has a value)
    #: (bdf, value) for each PF whose value could be read
    esw_multiport_by_pf: tuple[tuple[str, bool], ...] = ()
    #: PFs whose value differs from the NIC's (torn LAG state); empty when consistent
    torn_pfs: tuple[str, ...] = ()
    carries_rails: bool = False

    @property
    def lowest_pf(self) -> str:
        return self.pfs[0]

    @property
    def torn(self) -> bool:
        return bool(self.torn_pfs)


@dataclass(frozen=True, slots=True)
class Rail:
    """One expected rail, keyed by its PCI function (``pci`` None for a rail whose netdev has no parent
    device, a virtual one of ``--rails``, or none)."""

    rail: int
    plane: int | None
    pci: str | None
    expected_netdev: str
    expected_rdma: str | None
    netdev: Link | None  # the uplink netdev actually on the function (its name may differ)
    rdma: RdmaLink | None  # the rail's RDMA port
    pf: Pf | None
    nic: int | None = None  # %nic_id% when the template has one
    source: str = "udev"  # "udev" | "rail-map" | "netdev" | "rails"
    rule_file: str | None = None
    rdma_device: RdmaDevice | None = None
    #: the expected netdev name is longer than IFNAMSIZ: udev can never apply it
    name_too_long: bool = False
    #: the RDMA naming rule of the function; ``expected_rdma`` is its name when there is one
    rdma_rule: RailRule | None = None
    #: other RDMA devices on the rail's function (a ConnectX-8 SMI device beside the RoCE one)
    other_rdma: tuple[str, ...] = ()

    @property
    def netdev_name(self) -> str | None:
        return self.netdev.ifname if self.netdev is not None else None

    @property
    def renamed(self) -> bool:
        """The function has an uplink netdev, but not with the expected name."""
        return self.netdev is not None and self.netdev.ifname != self.expected_netdev


@dataclass(frozen=True, slots=True)
class OvsOrphan:
    """An OVS port whose netdev is gone."""

    name: str
    owner: str  # pci/<bdf> of the PF, or "node"
    why: str  # "ifindex 0", "ofport -1", the OVS error text


@dataclass(frozen=True, slots=True)
class TemplateProblem:
    """A rules file whose netdev names can never apply (longer than IFNAMSIZ)."""

    file: str
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Topology:
    rails: tuple[Rail, ...]  # sorted by rail, then plane
    pfs: tuple[Pf, ...]  # sorted by BDF
    nics: tuple[Nic, ...]  # sorted by lowest PF
    ovs_orphans: tuple[OvsOrphan, ...] = ()
    template_problems: tuple[TemplateProblem, ...] = ()
    #: every netdev name that is a representor of this host or another (never a rail / uplink)
    representor_names: frozenset[str] = field(default_factory=frozenset)
    #: how ``--rails`` and the udev rules were reconciled, when they disagree (for people)
    notes: tuple[str, ...] = ()

    def pf(self, bdf: str | None) -> Pf | None:
        for pf in self.pfs:
            if pf.bdf == bdf:
                return pf
        return None

    @property
    def rail_pfs(self) -> tuple[Pf, ...]:
        seen: dict[str, Pf] = {}
        for r in self.rails:
            if r.pf is not None:
                seen.setdefault(r.pf.bdf, r.pf)
        return tuple(seen[k] for k in sorted(seen))


# --------------------------------------------------------------------------------------------


def _vf_bdfs(snap: Snapshot) -> set[str]:
    out = {fn.bdf for fn in snap.pci if fn.is_vf}
    for fn in snap.pci:
        out.update(fn.virtfns)
    return out


def _by_parent(links: list[Link]) -> dict[str, list[Link]]:
    out: dict[str, list[Link]] = {}
    for ln in links:
        if ln.parent_dev:
            out.setdefault(ln.parent_dev, []).append(ln)
    return out


def _uplink_of(bdf: str, by_parent: dict[str, list[Link]], prefer: str | None = None) -> Link | None:
    """The uplink netdev of a PCI function (docs/design.md §4 "A rail's netdev").

    A device with more than one port per function (netdevsim; other vendors) has several uplinks:
    the one named ``prefer`` (the rail's expected name) is the rail's, else the first by ifindex.
    """
    own = by_parent.get(bdf, ())
    uplinks = []
    plain = []
    for ln in own:
        pn = parse_port_name(ln.phys_port_name)
        if pn is not None and pn.kind == "uplink":
            uplinks.append(ln)
        elif pn is None and not ln.phys_switch_id:
            plain.append(ln)
    for group in (uplinks, plain):
        if group:
            named = [ln for ln in group if ln.ifname == prefer]
            return named[0] if named else min(group, key=lambda ln: ln.ifindex)
    return None


def _rdma_port_of(snap: Snapshot, netdev: Link | None, pci: str | None, rep_names: frozenset[str],
                  expected: str | None = None) -> tuple[RdmaLink | None, RdmaDevice | None, tuple[str, ...]]:
    """The rail's RDMA port, its device, and the other RDMA devices on the rail's function.

    A function may carry several RDMA devices (ConnectX-8: an SMI device such as ``smi1`` beside
    ``mlx5_0``, made by ``rdma dev add ... type SMI``): the rail's is the one with a port whose
    netdev is the rail netdev, else the only Ethernet (RoCE) one, else the one the RDMA rule names,
    else the only one. Never the first by name: with two candidates and nothing to tell them apart,
    the rail has no RDMA device (and no RdmaLinkDown), and the candidates are in ``others``.
    """
    on_fn = sorted((d for d in snap.rdma_devices if d.pci == pci), key=lambda d: d.name) if pci else []
    chosen: RdmaDevice | None = None
    port: RdmaLink | None = None
    if netdev is not None:
        for rl in snap.rdma_links:
            if rl.netdev == netdev.ifname and rl.netdev not in rep_names:
                port = rl
                chosen = _rdma_device(snap, rl.dev)
                break
    if port is None and on_fn:
        roce = [d for d in on_fn if (p1 := d.port(1)) is not None and p1.link_layer == "ethernet"]
        named = [d for d in on_fn if d.name == expected]
        for group in (roce if len(roce) == 1 else [], named, on_fn if len(on_fn) == 1 else []):
            if group:
                chosen = group[0]
                break
    others = tuple(d.name for d in on_fn if chosen is None or d.name != chosen.name)
    if port is not None:
        return port, chosen, others
    if chosen is None:
        # Without sysfs the rdma links still name the device; a port whose netdev is the
        # function's uplink was handled above, so nothing more can be known here.
        return None, None, others
    for rl in snap.rdma_links:
        if rl.dev == chosen.name and rl.port == 1:
            return rl, chosen, others
    p1 = chosen.port(1)
    if p1 is not None:
        return RdmaLink(chosen.name, 1, p1.state, p1.physical_state,
                        netdev.ifname if netdev is not None else None), chosen, others
    return None, chosen, others


def _rdma_device(snap: Snapshot, name: str) -> RdmaDevice | None:
    for d in snap.rdma_devices:
        if d.name == name:
            return d
    return None


def _all_templates(given: tuple[str, ...], known: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*given, *known)))


def _net_templates(exp: Expectations) -> tuple[str, ...]:
    return _all_templates(exp.net_templates, (*DEFAULT_NET_TEMPLATES, *SITE_NET_TEMPLATES))


def _rdma_templates(exp: Expectations) -> tuple[str, ...]:
    return _all_templates(exp.rdma_templates, (*DEFAULT_RDMA_TEMPLATES, *SITE_RDMA_TEMPLATES))


def _rdma_template_for(net_template: str, exp: Expectations) -> str | None:
    """The RDMA twin of a net template: ``net_`` -> ``rdma_`` (or a known site pair), else the one at
    the same position of ``--rdma-template``."""
    twin = rdma_twin(net_template)
    if twin is not None and (twin in exp.rdma_templates or not exp.rdma_templates
                             or net_template not in exp.net_templates):
        return twin
    if net_template in exp.net_templates:
        i = exp.net_templates.index(net_template)
        if i < len(exp.rdma_templates):
            return exp.rdma_templates[i]
    return exp.rdma_templates[0] if len(exp.rdma_templates) == 1 else None


def _expected_rdma(name: RailName, exp: Expectations) -> str | None:
    tmpl = _rdma_template_for(name.template, exp)
    if tmpl is None:
        return None
    return render(tmpl, name.rail, name.plane, name.nic)


def _representor_names(links: list[Link]) -> frozenset[str]:
    out = set()
    for ln in links:
        pn = parse_port_name(ln.phys_port_name)
        if pn is not None and pn.kind != "uplink":
            out.add(ln.ifname)
    return frozenset(out)


def _build_pfs(snap: Snapshot, links: list[Link], by_parent: dict[str, list[Link]], rail_names: dict[str, str],
               vfs: set[str]) -> dict[str, Pf]:
    # devlink: map nested auxiliary handles back to their PF (kernel >= 6.7).
    nested_of: dict[str, tuple[str, ...]] = {d.handle: d.nested for d in snap.devlink_devs}
    parent_of_aux: dict[str, str] = {}
    for d in snap.devlink_devs:
        for n in d.nested:
            parent_of_aux[n] = d.handle
    port_by_netdev: dict[str, DevlinkPort] = {p.netdev: p for p in snap.ports if p.netdev}

    reps_by_pf: dict[str, list[tuple[Link, PortName, int | None]]] = {}
    for ln in links:
        pn = parse_port_name(ln.phys_port_name)
        if pn is None or pn.kind == "uplink":
            continue
        if pn.controller >= 1 or pn.kind == "pf":
            continue
        owner = ln.parent_dev
        dl_pfnum = None
        port = port_by_netdev.get(ln.ifname)
        if port is not None:
            dev = parent_of_aux.get(port.dev, port.dev)
            # A link with no parent (an old kernel, no device symlink): the devlink instance names the PF.
            pci = pci_of_handle(dev)
            if owner is None and pci is not None and pci not in vfs:
                owner = pci
            # pf<N> is the NIC's device index; a devlink port that disagrees is kept as evidence.
            if port.pfnum is not None and pn.pf is not None and port.pfnum != pn.pf:
                dl_pfnum = port.pfnum
        if owner is None:
            continue
        reps_by_pf.setdefault(owner, []).append((ln, pn, dl_pfnum))

    # A devlink handle is <bus>/<device>: a parent on a bus other than PCI names its own handle
    # (netdevsim/netdevsim10). Auxiliary devices are functions of a PF (mlx5_core.eth.N, .sf.N), never one.
    handle_of: dict[str, str] = {}
    for ln in links:
        if ln.parent_dev and ln.parent_bus and ln.parent_bus not in NOT_PF_BUSES:
            handle_of.setdefault(ln.parent_dev, f"{ln.parent_bus}/{ln.parent_dev}")

    candidates: set[str] = set(rail_names)
    for fn in snap.pci:
        if not fn.is_vf and (fn.sriov_totalvfs or 0) > 0:
            candidates.add(fn.bdf)
    listed = {d.handle for d in snap.devlink_devs}
    for d in snap.devlink_devs:
        if (pci := pci_of_handle(d.handle)) is not None:
            candidates.add(pci)
    candidates.update(dev for dev, h in handle_of.items() if h in listed)
    for ln in links:
        if ln.parent_bus == "pci" and ln.parent_dev and ln.phys_switch_id:
            candidates.add(ln.parent_dev)
    candidates.update(reps_by_pf)
    candidates -= vfs

    mode_by_handle = {e.handle: e.mode for e in snap.eswitch}
    params_by_handle: dict[str, dict[str, Any]] = {}
    for p in snap.params:
        params_by_handle.setdefault(p.handle, {})[p.name] = p.value()

    pfs: dict[str, Pf] = {}
    for bdf in candidates:
        handle = handle_of.get(bdf, f"pci/{bdf}")
        fn = snap.pci_function(bdf)
        uplink = _uplink_of(bdf, by_parent, rail_names.get(bdf))
        numvfs = fn.sriov_numvfs if fn else None
        nested = nested_of.get(handle, ())
        mode = mode_by_handle.get(handle)
        if mode is None:
            mode = next((mode_by_handle[n] for n in nested if mode_by_handle.get(n)), None)
        params = dict(params_by_handle.get(handle, {}))
        for n in nested:
            for k, v in params_by_handle.get(n, {}).items():
                params.setdefault(k, v)
        reps = []
        for ln, pn, dl_pfnum in sorted(reps_by_pf.get(bdf, []), key=lambda t: (t[1].kind, t[1].index or 0)):
            stale = pn.kind == "vf" and numvfs is not None and (numvfs == 0 or (pn.index or 0) >= numvfs)
            reps.append(Representor(ln.ifname, pn.kind, pn.pf, pn.index or 0, ln, stale, dl_pfnum))
        switch_id = uplink.phys_switch_id if uplink is not None else None
        if switch_id is None:
            switch_id = next((r.link.phys_switch_id for r in reps if r.link.phys_switch_id), None)
        pfs[bdf] = Pf(
            bdf=bdf,
            handle=handle,
            netdev=uplink.ifname if uplink is not None else None,
            link=uplink,
            switch_id=switch_id,
            numvfs=numvfs,
            totalvfs=fn.sriov_totalvfs if fn else None,
            eswitch_mode=mode,
            params=tuple(sorted(params.items())),
            representors=tuple(r for r in reps if r.kind == "vf") + tuple(r for r in reps if r.kind == "sf"),
            stale_representors=tuple(r.netdev for r in reps if r.stale),
            representors_down=tuple(r.netdev for r in reps if r.kind == "vf" and not r.up),
            sfs=tuple(r.netdev for r in reps if r.kind == "sf"),
            nested=nested,
            driver=fn.driver if fn else None,
        )
    return pfs


def _build_nics(pfs: dict[str, Pf], rail_pcis: set[str]) -> tuple[Nic, ...]:
    groups: dict[str, list[str]] = {}
    for bdf, pf in pfs.items():
        groups.setdefault(pf.switch_id or f"\0{bdf}", []).append(bdf)
    nics = []
    for key, bdfs in groups.items():
        bdfs.sort(key=pci_order)
        values = tuple((b, v) for b in bdfs if (v := pfs[b].esw_multiport) is not None)
        nic_value = values[0][1] if values else None
        torn = tuple(b for b, v in values if v != nic_value)
        nics.append(Nic(
            switch_id=None if key.startswith("\0") else key,
            pfs=tuple(bdfs),
            esw_multiport=nic_value,
            esw_multiport_by_pf=values,
            torn_pfs=torn,
            carries_rails=any(b in rail_pcis for b in bdfs),
        ))
    nics.sort(key=lambda n: pci_order(n.pfs[0]))
    return tuple(nics)


@dataclass
class _RailSeed:
    rail: int
    plane: int | None
    nic: int | None
    pci: str | None
    expected_netdev: str
    expected_rdma: str | None
    source: str
    rule_file: str | None = None
    #: the net naming rule of this function (an RDMA rule alone names only the RDMA device)
    net_rule: RailRule | None = None
    #: the RDMA naming rule of this function: its name is what NCCL and the device plugin select
    rdma_rule: RailRule | None = None


def _seeds_from_rules(rules: tuple[RailRule, ...], exp: Expectations) -> list[_RailSeed]:
    chosen = rail_rules(rules, exp.net_templates, exp.rdma_templates)
    net_t, rdma_t = _net_templates(exp), _rdma_templates(exp)
    net = {r.pci: r for r in chosen if r.kind == "net"}
    rdma = {r.pci: r for r in chosen if r.kind == "rdma"}
    seeds: list[_RailSeed] = []
    for ordinal, pci in enumerate(dict.fromkeys(r.pci for r in chosen)):
        nrule, rrule = net.get(pci), rdma.get(pci)
        parsed = parse_name(nrule.name, net_t) if nrule else None
        if parsed is None and rrule is not None:
            parsed = parse_name(rrule.name, rdma_t)
        if nrule is not None:
            expected_net = nrule.name
        elif parsed is not None and (tmpl := _net_template_for(parsed.template, exp)):
            expected_net = render(tmpl, parsed.rail, parsed.plane, parsed.nic)
        else:
            expected_net = rrule.name if rrule else pci
        if rrule is not None:
            expected_rdma = rrule.name
        else:
            expected_rdma = _expected_rdma(parsed, exp) if parsed is not None and nrule is not None else None
        seeds.append(_RailSeed(
            rail=parsed.rail if parsed else ordinal,
            plane=parsed.plane if parsed else None,
            nic=parsed.nic if parsed else None,
            pci=pci,
            expected_netdev=expected_net,
            expected_rdma=expected_rdma,
            source="udev",
            rule_file=(nrule or rrule).file if (nrule or rrule) else None,
            net_rule=nrule,
            rdma_rule=rrule,
        ))
    return seeds


def _seeds_from_map(rules: tuple[RailRule, ...], exp: Expectations) -> tuple[list[_RailSeed], list[str]]:
    """The ``--rail-map`` rails, and a note for each place the udev rules disagree with it: the map is
    the operator's statement for this node and wins, but a rule is never ignored in silence."""
    assert exp.rail_map is not None
    ruled = {s.pci: s for s in _seeds_from_rules(rules, exp)}
    mapped = {pci for _, pci in exp.rail_map}
    seeds, notes = [], []
    for rail, pci in exp.rail_map:
        seed = ruled.get(pci)
        if seed is None:
            # nothing names the function: the subject of a finding is its address until its uplink is
            # found (then the uplink's name, build_topology)
            seeds.append(_RailSeed(rail, None, None, pci, pci, None, "rail-map"))
            continue
        if seed.rail != rail:
            notes.append(f"--rail-map: rail {rail} is {pci}, which the udev rules name {seed.expected_netdev} "
                         f"(rail {seed.rail}); the map wins")
        seeds.append(replace(seed, rail=rail, source="rail-map"))
    others = sorted((s for s in ruled.values() if s.pci not in mapped), key=lambda s: pci_order(s.pci or ""))
    if others:
        notes.append("--rail-map: the udev rules also name " + ", ".join(f"{s.pci} ({s.expected_netdev})" for s in others)
                     + ", not rails by the map")
    return seeds, notes


def _net_template_for(rdma_template: str, exp: Expectations) -> str | None:
    twin = net_twin(rdma_template)
    if twin is not None:
        return twin
    if rdma_template in exp.rdma_templates:
        i = exp.rdma_templates.index(rdma_template)
        if i < len(exp.net_templates):
            return exp.net_templates[i]
    return None


def _seeds_from_netdevs(links: list[Link], exp: Expectations, rep_names: frozenset[str],
                        vfs: set[str]) -> list[_RailSeed]:
    seeds = []
    for ln in links:
        if ln.ifname in rep_names or ln.kind is not None or (ln.parent_dev in vfs):
            continue
        parsed = parse_name(ln.ifname, exp.net_templates)
        if parsed is None:
            continue
        seeds.append(_RailSeed(parsed.rail, parsed.plane, parsed.nic, ln.parent_dev, ln.ifname,
                               _expected_rdma(parsed, exp), "netdev"))
    return seeds


def build_topology(snap: Snapshot, exp: Expectations) -> Topology:
    """Resolve rails, PFs, NICs and OVS orphans from one snapshot (see the module doc)."""
    links = list(snap.links)
    vfs = _vf_bdfs(snap)
    by_parent = _by_parent(links)
    rep_names = _representor_names(links)

    notes: list[str] = []
    if exp.rail_map:
        seeds, map_notes = _seeds_from_map(snap.rules, exp)
        notes.extend(map_notes)
        by = "--rail-map names"
    else:
        seeds = _seeds_from_rules(snap.rules, exp)
        by = "the udev rules name"
    if seeds and exp.rails is not None:
        # --rails against rules (or the map): neither is ignored in silence. The rules name functions, so
        # they win for every rail they name; a rail the flag expects beyond them is the stronger statement
        # and is judged (missing, most likely: nothing names its function).
        named = sorted({s.rail for s in seeds})
        beyond = [n for n in range(exp.rails) if n not in named]
        if beyond:
            _rails_seeds(seeds, exp, beyond)
            notes.append(f"--rails {exp.rails}: {by} rail(s) {_span(named)}; rail(s) "
                         f"{_span(beyond)} are expected from --rails as well")
        elif len(named) > exp.rails:
            notes.append(f"--rails {exp.rails}: {by} {len(named)} rails ({_span(named)}); "
                         + ("the map wins" if exp.rail_map else "the rules win"))
    if not seeds:
        seeds = _seeds_from_netdevs(links, exp, rep_names, vfs)
        if exp.rails is not None:
            _rails_seeds(seeds, exp, [n for n in range(exp.rails) if not any(s.rail == n for s in seeds)])

    rail_pcis = {s.pci for s in seeds if s.pci}
    pfs = _build_pfs(snap, links, by_parent, {s.pci: s.expected_netdev for s in seeds if s.pci}, vfs)

    rails = []
    problems: dict[str, list[str]] = {}
    for s in seeds:
        netdev = _uplink_of(s.pci, by_parent, s.expected_netdev) if s.pci else None
        if s.source == "rail-map" and s.pci in vfs:
            # a VF's netdev is a tenant's, never a rail's (the readers never read it as one)
            netdev = None
            notes.append(f"--rail-map: rail {s.rail} is {s.pci}, a VF: a rail is a physical function")
        if netdev is None and s.source not in ("udev", "rail-map"):
            # A rail found by its netdev's name is that netdev, also where the function gives no uplink
            # (sysfs names no parent device): never "no netdev on this node". A --rails rail takes the
            # link of its name, a virtual one too (a test namespace's veth), never a representor or a
            # VF's netdev (a netdev seed is neither: _seeds_from_netdevs skipped those).
            lk = snap.link(s.expected_netdev)
            if lk is not None and lk.ifname not in rep_names and lk.parent_dev not in vfs:
                netdev = lk
        pci = s.pci or (netdev.parent_dev if netdev is not None else None)
        # expected_rdma is the RDMA rule's name where the function has one (_seeds_from_rules).
        rdma, rdev, other_rdma = _rdma_port_of(snap, netdev, pci, rep_names, s.expected_rdma)
        if s.source in ("udev", "rail-map") and s.net_rule is None and netdev is not None:
            # Only an RDMA rule (or the rail map) names this function: nothing says what its netdev should
            # be called, so the name it has is the expected one (no RailNameMismatch from a guessed twin).
            s.expected_netdev = netdev.ifname
        # IFNAMSIZ binds netdev names only; an RDMA rule's name may be 64 characters.
        too_long = s.net_rule is not None and len(s.expected_netdev) > IFNAMSIZ_MAX
        if too_long and s.rule_file:
            problems.setdefault(s.rule_file, []).append(s.expected_netdev)
        rails.append(Rail(
            rail=s.rail, plane=s.plane, pci=pci, expected_netdev=s.expected_netdev,
            expected_rdma=s.expected_rdma, netdev=netdev, rdma=rdma,
            pf=pfs.get(pci) if pci else None, nic=s.nic, source=s.source, rule_file=s.rule_file,
            rdma_device=rdev, name_too_long=too_long, rdma_rule=s.rdma_rule,
            other_rdma=other_rdma,
        ))
    rails.sort(key=lambda r: (r.rail, -1 if r.plane is None else r.plane, r.pci or ""))

    orphans = _ovs_orphans(snap.ovs, {ln.ifname for ln in links}, pfs, rails)
    return Topology(
        rails=tuple(rails),
        pfs=tuple(pfs[b] for b in sorted(pfs, key=pci_order)),
        nics=_build_nics(pfs, rail_pcis),
        ovs_orphans=orphans,
        template_problems=tuple(TemplateProblem(f, tuple(sorted(n))) for f, n in sorted(problems.items())),
        representor_names=rep_names,
        notes=tuple(notes),
    )


def _rails_seeds(seeds: list[_RailSeed], exp: Expectations, numbers: list[int]) -> None:
    """Seeds for ``--rails`` rails ``numbers``, named by the first template of the rail number alone."""
    tmpl = rail_only_template(exp.net_templates)
    if tmpl is None:
        return
    for n in numbers:
        name = render(tmpl, n)
        parsed = parse_name(name, (tmpl,))
        seeds.append(_RailSeed(n, None, None, None, name, _expected_rdma(parsed, exp) if parsed else None, "rails"))


def _span(numbers: list[int]) -> str:
    """``0-3``, ``0,2,5``: rail numbers for a sentence."""
    if numbers and numbers == list(range(numbers[0], numbers[-1] + 1)) and len(numbers) > 2:
        return f"{numbers[0]}-{numbers[-1]}"
    return ",".join(str(n) for n in numbers)


# OVS port types that are backed by a kernel netdev; tunnel and patch ports never have one.
_NETDEV_TYPES = ("", "system", "internal")


def _ovs_orphans(ovs: tuple[OvsInterface, ...] | None, names: set[str], pfs: dict[str, Pf],
                 rails: list[Rail]) -> tuple[OvsOrphan, ...]:
    if not ovs:
        return ()
    prefixes: list[tuple[str, str]] = []
    for pf in pfs.values():
        if pf.netdev:
            prefixes.append((pf.netdev, pf.handle))
    for r in rails:
        if r.pf is not None:
            prefixes.append((r.expected_netdev, r.pf.handle))
    # A port named as a rail's uplink is not a representor: the rail missing or renamed is its own
    # finding (RailMissing / RailNameMismatch), one finding per cause.
    uplinks = {r.expected_netdev for r in rails}
    out = []
    for itf in ovs:
        if (itf.type or "") not in _NETDEV_TYPES or itf.name in names or itf.name in uplinks:
            continue
        if itf.error:
            why = f"error: {itf.error}"
        elif itf.ofport == -1:
            why = "ofport -1"
        elif itf.ifindex == 0:
            why = "ifindex 0"
        else:
            continue
        # <pf netdev>_<digits>: the prefix is the name up to its last "_", so one name at most matches
        # (a PF's own netdev before a rail's expected name, when a swapped rename gives both).
        owner = next((handle for prefix, handle in prefixes if is_vf_netdev_of(itf.name, prefix)), "node")
        out.append(OvsOrphan(itf.name, owner, why))
    return tuple(sorted(out, key=lambda o: (o.owner, o.name)))
