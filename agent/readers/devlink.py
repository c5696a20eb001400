"""devlink: instances, eswitch mode, watched params and ports (``devlink -j ...``).

Only PF handles are queried (docs/design.md §4 "Devlink handles queried"): ``pci/<bdf>`` of a function that
carries a rail or is SR-IOV capable, never a VF, never an ``auxiliary/mlx5_core.eth.N`` instance (on
kernel >= 6.7 that is the PF's nested instance; ``nested_devlink`` maps it back to its PF).

A devlink handle is ``<bus>/<device>`` of the device the instance is registered on, so a netdev whose
parent is on another bus names its PF handle itself: netdevsim's uplinks have ``parent_bus``
``netdevsim``, ``parent_dev`` ``netdevsim10``, and ``devlink dev show`` lists
``netdevsim/netdevsim10``. Such a handle is queried when devlink lists it.

A command that times out means *busy* (the SR-IOV daemon holds the devlink lock while it creates
VFs), not *down*: the handle goes to ``Notes.busy``. A VF answering ``Operation not supported`` for
its eswitch is a fact (it has none), not an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent.config import ReadConfig
from agent.host import CmdResult, Host
from agent.model import DevlinkDev, DevlinkParam, DevlinkPort, Eswitch, Link, PciFunction
from agent.readers.common import BDF_RE, Notes, parse_json, to_int
from agent.readers.pci import bus_devices_of_links
from agent.readers.scope import touchable_bdfs
from agent.readers.source import Context, Part, Source, part

__all__ = [
    "BOOL_PARAMS",
    "DEFAULT_PARAMS",
    "SOURCE",
    "DevlinkState",
    "parse_bool_value",
    "parse_dev_show",
    "parse_eswitch",
    "parse_params",
    "parse_ports",
    "pf_handles",
    "pf_of_handle",
    "read_devlink",
]

#: ``enable_roce`` (generic, driverinit; mlx5 registers it in mlx5_core, so it reads with mlx5_ib unloaded):
#: whether the PF's rails must have an RDMA device (RailRdmaMissing); kernel mlx5 devlink.rst
#: "Read RoCE enablement state": ``name enable_roce type generic values: cmode driverinit value true``.
DEFAULT_PARAMS = ("esw_multiport", "flow_steering_mode", "enable_roce")

_NOT_SUPPORTED = "operation not supported"


def _nested(value: Any) -> tuple[str, ...]:
    # iproute2 prints nested handles as an object of handle -> {} (pr_out_nested_handle_obj);
    # tolerate a list or a bare string as well.
    if isinstance(value, dict):
        return tuple(str(k) for k in value)
    if isinstance(value, list):
        return tuple(str(v) for v in value if isinstance(v, str))
    if isinstance(value, str) and value:
        return (value,)
    return ()


def parse_dev_show(doc: Any) -> tuple[DevlinkDev, ...]:
    """``devlink -j dev show`` -> instances, in output order.

    Kernel >= 6.7 (each PF has a nested auxiliary instance)::

        {"dev":{"pci/0000:08:00.0":{"nested_devlink":{"auxiliary/mlx5_core.eth.0":{}}},
                "auxiliary/mlx5_core.eth.0":{}}}

    Older kernels: ``{"dev":{"pci/0000:03:00.0":{},"pci/0000:03:00.1":{}}}``.
    """
    devs = doc.get("dev") if isinstance(doc, dict) else None
    if not isinstance(devs, dict):
        raise ValueError('expected {"dev": {<handle>: {...}}}')
    return tuple(
        DevlinkDev(handle=str(h), nested=_nested(v.get("nested_devlink") if isinstance(v, dict) else None))
        for h, v in devs.items()
    )


def parse_eswitch(doc: Any, handle: str) -> Eswitch:
    """``devlink -j dev eswitch show <handle>`` -> ``Eswitch``; mode None when the device has none.

    Sample: ``{"dev":{"pci/0000:0c:00.0":{"mode":"switchdev","inline-mode":"none","encap-mode":"basic"}}}``;
    an auxiliary instance answers ``{"dev":{"auxiliary/mlx5_core.eth.0":{}}}``; old iproute2 printed
    ``"encap": "enable"`` instead of ``encap-mode``.
    """
    devs = doc.get("dev") if isinstance(doc, dict) else None
    if not isinstance(devs, dict):
        raise ValueError('expected {"dev": {<handle>: {...}}}')
    body = devs.get(handle)
    if body is None and len(devs) == 1:
        body = next(iter(devs.values()))
    body = body if isinstance(body, dict) else {}

    def s(key: str) -> str | None:
        v = body.get(key)
        return str(v) if isinstance(v, (str, int)) and not isinstance(v, bool) else None

    return Eswitch(handle=handle, mode=s("mode"), inline_mode=s("inline-mode"),
                   encap_mode=s("encap-mode") or s("encap"))


#: The watched params whose type is bool and whose value the checks judge as one: read as booleans
#: in every form (mlx5's esw_multiport and the generic enable_roce, DEVLINK_PARAM_TYPE_BOOL).
BOOL_PARAMS = frozenset({"esw_multiport", "enable_roce"})
_TRUE = frozenset({"true", "1", "yes", "on", "enable", "enabled"})
_FALSE = frozenset({"false", "0", "no", "off", "disable", "disabled"})


def parse_bool_value(value: Any) -> bool | None:
    """A boolean param's value in any form it has been given -> bool; None when no form reads it.

    ``true`` / ``"true"`` / ``1`` / ``"on"`` / ``"enabled"`` -> True (case and spaces ignored), the
    opposites -> False: iproute2 prints a JSON bool, old iproute2 the string, hand-made images more.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    if isinstance(value, int):
        return bool(value)
    return None


