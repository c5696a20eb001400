"""Which way the imports run (docs/design.md §1), checked over the transitive closure of every module.

Each module's imports are read from its source (module level and inside functions, since a lazy
import is still a dependency; ``if TYPE_CHECKING:`` blocks are left out: they never run), resolved to
project modules and top-level third-party / stdlib names, and followed through the project's
modules. Where §1 says what a part may use, the rule is an allow-list (``ALLOWED``: every project
module the closure reaches must be one it names); where it says what a part must not reach, a
deny-list (``RULES``). The collector's and proto's rules are checked against whatever exists of them.
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agent", "collector", "proto")


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST):
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                stack.extend(child.orelse)  # the else branch runs
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child
            stack.append(child)


def _resolve(name: str) -> str:
    """The project module ``name`` stands for, or its top-level package (stdlib / third party)."""
    parts = name.split(".")
    if parts[0] not in PACKAGES:
        return parts[0]
    while parts and ".".join(parts) not in MODULES:
        parts.pop()
    return ".".join(parts)


#: Packages that find their own modules when imported (docs/design.md §1: a check is a module that declares it,
#: and nothing names it): the package's ``__init__`` lists its own directory and imports what is there.
#: That is loading railscope's code, not reading the node, the clock or a file of data: these imports
#: of theirs, and only these, are not held against the purity of the package's modules.
LOADERS: dict[str, frozenset[str]] = {"agent.analysis.checks": frozenset({"os", "importlib"})}


@functools.cache
def direct(module: str) -> frozenset[str]:
    """What ``module`` imports: project modules (with the packages whose ``__init__`` runs) and
    top-level external names."""
    path = MODULES[module]
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            if node.level:
                base = module.split(".")
                base = base if is_pkg else base[:-1]
                base = base[:len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names = [prefix] + [f"{prefix}.{a.name}" for a in node.names]
        for name in names:
            if name.split(".")[0] == "__future__":
                continue
            target = _resolve(name)
            if not target:
                continue
            out.add(target)
            # importing agent.a.b runs agent/__init__ and agent/a/__init__ first
            parts = target.split(".")
            for i in range(1, len(parts)):
                parent = ".".join(parts[:i])
                if parent in MODULES:
                    out.add(parent)
    out.discard(module)
    return frozenset(out - LOADERS.get(module, frozenset()))


@functools.cache
def closure(module: str) -> frozenset[str]:
    seen: set[str] = set()
    todo = [module]
    while todo:
        m = todo.pop()
        for dep in direct(m):
            if dep not in seen:
                seen.add(dep)
                if dep in MODULES:
                    todo.append(dep)
    return frozenset(seen)


def path_to(module: str, target: str) -> list[str]:
    """One import chain from ``module`` to ``target`` (for the failure message)."""
    prev: dict[str, str] = {}
    todo = [module]
    seen = {module}
    while todo:
        m = todo.pop(0)
        for dep in sorted(direct(m)):
            if dep in seen:
                continue
            seen.add(dep)
            prev[dep] = m
            if dep == target:
                chain = [dep]
                while chain[-1] != module:
                    chain.append(prev[chain[-1]])
                return chain[::-1]
            if dep in MODULES:
                todo.append(dep)
    return [module, target]


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


#: the layers above the readers
ABOVE_READERS = ("agent.analysis", "agent.detectors", "agent.metrics", "agent.service", "agent.capture",
                 "agent.report", "agent.commands", "agent.cli", "collector")
#: I/O and time: what a pure part never reaches (the host seam is where the node is read)
IMPURE = ("pyroute2", "subprocess", "socket", "shutil", "tarfile", "threading", "asyncio", "time",
          "random", "importlib", "agent.host", "agent.readers.common", "agent.readers.snapshot",
          "agent.readers.sources", "agent.readers.kernel_table")
#: and for checks and detectors also the file system, in-memory files and the calendar clock: a
#: detector reading files through pathlib, or a check asking datetime for the time, is not pure
IMPURE_FOR_CHECKS = (*IMPURE, "os", "pathlib", "io", "datetime")
SERVING = ("aiohttp", "prometheus_client")
BELOW = ("agent.host", "agent.readers", "agent.analysis", "agent.detectors", "agent.config", "agent.model",
         "agent.naming", "agent.findings")

#: (name, the modules it covers, what their closure must not reach)
RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("the host seam imports no reader, check or metric", ("agent.host",),
     ("agent.readers", *ABOVE_READERS)),
    ("readers import the host seam and nothing above it", ("agent.readers",), ABOVE_READERS),
    ("checks and detectors are pure: no pyroute2, no subprocess, no file access, no clock of their own",
     ("agent.analysis", "agent.detectors"),
     (*IMPURE_FOR_CHECKS, *SERVING, "agent.metrics", "agent.service", "agent.capture")),
    ("the records and codes below everything are pure", ("agent.model", "agent.findings", "agent.naming",
                                                          "agent.config"), (*IMPURE, *SERVING)),
    ("nothing below metrics, the service and capture imports aiohttp or prometheus_client", BELOW, SERVING),
    ("proto imports neither agent nor collector", ("proto",), ("agent", "collector")),
    ("the collector uses the offline parts of the agent only, never the live host, the capture runner or the "
     "agent service", ("collector",),
     ("agent.host.live", "agent.host.netlink", "agent.host.runner", "agent.host.ethtool", "agent.host.recording",
      "agent.capture.runner", "agent.service", "agent.clients", "pyroute2")),
    ("the clients of the remote APIs reach no node access, no capture runner and no agent service",
     ("agent.clients",), ("agent.host.live", "agent.host.netlink", "agent.host.runner", "agent.host.ethtool",
                          "agent.host.recording", "agent.capture.runner", "agent.service", "pyroute2",
                          "collector")),
    ("capture never reaches the service: the daemon runs captures, a capture knows nothing of the daemon",
     ("agent.capture",), ("agent.service",)),
    ("the CLI is a thin layer: importing it reaches no node access and no server", ("agent.cli",),
     ("pyroute2", "aiohttp", "prometheus_client", "agent.host.live", "agent.service")),
)


#: (name, the modules it covers, the project modules their closure may reach). ``=x`` allows the
#: module ``x`` alone (a package's ``__init__``); ``x`` allows it and everything below it.
_RECORDS = ("=agent", "agent.model", "agent.config", "agent.naming", "agent.findings", "agent.safejson")
ALLOWED: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("readers import the host seam and nothing above it", ("agent.readers",),
     (*_RECORDS, "agent.host", "agent.readers")),
    ("checks and detectors use the records, the codes and the history's parsed form only",
     ("agent.analysis", "agent.detectors"),
     (*_RECORDS, "agent.analysis", "agent.detectors", "=agent.readers", "agent.readers.history")),
    ("the collector may use proto and the offline parts of the agent: the recorded host, the image, the "
     "readers, the analysis (and the offline pipeline that runs them), the report", ("collector",),
     ("collector", "proto", *_RECORDS, "=agent.host", "agent.host.recorded", "agent.host.image", "agent.host.paths",
      "agent.readers", "agent.analysis", "agent.offline", "agent.expectations", "agent.settings", "agent.report")),
    ("proto imports neither agent nor collector", ("proto",), ("proto",)),
)


def _allowed(module: str, allowed: tuple[str, ...]) -> bool:
    return any(module == a[1:] if a.startswith("=") else _under(module, (a,)) for a in allowed)


ALLOW_CASES = [(name, m, allowed) for name, covers, allowed in ALLOWED for m in sorted(
    x for x in MODULES if _under(x, covers))]


@pytest.mark.parametrize(("rule", "module", "allowed"), ALLOW_CASES, ids=[m for _n, m, _a in ALLOW_CASES])
def test_allowed_imports(rule: str, module: str, allowed: tuple[str, ...]) -> None:
    bad = sorted(dep for dep in closure(module) if dep.split(".")[0] in PACKAGES and not _allowed(dep, allowed))
    assert not bad, f"{rule}: {module} reaches " + "; ".join(" -> ".join(path_to(module, b)) for b in bad)


def _covered(prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in MODULES if _under(m, prefixes))


def _cli_closure(module: str) -> frozenset[str]:
    """agent.cli imports its subcommands lazily: what importing it runs is its module-level closure."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for n in names:
                t = _resolve(n)
                if t:
                    out.add(t)
                    if t in MODULES:
                        out |= closure(t)
    return frozenset(out)


