"""``railscope snapshot --cluster -o FILE``: the operators' side of the cluster, before an upgrade, as one file.

What the operations guide's pre-upgrade script collects, read-only (get / list only; never Secrets): the
chart version (the DaemonSets' ``helm.sh/chart`` label, not Helm's release Secret), the CRDs and their
versions, every custom resource of the operators' kinds, the DaemonSets and their images, the operator
pods, the Nodes' labels and allocatable, the namespace's events of the last hour, and the log tails of the
operators' controller pods and of the DaemonSet pods that restarted or are not ready, where the
ServiceAccount may read ``pods/log`` (a 403 is skipped and named in the manifest, never an error). One
``tar.gz`` under ``railscope-cluster/`` (``manifest.json``, ``objects/<kind>.jsonl``, ``events.jsonl``,
``logs/<pod>/<container>.log``) and ``FILE.sha256``
beside it (``sha256sum -c`` reads it). ``railscope diff BEFORE AFTER`` compares two of them.

Exit status: 0 written, 3 bad usage or no API server.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import tarfile
import tempfile
import time
from typing import Any

from .common import EXIT_USAGE, fail
from .kubeapi import DEFAULT_NAMESPACE, add_api_flags, api_config

TOP = "railscope-cluster"
SCHEMA = "railscope.cluster-snapshot/v1"


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", action="store_true", required=True,
                   help="Snapshot the cluster's operator objects (a node's own capture is `railscope capture`).")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="The snapshot to write (a .tar.gz).")
    add_api_flags(p)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from agent.clients.kubernetes import KubeError

    try:
        config = api_config(args)
    except ValueError as exc:
        return fail("snapshot", str(exc))
    except KubeError as exc:
        return fail("snapshot", f"no API server: {exc.message or exc} (give --api-server and --api-token-file)")
    try:
        manifest = asyncio.run(_write(args, config))
    except KubeError as exc:
        return fail("snapshot", f"the API server {config.server}: {exc}", EXIT_USAGE)
    except OSError as exc:
        return fail("snapshot", f"{args.output}: {exc.strerror or exc}")
    counts = manifest["counts"]
    absent = [k for k in manifest["skipped"] if not k.endswith(" (forbidden)")]
    refused = [k.removesuffix(" (forbidden)") for k in manifest["skipped"] if k.endswith(" (forbidden)")]
    print(f"{args.output}: {sum(counts.values())} objects of {len(counts)} kinds, {manifest['logs']} log tail(s)"
          + (f"; skipped (not in this cluster): {', '.join(absent)}" if absent else "")
          + (f"; skipped (this ServiceAccount may not read them): {', '.join(refused)}" if refused else ""))
    return 0


async def _write(args: argparse.Namespace, config: Any) -> dict[str, Any]:
    from agent.capture.archive import write_sha256_file
    from agent.clients.cluster import snapshot
    from agent.clients.kubernetes import KubeClient

    with tempfile.TemporaryDirectory(prefix="railscope-snapshot-") as tmp:
        files: dict[str, Any] = {}

        def sink(member: str, line: bytes) -> None:
            fh = files.get(member)
            if fh is None:
                fh = files[member] = open(os.path.join(tmp, member.replace("/", "_")), "wb")
            fh.write(line)

        try:
            async with KubeClient(config) as client:
                manifest = await snapshot(client, args.namespace or DEFAULT_NAMESPACE, sink, time.time())
        finally:
            for fh in files.values():
                fh.close()
        part = args.output + ".part"
        with open(part, "wb") as raw:
            with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
                body = json.dumps(manifest, indent=1, sort_keys=True).encode()
                info = tarfile.TarInfo(f"{TOP}/manifest.json")
                info.size, info.mtime, info.mode = len(body), int(manifest["taken_at"]), 0o644
                tar.addfile(info, io.BytesIO(body))
                for member in sorted(files):
                    path = os.path.join(tmp, member.replace("/", "_"))
                    info = tar.gettarinfo(path, f"{TOP}/{member}")
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    info.mode = 0o644
                    with open(path, "rb") as fh:
                        tar.addfile(info, fh)
        digest = hashlib.sha256()
        with open(part, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        os.replace(part, args.output)
        write_sha256_file(args.output, digest.hexdigest())
    return manifest


class SnapshotError(ValueError):
    pass


def is_snapshot(path: str) -> bool:
    """Whether ``path`` is a cluster snapshot (a tar.gz whose first member is its manifest)."""
    if not os.path.isfile(path):
        return False
    try:
        with tarfile.open(path, "r:gz") as tar:
            first = tar.next()
            return first is not None and first.name == f"{TOP}/manifest.json"
    except (tarfile.TarError, OSError, EOFError):
        return False


def read_snapshot(path: str) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """The manifest and ``{kind key: [objects]}`` (events under ``"events"``) of a cluster snapshot; its
    ``.sha256`` beside it, where there is one, must match (:class:`SnapshotError` otherwise)."""
    side = path + ".sha256"
    if os.path.isfile(side):
        with open(side, encoding="ascii", errors="replace") as fh:
            want = fh.read().split()[:1]
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        if want != [digest.hexdigest()]:
            raise SnapshotError(f"{path}: its sha256 does not match {side}")
    objects: dict[str, list[dict[str, Any]]] = {}
    manifest: dict[str, Any] = {}
    with tarfile.open(path, "r:gz") as tar:
        for member in tar:
            if not member.isfile() or not member.name.startswith(f"{TOP}/"):
                continue
            fh = tar.extractfile(member)
            if fh is None:
                continue
            name = member.name[len(TOP) + 1:]
            if name == "manifest.json":
                manifest = json.loads(fh.read())
            elif name.endswith(".jsonl"):
                key = name.rsplit("/", 1)[-1][: -len(".jsonl")]
                objects[key] = [json.loads(line) for line in fh if line.strip()]
    if manifest.get("schema") != SCHEMA:
        raise SnapshotError(f"{path}: not a {SCHEMA} snapshot")
    return manifest, objects

