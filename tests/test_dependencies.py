"""The dependency rules of docs/architecture.md, held by reading the source.

* packages import only the packages below them (``ALLOWED``);
* no import cycles between hpbroker modules, counting imports inside functions
  (they only postpone a cycle to the first call);
* no ``from hpbroker.x import _private``: a leading underscore means the name
  is its module's business;
* no reads of another object's private attributes (``other._x``), outside the
  class that defines them;
* kazoo only in ``hpbroker.cluster``.
"""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "hpbroker"

# package -> hpbroker packages it may import
ALLOWED = {
    # the processes: a worker never reaches into the acceptor, the CLI never into a worker
    "acceptor": {"cluster", "kernels", "records", "server", "shared", "storage", "workers"},
    # (``protocol``: the requests confluent-kafka's admin client cannot make, sent as frames)
    "cli": {"acceptor", "cluster", "kernels", "protocol", "records", "security", "server", "spark", "storage",
            "zkconsumer"},
    # (``security``: the listener's settings are read with the rest of the configuration)
    "server": {"security", "storage"},
    # the memory the acceptor shares with its workers (it finds a partition's owner by the server's rule)
    "shared": {"server"},
    "workers": {"cluster", "kernels", "protocol", "records", "replication", "security", "server", "shared",
                "storage"},
    # the libraries below them
    # (``security``: the ACLs' model, which the image watcher reads from ZooKeeper)
    "cluster": {"protocol", "security", "shared"},
    "kernels": set(),
    "protocol": set(),
    "records": {"kernels"},
    "replication": {"protocol", "storage", "records", "kernels", "security"},
    # SASL and TLS: the mechanisms, the credential file, keystores, the listener's settings (storage: ConfigError)
    "security": {"storage"},
    "spark": {"storage", "kernels", "records"},
    "storage": {"kernels", "records"},
    "zkconsumer": {"cluster", "kernels", "protocol", "records"},
}
# Top-level modules every package may import; they import nothing of hpbroker
# (Kafka's error table, its special values, the varint codec and the clock are shared by
# wire and disk).
LEAVES = {"clock", "errors", "sentinels", "varint"}

# Names with a leading underscore that are public where they come from: the
# namedtuple API, and librdkafka's local error codes as confluent-kafka spells them.
PUBLIC_UNDERSCORED = {"_replace", "_asdict", "_fields", "_make", "_exit", "_getframe"}
PUBLIC_UNDERSCORED_OF = {"KafkaError"}


def _sources() -> dict[str, pathlib.Path]:
    """Module name -> path, for every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


SOURCES = _sources()
TREES = {name: ast.parse(path.read_text()) for name, path in SOURCES.items()}


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """Imports under ``if TYPE_CHECKING:``: annotations, never run."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for inner in node.body:
                skipped.update(ast.walk(inner))
    return skipped


def _imported_from(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not SOURCES[module].name == "__init__.py":
        base = base[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str) -> list[tuple[str, str, int]]:
    """(imported module, imported name or "", line) of every hpbroker import,
    at any depth of the module (function-level too)."""
    tree = TREES[module]
    skipped = _type_checking_only(tree)
    found = []
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, "", node.lineno) for alias in node.names if alias.name.startswith("hpbroker.")]
        elif isinstance(node, ast.ImportFrom):
            source = _imported_from(module, node)
            if source == "hpbroker" or source.startswith("hpbroker."):
                found += [(source, alias.name, node.lineno) for alias in node.names]
    return found


def _module_edges(module: str) -> set[str]:
    edges = set()
    for source, name, _line in _imports(module):
        submodule = f"{source}.{name}"
        edges.add(submodule if submodule in SOURCES else source)
    return edges & SOURCES.keys() - {module}


def _top_package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_it_may(package):
    for module in SOURCES:
        if _top_package(module) != package:
            continue
        used = {_top_package(target) for target in _module_edges(module)}
        extra = used - ALLOWED[package] - LEAVES - {package}
        assert not extra, f"{module} imports hpbroker.{sorted(extra)}"


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_leaf_modules_import_nothing_of_hpbroker(leaf):
    module = f"hpbroker.{leaf}"
    if module not in SOURCES:
        pytest.skip(f"{module} does not exist")
    assert not _module_edges(module), f"{module} imports {sorted(_module_edges(module))}"


def test_only_the_cluster_package_uses_zookeeper():
    """A standalone broker never loads kazoo."""
    for module, tree in TREES.items():
        if _top_package(module) == "cluster":
            continue
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.split(".")[0] == "kazoo" for n in names), f"{module} imports kazoo"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles():
    graph = {module: _module_edges(module) for module in SOURCES}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle_through_three_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_private_names_imported_across_modules():
    offenders = [f"{SOURCES[module].relative_to(PACKAGE.parent)}:{line} imports {name} from {source}"
                 for module in SOURCES for source, name, line in _imports(module)
                 if name.startswith("_") and not name.startswith("__")]
    assert offenders == []


def _own_private_names(tree: ast.Module) -> set[str]:
    """Underscored names a module's classes define (methods, class attributes,
    ``self._x`` assignments): another instance of the same class may read them."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            own.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    own.add(member.name)
                elif isinstance(member, ast.Assign):
                    own.update(t.id for t in member.targets if isinstance(t, ast.Name))
                elif isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
                    own.add(member.target.id)
    return {name for name in own if name.startswith("_")}


def test_no_reads_of_other_objects_private_attributes():
    offenders = []
    for module, tree in TREES.items():
        own = _own_private_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in {"self", "cls"} | PUBLIC_UNDERSCORED_OF:
                continue
            if node.attr in PUBLIC_UNDERSCORED or node.attr in own:
                continue
            offenders.append(f"{SOURCES[module].relative_to(PACKAGE.parent)}:{node.lineno} reads {ast.unparse(node)}")
    assert offenders == []
