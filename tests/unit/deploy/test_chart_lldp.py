"""The chart's lldp parts: the cabling map (``agent.cabling``) as a ConfigMap the agent reads through
--cabling, and, with ``agent.lldp: lldpd``, the node's lldpd control socket where the image's lldpcli
connects, with the socket's group."""

from __future__ import annotations

import glob
import re
from pathlib import Path
from typing import Any

import pytest

from agent.expectations import read_cabling
from tests.support import ROOT
from tests.support.chart import container, env_of, pod_spec, render

#: liblldpctl's compiled-in control socket (lldpd's configure --with-ctlsocket; Debian: /run/lldpd.socket):
#: lldpcli without -u connects there
LLDPCTL_SOCKET = "/run/lldpd.socket"
ROWS = [{"node": "gpu-node-017", "rail": 0, "leaf": "leaf-02", "port": "swp1"},
        {"node": "gpu-node-017", "rail": "1", "leaf": "leaf-02", "port": "Eth1/2"},
        {"node": "gpu-node-018.dc1.example", "rail": "net_rail0", "leaf": "leaf 03", "port": "swp3"}]


def _objects(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def _mount(docs: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((m for m in container(docs).get("volumeMounts", []) if m["name"] == name), None)


def _volume(docs: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((v for v in pod_spec(docs).get("volumes", []) if v["name"] == name), None)


def test_the_cabling_value_is_a_configmap_the_agent_reads_through_cabling(chart: Any, tmp_path: Path) -> None:
    docs = render(chart, {"agent": {"cabling": ROWS}})
    (cm,) = [d for d in _objects(docs, "ConfigMap") if d["metadata"]["name"].endswith("-cabling")]
    path = env_of(docs)["RAILSCOPE_CABLING"]["value"]
    mount = _mount(docs, "cabling")
    assert mount is not None and mount["readOnly"] is True and path == f"{mount['mountPath']}/cabling.csv"
    assert _volume(docs, "cabling") == {"name": "cabling", "configMap": {"name": cm["metadata"]["name"]}}
    # what the agent reads is the rows the values gave
    (tmp_path / "cabling.csv").write_text(cm["data"]["cabling.csv"])
    assert read_cabling(str(tmp_path / "cabling.csv")) == tuple(
        (r["node"], str(r["rail"]), r["leaf"], r["port"]) for r in ROWS)
    # never the repeated flag a list value would otherwise become, and a changed map restarts the pods
    assert "--cabling" not in container(docs)["args"]
    (ds,) = _objects(docs, "DaemonSet")
    assert "checksum/cabling" in ds["spec"]["template"]["metadata"].get("annotations", {})


def test_no_cabling_value_no_configmap(chart: Any) -> None:
    docs = render(chart)
    assert not [d for d in _objects(docs, "ConfigMap") if d["metadata"]["name"].endswith("-cabling")]
    assert "RAILSCOPE_CABLING" not in env_of(docs) and _mount(docs, "cabling") is None


def test_lldpd_mode_mounts_the_nodes_lldpd_socket_where_lldpcli_connects(chart: Any) -> None:
    docs = render(chart, {"agent": {"lldp": "lldpd"}, "lldpd": {"socketGroup": 107}})
    mount = _mount(docs, "lldpd-socket")
    assert mount == {"name": "lldpd-socket", "mountPath": LLDPCTL_SOCKET, "readOnly": True}
    assert _volume(docs, "lldpd-socket") == {"name": "lldpd-socket",
                                             "hostPath": {"path": "/run/lldpd.socket", "type": "Socket"}}
    # the socket is lldpd's user and group, 0770: the agent's root (no DAC_OVERRIDE) connects by the group
    assert pod_spec(docs)["securityContext"]["supplementalGroups"] == [107]
    assert container(docs)["securityContext"]["capabilities"]["add"] == ["NET_ADMIN"]
    other = render(chart, {"agent": {"lldp": "lldpd"}, "lldpd": {"socket": "/run/lldpd/ctl.socket"}})
    assert _volume(other, "lldpd-socket")["hostPath"]["path"] == "/run/lldpd/ctl.socket"
    assert _mount(other, "lldpd-socket")["mountPath"] == LLDPCTL_SOCKET
    assert "supplementalGroups" not in pod_spec(other)["securityContext"]


def test_the_socket_is_mounted_in_lldpd_mode_only(chart: Any) -> None:
    for lldp in (None, "listen", "off"):
        docs = render(chart, {"agent": {"lldp": lldp}, "lldpd": {"socketGroup": 107}})
        assert _mount(docs, "lldpd-socket") is None and _volume(docs, "lldpd-socket") is None, lldp
        assert "supplementalGroups" not in pod_spec(docs)["securityContext"], lldp


def test_debians_lldpcli_connects_to_the_mounted_path() -> None:
    """The path the chart mounts is the one the installed liblldpctl has compiled in (where lldpd is
    installed here: the image's Debian package)."""
    libs = glob.glob("/usr/lib/*/liblldpctl.so.*")
    if libs:
        assert LLDPCTL_SOCKET.encode() + b"\0" in Path(libs[0]).read_bytes()
    # the image's lldpcli is setuid _lldpd, mode 4750 root:adm in Debian's package: root without
    # DAC_OVERRIDE cannot run it, and no_new_privs ignores the setuid bit anyway
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"chmod 0755 /usr/sbin/lldpcli\b", text), "the Dockerfile must make lldpcli runnable"


def test_the_lldpd_mode_and_cabling_objects_validate_against_kubernetes_schemas(chart: Any) -> None:
    from tests.support.chart import K8S_VERSIONS, kubernetes_validate

    docs = render(chart, {"agent": {"lldp": "lldpd", "cabling": ROWS}, "lldpd": {"socketGroup": 107}})
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("row", [
    {"node": "gpu-1,gpu-2", "rail": 0, "leaf": "leaf-01", "port": "swp1"},  # a comma would split the CSV row
    {"node": "gpu-1", "rail": 0, "leaf": 'leaf"01', "port": "swp1"},
    {"node": "#gpu-1", "rail": 0, "leaf": "leaf-01", "port": "swp1"},  # the agent reads it as a comment
    {"node": "gpu-1", "rail": 0, "leaf": "leaf-01\nx", "port": "swp1"},
    {"node": "gpu-1", "rail": 0, "leaf": "leaf-01"},
])
def test_a_cabling_row_the_csv_cannot_carry_is_refused_at_install(chart: Any, row: dict[str, Any]) -> None:
    from tests.support.chart import helm

    with pytest.raises(helm.HelmValuesError):
        render(chart, {"agent": {"cabling": [row]}})
