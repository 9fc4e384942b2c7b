"""Architecture checks on the source of ``zionsim/``: layers, import cycles, function length and
docstrings.  Parses every module with :mod:`ast`; imports nothing from the package."""

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parent.parent / "zionsim"

# Rank of each layer subpackage, lowest first (docs/architecture.md).  A module may import only its
# own layer or lower ones; ``studies`` and ``measure`` share rank 6 but may not import each other.
LAYERS = {
    "base": 0,
    "hardware": 1,
    "network": 2,
    "dlrm": 3,
    "sim": 4,
    "io": 5,
    "studies": 6,
    "measure": 6,
    "cli": 7,
}
SIBLINGS = {("studies", "measure"), ("measure", "studies")}
# The public re-export layer: may import anything.
EXEMPT = {"zionsim", "zionsim.__main__"}
MAX_FUNCTION_LINES = 60


def _module_name(path: Path) -> str:
    """Dotted module name of a file under ``zionsim/`` (``__init__`` names its package)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, tuple[Path, ast.Module]]:
    """Every module of the package: dotted name → (path, parsed tree)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        out[_module_name(path)] = (path, ast.parse(path.read_text(), filename=str(path)))
    return out


MODULES = _modules()


def _imports(module: str, tree: ast.Module) -> list[tuple[str, int]]:
    """Every ``zionsim`` module or package that ``tree`` imports, anywhere (lazy imports inside
    functions included), with its line; ``from zionsim.pkg import mod`` names ``zionsim.pkg.mod``
    when that is a module, else ``zionsim.pkg``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "zionsim"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")
                if MODULES[module][0].name != "__init__.py":
                    package = package[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            if base.split(".")[0] != "zionsim":
                continue
            for alias in node.names:
                name = f"{base}.{alias.name}"
                out.append((name if name in MODULES else base, node.lineno))
    return out


def _layer(module: str) -> str | None:
    """The layer subpackage of a dotted module name, or None for the top-level modules."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_module_is_in_a_layer():
    """Every module except the top-level re-export modules lives in a known layer subpackage."""
    stray = [m for m in MODULES if m not in EXEMPT and _layer(m) is None]
    assert not stray, f"modules outside the layer subpackages {sorted(LAYERS)}: {stray}"


def test_layers_import_only_their_own_or_lower():
    """No module imports a higher layer, or its sibling layer (studies ↔ measure)."""
    bad = []
    for module, (path, tree) in MODULES.items():
        if module in EXEMPT:
            continue
        mine = _layer(module)
        for target, line in _imports(module, tree):
            theirs = _layer(target)
            if theirs is None:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}")
            elif LAYERS[theirs] > LAYERS[mine] or (mine, theirs) in SIBLINGS:
                bad.append(
                    f"{path.relative_to(PACKAGE.parent)}:{line} ({mine}, layer {LAYERS[mine]}) "
                    f"imports {target} ({theirs}, layer {LAYERS[theirs]})"
                )
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_no_import_cycles():
    """The module import graph (lazy imports included) has no cycle."""
    graph = nx.DiGraph()
    graph.add_nodes_from(MODULES)
    for module, (_, tree) in MODULES.items():
        graph.add_edges_from((module, target) for target, _ in _imports(module, tree))
    cycles = [" → ".join([*c, c[0]]) for c in nx.simple_cycles(graph)]
    assert not cycles, "import cycles:\n" + "\n".join(sorted(cycles))


def _functions(tree: ast.AST):
    """Every function and method in ``tree``, nested ones included."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def test_functions_are_short():
    """No function or method is longer than 60 lines (``def`` to last line, decorators aside)."""
    long = []
    for _, (path, tree) in MODULES.items():
        for fn in _functions(tree):
            n = fn.end_lineno - fn.lineno + 1
            if n > MAX_FUNCTION_LINES:
                long.append(f"{path.relative_to(PACKAGE.parent)}:{fn.lineno} {fn.name}: {n} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def _public(name: str) -> bool:
    """Whether a name is public (not underscore-prefixed; dunders count as private here)."""
    return not name.startswith("_")


def test_public_functions_and_classes_have_docstrings():
    """Public module-level functions and classes, and public methods of those, have docstrings."""
    missing = []
    defs = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    for _, (path, tree) in MODULES.items():
        where = path.relative_to(PACKAGE.parent)
        for node in tree.body:
            if not isinstance(node, defs) or not _public(node.name):
                continue
            if ast.get_docstring(node) is None:
                missing.append(f"{where}:{node.lineno} {node.name}")
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    is_method = isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                    if is_method and _public(item.name) and ast.get_docstring(item) is None:
                        missing.append(f"{where}:{item.lineno} {node.name}.{item.name}")
    assert not missing, "public definitions without a docstring:\n" + "\n".join(missing)


def test_subpackages_have_docstrings():
    """Every ``zionsim/<pkg>/__init__.py`` has a docstring (what the layer owns and may import)."""
    missing = [
        str(path.relative_to(PACKAGE.parent))
        for path in sorted(PACKAGE.glob("*/__init__.py"))
        if ast.get_docstring(MODULES[_module_name(path)][1]) is None
    ]
    assert not missing, "subpackages without a docstring: " + ", ".join(missing)
