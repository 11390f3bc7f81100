"""The dependency direction of docs/architecture.md, held by reading imports."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "hpbroker"

# package -> hpbroker packages it may import
ALLOWED = {
    "kernels": set(),
    "protocol": set(),
    "records": {"kernels"},
    "spark": {"storage", "kernels", "records"},
    "storage": {"kernels", "records"},
}


def hpbroker_imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "hpbroker" and len(parts) > 1:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_it_may(package):
    for path in (PACKAGE / package).rglob("*.py"):
        extra = hpbroker_imports(path) - ALLOWED[package] - {package}
        assert not extra, f"{path.relative_to(PACKAGE)} imports hpbroker.{sorted(extra)}"