def _param_value(name: str, value: Any) -> Any:
    if name in BOOL_PARAMS:
        b = parse_bool_value(value)
        return value if b is None else b
    # Old iproute2 printed boolean params as the JSON strings "true"/"false".
    if isinstance(value, str) and value in ("true", "false"):
        return value == "true"
    return value


def parse_params(doc: Any) -> tuple[DevlinkParam, ...]:
    """``devlink -j dev param show [<handle> name <p>]`` -> params, one per (handle, name).

    Sample: ``{"param":{"pci/0000:0c:00.0":[{"name":"esw_multiport","type":"driver-specific",
    "values":[{"cmode":"runtime","value":false}]}]}}``. Old iproute2: ``"value":"false"``. An empty
    values list (``[]`` or ``[{}]``, a kernel / iproute2 mismatch) gives a param with no values.
    """
    params = doc.get("param") if isinstance(doc, dict) else None
    if not isinstance(params, dict):
        raise ValueError('expected {"param": {<handle>: [...]}}')
    out = []
    for handle, plist in params.items():
        for p in plist if isinstance(plist, list) else []:
            if not isinstance(p, dict) or not isinstance(p.get("name"), str):
                continue
            values = []
            raw = p.get("values")
            for v in raw if isinstance(raw, list) else []:
                if isinstance(v, dict) and isinstance(v.get("cmode"), str) and "value" in v:
                    values.append((v["cmode"], _param_value(p["name"], v["value"])))
            out.append(DevlinkParam(handle=str(handle), name=p["name"], values=tuple(values)))
    return tuple(out)


def _bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    return None


def parse_ports(doc: Any) -> tuple[DevlinkPort, ...]:
    """``devlink -j port show`` -> ports, in output order.

    Sample (kernel >= 6.7: the uplink sits under the PF's nested auxiliary instance)::

        {"port":{"auxiliary/mlx5_core.eth.0/65535":{"type":"eth","netdev":"net_rail0",
                   "flavour":"physical","port":0,"splittable":false},
                 "pci/0000:0c:00.0/1":{"type":"eth","netdev":"net_rail0_0","flavour":"pcivf",
                   "controller":0,"pfnum":0,"vfnum":0,"external":false,"splittable":false}}}

    Older kernels print no ``controller`` / ``external`` keys (None here).
    """
    ports = doc.get("port") if isinstance(doc, dict) else None
    if not isinstance(ports, dict):
        raise ValueError('expected {"port": {<handle>/<index>: {...}}}')
    out = []
    for handle, body in ports.items():
        dev, _, idx = str(handle).rpartition("/")
        index = to_int(idx)
        if not dev or index is None:
            continue
        b = body if isinstance(body, dict) else {}
        netdev = b.get("netdev")
        flavour = b.get("flavour")
        out.append(DevlinkPort(
            handle=str(handle), dev=dev, index=index,
            netdev=netdev if isinstance(netdev, str) and netdev else None,
            flavour=flavour if isinstance(flavour, str) else None,
            controller=to_int(b.get("controller")),
            pfnum=to_int(b.get("pfnum")),
            vfnum=to_int(b.get("vfnum")),
            sfnum=to_int(b.get("sfnum")),
            external=_bool(b.get("external")),
        ))
    return tuple(out)


