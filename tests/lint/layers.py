"""The layer contract of the code base, checked over its import graph.

Layers only point down (docs/architecture.md, "Where things live")::

    functions | localstack             Lambda entry points; the local stack's scripts
    gateway.app                        the HTTP API's wiring: includes every feature
    gateway.capabilities               what the caller's key may do (asks every feature)
    gateway.<feature> | worker         the API's features (jobs, approvals, dlq, workflows,
                                       system, docs); the reference CAP worker (a client)
    gateway.core                       what every feature builds on (auth, errors, paging)
    workflow | scheduler               the workflow engine (runs submit their steps as jobs);
                                       the job engine the functions and the API drive
    lambdas | approval                 what both run their functions on (the SQS batch loop,
                                       the tick loop); what counts as an approval
    bus                                NATS, the bridge (which feeds the registry)
    safety | registry                  the safety kernel and its clients; the worker registry
    store                              Redis adapters and their scripts
    protocol, config, errors, ...      wire types, settings, errors, the runtime's clients

A module may import its own layer's modules and any layer below it, never one
above; within a layer drawn with ``|``, packages do not import each other (they
are independent; the foundation's modules may), and no two modules import each
other, directly or through others (a cycle). Every
import counts, also one inside a function or under ``TYPE_CHECKING``: a deferred
import is still a dependency.

Beside the layers, ``SEPARATE`` keeps packages apart whatever their place: cordumctl,
the operator's CLI, imports nothing of ``cordum``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

LAYERS: tuple[tuple[str, ...], ...] = (
    ("functions", "localstack"),
    ("cordum.gateway.app", "cordum.stream"),
    ("cordum.gateway.capabilities",),
    ("cordum.gateway.jobs", "cordum.gateway.approvals", "cordum.gateway.dlq",
     "cordum.gateway.workflows", "cordum.gateway.system", "cordum.gateway.docs",
     "cordum.gateway.events", "cordum.gateway.policy", "cordum.gateway.audit",
     "cordum.gateway.artifacts", "cordum.gateway.configs",
     "cordum.gateway.schema_registry", "cordum.gateway.locks", "cordum.worker"),
    ("cordum.gateway.core",),
    ("cordum.workflow", "cordum.scheduler"),
    ("cordum.lambdas", "cordum.approval"),
    ("cordum.bus",),
    ("cordum.safety", "cordum.registry"),
    ("cordum.store",),
    ("cordum.protocol", "cordum.config", "cordum.errors", "cordum.labels", "cordum.aws",
     "cordum.metrics", "cordum.logs", "cordum.runtime", "cordum.agent",
     "cordum.step_job_ids", "cordum.text"),
)
"""Top to bottom; each entry is a package or module prefix."""

FOUNDATION = len(LAYERS) - 1
"""The bottom layer, whose modules build on each other (the runtime on the config)."""

SEPARATE: tuple[tuple[str, str, str], ...] = (
    ("cordumctl", "cordum",
     "cordumctl is a client of the HTTP API only: it installs and runs without the "
     "control plane"),
)
"""(importer, imported, why): package prefixes of which the first imports nothing of the
second, whether or not that import resolves to a module of the project."""

SYS_PATH: dict[str, tuple[str, ...]] = {"localstack": ("localstack", "localstack.executor")}
"""Folders whose modules run as scripts with these folders on ``sys.path`` (the executor
package from its own install), so they import each other by bare name
(``import services`` in localstack/stack.py): such a name is looked for there first, as
Python does. (``localstack.aws...`` in the executor is LocalStack's own package.)"""


@dataclass(frozen=True, slots=True)
class Import:
    importer: str
    imported: str
    line: int


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources(roots: Iterable[tuple[Path, str]]) -> Iterator[tuple[str, Path]]:
    """(module name, file) of every Python file below each (base, first folder) pair."""
    for base, top in roots:
        for path in sorted((base / top).rglob("*.py")):
            yield module_name(path, base), path


def imports_of(module: str, path: Path) -> Iterator[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                # ``from cordum import aws`` imports a module; ``from x import Name`` a name
                # of x: both are a dependency on x (or x.name when that is a module).
                yield Import(module, f"{base}.{alias.name}", node.lineno)


def layer_of(module: str) -> tuple[int, str] | None:
    """(rank, the prefix that placed it), rank 0 at the top; None outside the contract."""
    best: tuple[int, str] | None = None
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                    best is None or len(prefix) > len(best[1])):
                best = (rank, prefix)
    return best


def resolve(name: str, known: set[str]) -> str | None:
    """The known module an imported name belongs to (its longest known prefix)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def resolve_import(importer: str, name: str, known: set[str]) -> str | None:
    """The known module an import of ``importer`` names: first among the importer's
    ``SYS_PATH`` folders, then by its full name. A ``SYS_PATH`` folder is no package, so
    its modules are never imported by their full name (``localstack.services...`` in
    the executor is LocalStack's own)."""
    for folder in SYS_PATH.get(importer.partition(".")[0], ()):
        found = resolve(f"{folder}.{name}", known)
        if found is not None and found.startswith(folder + "."):
            return found
    found = resolve(name, known)
    return None if found is None or found.partition(".")[0] in SYS_PATH else found


def graph(roots: Iterable[tuple[Path, str]]) -> tuple[dict[str, Path], list[Import]]:
    files = dict(sources(roots))
    known = set(files)
    edges = []
    for module, path in files.items():
        for imp in imports_of(module, path):
            target = resolve_import(module, imp.imported, known)
            if target is not None and target != module:
                edges.append(Import(module, target, imp.line))
    return files, edges


def is_package(module: str, files: dict[str, Path]) -> bool:
    return files[module].name == "__init__.py"


def layer_violations(files: dict[str, Path], edges: list[Import]) -> list[str]:
    out = []
    for edge in edges:
        src, dst = layer_of(edge.importer), layer_of(edge.imported)
        if src is None or dst is None:
            continue
        where = f"{files[edge.importer]}:{edge.line}"
        if dst[0] < src[0]:
            out.append(f"{where}: {edge.importer} ({src[1]}) imports {edge.imported}, "
                       f"a layer above it ({dst[1]})")
        elif (dst[0] == src[0] != FOUNDATION and dst[1] != src[1]
              and not is_package(edge.imported, files)):
            out.append(f"{where}: {edge.importer} ({src[1]}) imports {edge.imported} "
                       f"({dst[1]}): packages of one layer are independent")
    return out


def cycles(files: dict[str, Path], edges: list[Import]) -> list[list[str]]:
    """Import cycles between modules (package ``__init__`` files left out: importing a
    module imports its package, which is not a dependency of the module's own making)."""
    adjacent: dict[str, set[str]] = {m: set() for m in files}
    for edge in edges:
        if not is_package(edge.imported, files) and not is_package(edge.importer, files):
            adjacent[edge.importer].add(edge.imported)
    # Tarjan's strongly connected components, iteratively.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(adjacent):
        if start in index:
            continue
        work = [(start, iter(sorted(adjacent[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(adjacent[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def separation_violations(files: dict[str, Path]) -> list[str]:
    """Imports that ``SEPARATE`` forbids, by the name imported (resolved or not)."""
    def under(name: str, prefix: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    out = []
    for module, path in files.items():
        for importer, imported, why in SEPARATE:
            if not under(module, importer):
                continue
            out += [f"{path}:{imp.line}: {module} imports {imp.imported}: {why}"
                    for imp in imports_of(module, path) if under(imp.imported, imported)]
    return out


def check(roots: Iterable[tuple[Path, str]]) -> list[str]:
    """Every breach of the contract, one line each (empty when it holds)."""
    files, edges = graph(roots)
    problems = layer_violations(files, edges)
    problems += separation_violations(files)
    problems += [f"import cycle: {' <-> '.join(c)}" for c in cycles(files, edges)]
    return problems


def project_roots(repo: Path) -> list[tuple[Path, str]]:
    """Everything shipped: the library and its CLI, the Lambda entry points, the local
    stack (its scripts and the LocalStack executor plugin)."""
    return [(repo / "shared", "cordum"), (repo / "shared", "cordumctl"), (repo, "functions"),
            (repo, "localstack")]


if __name__ == "__main__":
    import sys

    repo = Path(__file__).resolve().parents[2]
    problems = check(project_roots(repo))
    for line in problems:
        print(line)
    print(f"layer contract: {len(problems)} problem(s)")
    sys.exit(1 if problems else 0)
