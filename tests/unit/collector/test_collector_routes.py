"""The collector's routes: one table, one guard. Every route but the probes refuses a caller without a
token or with the wrong role before its handler runs, and every refusal of every endpoint is counted
in ``railscope_collector_refusals{endpoint,reason}``."""

from __future__ import annotations

import re
from pathlib import Path

from collector.app import make_app
from collector.routes import ROUTES
from collector.state import ROUTE_SPECS

from tests.support.collector_helpers import AGENT_TOKEN, ALERTING_TOKEN, OPERATOR_TOKEN, get, local_settings, run, running  # isort: skip

#: a path of each route with its parts filled in (parts that pass proto.keys)
FILL = {"cluster": "prod-east", "date": "2026-12-01", "incident": "inc-1", "node": "gpu-node-017",
        "id": "b0123456789abcdef01234567", "name": "gpu-node-017-20261201T093823Z-b0123456789abcdef01234567.tar.gz"}
TOKENS = {"agent": AGENT_TOKEN, "alerting": ALERTING_TOKEN, "operator": OPERATOR_TOKEN}


def _path(template: str) -> str:
    path = re.sub(r"\{(\w+)\}", lambda m: FILL[m.group(1)], template)
    return path + ("?node=gpu-node-017&wait=0" if template == "/v1/requests" else "")


def _refusals(text: str) -> dict[tuple[str, str], float]:
    return {(m[0], m[1]): float(m[2]) for m in
            re.findall(r'railscope_collector_refusals_total\{endpoint="(\w+)",reason="(\w+)"\} (\S+)', text)}


def test_every_route_of_the_app_is_in_the_table(tmp_path: Path) -> None:
    app = make_app(local_settings(tmp_path))
    registered = list(app.router.routes())
    assert {id(r) for r in registered} == set(app[ROUTE_SPECS])
    assert {(r.method, r.resource.canonical) for r in registered if r.method != "HEAD"} == {
        (r.method, r.path) for r in ROUTES}
    assert len({r.name for r in ROUTES}) == len(ROUTES)


def test_no_token_and_the_wrong_role_are_refused_and_counted_on_every_route(tmp_path: Path) -> None:
    async def go() -> tuple[dict, dict, dict, str]:
        anonymous, wrong, opened = {}, {}, {}
        async with running(local_settings(tmp_path)) as (url, _col):
            for r in ROUTES:
                if not r.roles:
                    opened[r.name] = (await get(url, _path(r.path), token=None, method=r.method))[0]
                    continue
                anonymous[r.name] = (await get(url, _path(r.path), token=None, method=r.method))[0]
                other = next(t for role, t in TOKENS.items() if role not in r.roles)
                wrong[r.name] = (await get(url, _path(r.path), token=other, method=r.method))[0]
            _s, text, _h = await get(url, "/metrics", token=None)
        return anonymous, wrong, opened, text.decode()

    anonymous, wrong, opened, text = run(go())
    guarded = [r.name for r in ROUTES if r.roles]
    assert len(guarded) == 14 and opened == {"healthz": 200, "readyz": 200, "metrics": 200}
    assert anonymous == dict.fromkeys(guarded, 401)
    assert wrong == dict.fromkeys(guarded, 403)
    counted = _refusals(text)
    pages = {r.name for r in ROUTES if r.page is not None}
    for name in guarded:
        assert counted[(name, "forbidden")] == 1, name
        if name in pages:
            # a browser asked for its token is a login prompt, counted apart from refusals
            assert (name, "unauthenticated") not in counted, name
            assert f'railscope_collector_page_challenges_total{{endpoint="{name}"}} 1.0' in text, name
        else:
            assert counted[(name, "unauthenticated")] == 1, name
    # the uploads' own counter still says why uploads were refused
    assert 'railscope_collector_bundles_refused_total{reason="unauthenticated"} 1.0' in text


def test_a_handlers_refusal_is_counted_too(tmp_path: Path) -> None:
    async def go() -> tuple[int, int, str]:
        async with running(local_settings(tmp_path)) as (url, _col):
            missing = (await get(url, _path("/v1/bundles/{cluster}/{date}/{incident}/{name}")))[0]
            page = (await get(url, "/ui/incidents/prod-east/2026-12-01/inc-nothing"))[0]
            _s, text, _h = await get(url, "/metrics", token=None)
        return missing, page, text.decode()

    missing, page, text = run(go())
    assert missing == 404 and page == 404
    counted = _refusals(text)
    assert counted[("bundles_get", "not_found")] == 1 and counted[("ui_incident", "not_found")] == 1