def pf_of_handle(devs: Iterable[DevlinkDev], handle: str) -> str | None:
    """The PF instance that ``handle`` (an instance or a port handle) belongs to.

    ``pci/0000:0c:00.0/1`` -> ``pci/0000:0c:00.0``; ``auxiliary/mlx5_core.eth.0/65535`` -> the PF
    whose ``nested_devlink`` lists ``auxiliary/mlx5_core.eth.0``; ``netdevsim/netdevsim10/128`` ->
    ``netdevsim/netdevsim10`` when devlink lists that instance (a bus other than PCI and auxiliary);
    None when nothing says.
    """
    parts = handle.split("/")
    dev = "/".join(parts[:2])
    if dev.startswith("pci/"):
        return dev
    devs = tuple(devs)
    for d in devs:
        if dev in d.nested and d.handle.startswith("pci/"):
            return d.handle
    if not dev.startswith("auxiliary/") and any(d.handle == dev for d in devs):
        return dev
    return None


def pf_handles(devs: Iterable[DevlinkDev] | None, functions: Iterable[PciFunction],
               rail_bdfs: Iterable[str], links: Iterable[Link] = ()) -> list[str]:
    """``pci/<bdf>`` of every function that carries a rail or is SR-IOV capable, not a VF, and
    ``<parent_bus>/<parent_dev>`` of the ``links`` whose parent is on another bus (not auxiliary).

    When ``devs`` (the instances devlink listed) is given, only handles devlink knows are kept. Without
    it the other-bus parents are left out: only devlink's list proves such a device has an instance
    (a virtio or vmbus NIC has none).
    """
    fns = {f.bdf: f for f in functions}
    want = set(rail_bdfs)
    want.update(b for b, f in fns.items() if f.sriov_totalvfs is not None)
    # A device read from another bus (netdevsim10) is keyed by its name, not an address: not pci/.
    handles = sorted(f"pci/{b}" for b in want if BDF_RE.match(b) and not (b in fns and fns[b].is_vf))
    if devs is not None:
        known = {d.handle for d in devs}
        handles = [h for h in handles if h in known]
        handles += sorted(h for h in {f"{bus}/{dev}" for bus, dev in bus_devices_of_links(links)} if h in known)
    return handles


@dataclass(slots=True)
class DevlinkState:
    """What ``read_devlink`` gave."""

    devs: tuple[DevlinkDev, ...] = ()
    devs_known: bool = False  # True when ``devlink dev show`` was read
    eswitch: tuple[Eswitch, ...] = ()
    params: tuple[DevlinkParam, ...] = ()
    ports: tuple[DevlinkPort, ...] = ()


def _run(host: Host, argv: list[str], timeout_s: float, notes: Notes, source: str,
         busy_as: str) -> tuple[CmdResult, Any]:
    """Run one devlink command; ``(result, JSON document or None)``."""
    res = host.run(argv, timeout_s=timeout_s)
    if res.timed_out:
        notes.timed_out(busy_as)
        notes.missing(source, f"{res.why()}: busy, not down (the SR-IOV daemon holds the devlink lock while "
                              "it creates VFs); not judged")
        return res, None
    if not res.available:
        notes.command(source, res)
        return res, None
    doc, err = parse_json(res.text, " ".join(argv), res.truncated)
    if err and res.rc == 0:
        notes.missing(source, err)
    return res, doc


