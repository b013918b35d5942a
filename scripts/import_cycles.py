"""Find import cycles among the modules of a package, counting imports inside functions.

Every ``import x`` / ``from x import y`` anywhere in a module (top level, functions, classes,
``if TYPE_CHECKING`` blocks aside) is an edge from that module to the package module it names;
``from pkg import mod`` counts as importing ``pkg.mod`` when that is a module. Importing a
submodule also runs its package's ``__init__``, so an edge goes to each package on the way.
A cycle is a strongly connected component of more than one module (or a module importing itself).

    python scripts/import_cycles.py [src/jevkedro]     # exit 1 and list the cycles when there are any
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def module_names(root: Path) -> dict[str, Path]:
    package = root.name
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join([package, *parts])] = path
    return names


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skip = {id(n) for block in ast.walk(tree) if _type_checking_only(block) for b in block.body for n in ast.walk(b)}
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [stem] + [f"{stem}.{a.name}" for a in node.names]
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):  # the packages on the way run too
                prefix = ".".join(parts[:i])
                if prefix in modules and prefix != name and not name.startswith(prefix + "."):
                    found.add(prefix)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one member."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                out.append(sorted(members))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else "src/jevkedro")
    modules = module_names(root)
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    found = cycles(graph)
    for members in found:
        print("import cycle:", " <-> ".join(members))
        for m in members:
            print(f"  {m} imports {', '.join(sorted(graph[m] & set(members)))}")
    print(f"{len(modules)} modules, {sum(map(len, graph.values()))} imports, {len(found)} cycles")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