CASES = [(name, m, forbidden) for name, covers, forbidden in RULES for m in _covered(covers)]


@pytest.mark.parametrize(("rule", "module", "forbidden"), CASES, ids=[f"{m}" for _n, m, _f in CASES])
def test_import_rule(rule: str, module: str, forbidden: tuple[str, ...]) -> None:
    reach = _cli_closure(module) if module == "agent.cli" else closure(module)
    bad = sorted(dep for dep in reach if _under(dep, forbidden))
    assert not bad, f"{rule}: {module} reaches " + "; ".join(" -> ".join(path_to(module, b)) for b in bad)


def test_every_rule_covers_something_that_exists() -> None:
    for name, covers, _f in RULES:
        if covers in (("collector",), ("proto",)):
            continue  # checked against whatever exists of them
        assert _covered(covers), name


def test_every_runtime_dependency_is_imported_at_runtime() -> None:
    """pyproject's runtime dependencies are imported by the packages, every one of them."""
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].split("~")[0].strip()
             .lower().replace("-", "_") for d in deps}
    imported = {dep for m in MODULES for dep in direct(m) if dep not in MODULES}
    unused = sorted(n for n in names if n not in imported)
    assert not unused, f"runtime dependencies nothing imports: {unused}"


def test_the_closure_follows_imports_through_other_modules() -> None:
    """The rule is about what a module reaches, not what it names: a check reaches the model
    through the topology without importing it itself."""
    assert "agent.model" in closure("agent.analysis.checks.pfc")
    assert "agent.readers.history" in closure("agent.analysis.diagnose")
    assert "socket" in closure("agent.host.live") and "subprocess" in closure("agent.host.live")
    assert "pyroute2" in closure("agent.service.daemon")  # through the devlink listener, lazily
    assert sys.version_info >= (3, 11)