def read_devlink(host: Host, functions: Iterable[PciFunction], rail_bdfs: Iterable[str],
                 params: Iterable[str] = DEFAULT_PARAMS, timeout_s: float = 10.0,
                 notes: Notes | None = None, links: Iterable[Link] = ()) -> DevlinkState:
    """Read instances, then eswitch + params per PF handle (``pf_handles``), then ports.

    ``links`` (the link dump) gives the PF handles of devices on a bus other than PCI.

    Busy (timed out) per-handle commands put the handle in ``notes.busy``; a timed-out node-wide
    dump (``dev show``, ``port show``) puts the word ``devlink`` there.
    """
    notes = notes if notes is not None else Notes()
    st = DevlinkState()
    res, doc = _run(host, ["devlink", "-j", "dev", "show"], timeout_s, notes, "devlink", "devlink")
    if res.missing:
        return st  # no devlink tool (or not recorded): nothing else would answer either
    if res.timed_out:
        # Every instance waits on the same lock while the SR-IOV daemon works: asking each PF
        # would only stack up timeouts. They are all busy.
        for h in pf_handles(None, functions, rail_bdfs):
            notes.timed_out(h)
        return st
    if res.ok and doc is not None:
        try:
            st.devs = parse_dev_show(doc)
            st.devs_known = True
        except ValueError as exc:
            notes.missing("devlink", f"devlink -j dev show: {exc}")
    elif res.available and res.rc != 0:
        # No devlink netlink family (module absent, or an unprivileged container): every other
        # devlink command would fail the same way.
        notes.command("devlink", res)
        return st

    handles = pf_handles(st.devs if st.devs_known else None, functions, rail_bdfs, links)
    eswitches: list[Eswitch] = []
    plist: list[DevlinkParam] = []
    for h in handles:
        src = f"devlink {h}"
        res, doc = _run(host, ["devlink", "-j", "dev", "eswitch", "show", h], timeout_s, notes, src, h)
        if res.available:
            err = res.stderr.decode("utf-8", "replace").lower()
            if res.rc == 0 and doc is not None:
                try:
                    eswitches.append(parse_eswitch(doc, h))
                except ValueError as exc:
                    notes.missing(src, f"devlink -j dev eswitch show {h}: {exc}")
            elif _NOT_SUPPORTED in err:
                eswitches.append(Eswitch(handle=h, mode=None))
            elif res.rc != 0:
                notes.command(src, res)
        if res.timed_out:
            continue  # the instance is busy: the params would time out too
        for name in params:
            argv = ["devlink", "-j", "dev", "param", "show", h, "name", name]
            res, doc = _run(host, argv, timeout_s, notes, src, h)
            if res.timed_out:
                break
            if not res.available:
                continue
            if res.rc != 0 or doc is None:
                if res.rc != 0:
                    notes.command(src, res)
                continue
            try:
                # Keep only what was asked: a dump can mix devices up (docs/design.md §3).
                got = [p for p in parse_params(doc) if p.name == name and p.handle == h]
            except ValueError as exc:
                notes.missing(src, f"{' '.join(argv)}: {exc}")
                continue
            plist.extend(got)
    st.eswitch = tuple(eswitches)
    st.params = tuple(plist)

    res, doc = _run(host, ["devlink", "-j", "port", "show"], timeout_s, notes, "devlink ports", "devlink")
    if res.ok and doc is not None:
        try:
            st.ports = parse_ports(doc)
        except ValueError as exc:
            notes.missing("devlink ports", f"devlink -j port show: {exc}")
    elif res.available and res.rc != 0:
        notes.command("devlink ports", res)
    return st


def read_devlink_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    # Only rail PFs and the PFs the rules name, less --exclude-devices: another SR-IOV capable mlx5
    # function (an HGX baseboard's restricted PF) fails its register reads and floods the kernel log.
    bdfs = touchable_bdfs(ctx.rail_bdfs, ctx.links, cfg.exclude_devices)
    keep = set(bdfs)
    functions = [f for f in ctx.functions if f.bdf in keep or f.is_vf]
    dl = read_devlink(host, functions, bdfs, cfg.devlink_params, cfg.command_timeout_s, notes,
                      links=ctx.links)
    # ``devlink dev show`` failed (the reader's one "devlink" note, no instance read), not busy: every
    # other devlink command of this sample would fail the same way
    gone = next((why for src, why in notes.unavailable if src == "devlink"), None)
    gone = gone if not dl.devs and "devlink" not in notes.busy else None
    return part("devlink", notes, fields={"devlink_devs": dl.devs, "eswitch": dl.eswitch, "params": dl.params,
                                          "ports": dl.ports}, gives={"devlink_gone": gone})


SOURCE = Source("devlink", "devlink (eswitch mode, params, ports)",
                (("devlink",),), 60.0, 60.0, ("devlink_devs", "eswitch", "params", "ports"), read_devlink_part,
                order=30, needs=("rail_bdfs", "links", "functions"), provides=("devlink_gone",),
                roles=frozenset({"devlink-events", "ports"}))