#: builtins a pure part never calls: file access, terminal I/O, code from strings
FORBIDDEN_CALLS = {"open", "print", "input", "exec", "eval", "__import__"}


@pytest.mark.parametrize("module", _covered(("agent.analysis", "agent.detectors")))
def test_pure_parts_call_no_io_builtin(module: str) -> None:
    tree = ast.parse(MODULES[module].read_text())
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & FORBIDDEN_CALLS, f"{module} calls {sorted(calls & FORBIDDEN_CALLS)}"


def test_a_loader_exception_covers_the_package_init_alone() -> None:
    """The loaders' exception is their ``__init__``'s: a check module importing os is still impure."""
    for pkg, names in LOADERS.items():
        assert MODULES[pkg].name == "__init__.py"
        raw = {_resolve(a.name) for n in _import_nodes(ast.parse(MODULES[pkg].read_text()))
               if isinstance(n, ast.Import) for a in n.names}
        raw |= {_resolve(n.module or "") for n in _import_nodes(ast.parse(MODULES[pkg].read_text()))
                if isinstance(n, ast.ImportFrom) and not n.level}
        assert names <= raw, f"{pkg} no longer imports {sorted(names - raw)}: drop the exception"
        for sub in (m for m in MODULES if m.startswith(pkg + ".")):
            assert not (direct(sub) & names), f"{sub} imports {sorted(direct(sub) & names)} itself"
