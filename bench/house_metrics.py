"""Measure the code's house rules: long functions, long files, import cycles, private cross-imports,
and the figures of its shape: import depth, folders that import each other, values checked again
where they were checked before (mode checks, meter-spec parses, the timed phase as a state string).

Usage: python bench/house_metrics.py [ROOT]   (ROOT: a checkout of npmpi, default this one)

Counts Python functions in npmpi/ and analysis/npmpi_analysis/ by their lines (def to last line,
nested functions counted on their own too), C functions in csrc/ from the line opening them to the
closing brace at column 0, files over 500 lines outside tests/ and bench/, cycles in the graph of
imports between the package's modules (imports inside functions included: they cycle all the
same), and every `from M import _name` where `_name` is defined in M (not a private submodule
such as the compiled `_ckernel`).

Import depth is the longest chain of imports between the package's modules (a module importing
nothing of the package is at depth 1). Folders that import each other: the graph of imports folded
onto folders (npmpi/, npmpi/map/, ...) and its cycles, an upward import being one edge of such a cycle.
Mode checks: comparisons in Python with a mode's name ('pingpong', 'stream', 'bidir') or a `MODE_*`
constant, and in C with a `MODE_*` constant or a `mode` variable. Spec parses: calls of
`parse_meter_spec` and `check_meter_spec` outside their module. Timed-state strings: `"kernel"`
assigned to or compared with a `state`.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

PACKAGES = {"npmpi": Path("npmpi"), "npmpi_analysis": Path("analysis/npmpi_analysis")}
LONG_FUNCTION = 80
LONG_FILE = 500


def python_modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the two packages."""
    found = {}
    for package, rel in PACKAGES.items():
        for path in sorted((root / rel).rglob("*.py")):
            parts = path.relative_to(root / rel).with_suffix("").parts
            name = ".".join((package, *parts))
            found[name.removesuffix(".__init__")] = path
    return found


def functions(tree: ast.AST):
    """(qualified name, lines) of every function in a module, nested ones too."""

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                yield name, child.end_lineno - child.lineno + 1
                yield from walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def c_functions(path: Path):
    """(name, lines) of each top-level C function: a line ending a signature, then '{' ... '}'."""
    lines = path.read_text().splitlines()
    start = name = None
    for i, line in enumerate(lines):
        if start is None:
            m = re.match(r"^[A-Za-z_][\w \*]*?\b(\w+)\s*\(", line)
            if m and not line.rstrip().endswith(";"):
                # the body opens on this line or within the next few (a wrapped signature)
                for j in range(i, min(i + 6, len(lines))):
                    if lines[j].rstrip().endswith("{"):
                        start, name = i, m.group(1)
                        break
                    if lines[j].rstrip().endswith(";"):
                        break
        elif line.startswith("}"):
            yield name, i - start + 1
            start = None


def resolve(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")[: -node.level] if node.level else []
    return ".".join([*base, *([node.module] if node.module else [])])


def imports(modules: dict[str, Path], trees: dict[str, ast.AST]):
    """Edges module -> imported package module, and private names imported from another module."""
    edges: dict[str, set[str]] = {m: set() for m in modules}
    private = []
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules and alias.name != module:
                        edges[module].add(alias.name)
            elif isinstance(node, ast.ImportFrom):
                target = resolve(module, node)
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in modules:
                        if sub != module:
                            edges[module].add(sub)
                        continue
                    if target in modules and target != module:
                        if alias.name not in defined(trees[target]):
                            continue  # a submodule not in the sources, e.g. the compiled npmpi._ckernel
                        edges[module].add(target)
                        private_name = alias.name.startswith("_") and not alias.name.startswith("__")
                        if private_name and alias.name in defined(trees[target]):
                            private.append(f"{module} imports {target}.{alias.name}")
    return edges, private


def defined(tree: ast.AST) -> set[str]:
    """Names a module defines at its top level (a name it does not define is a submodule, such as the
    compiled `npmpi._ckernel` or the generated `npmpi._build_info`)."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


MODE_NAMES = {"pingpong", "stream", "bidir"}
SPEC_PARSERS = {"parse_meter_spec", "check_meter_spec"}


def _is_mode(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and node.value in MODE_NAMES:
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_mode(e) for e in node.elts)
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.startswith("MODE_") or name == "MODES"


def _is_state(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "state"


def rechecks(trees: dict[str, ast.AST]) -> dict[str, int]:
    """Mode checks, meter-spec parses and timed-state strings in the Python modules."""
    mode = spec = state = 0
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                mode += any(_is_mode(s) for s in sides)
                kernel = any(isinstance(s, ast.Constant) and s.value == "kernel" for s in sides)
                state += kernel and any(_is_state(s) for s in sides)
            elif isinstance(node, ast.Assign):
                kernel = isinstance(node.value, ast.Constant) and node.value.value == "kernel"
                state += kernel and any(_is_state(t) for t in node.targets)
            elif isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                spec += name in SPEC_PARSERS and not module.startswith("npmpi.meters.base")
    return {"mode_checks": mode, "spec_parses": spec, "state_strings": state}


def c_mode_checks(root: Path) -> int:
    """Comparisons and switch cases on a mode in the C sources."""
    n = 0
    for path in sorted((root / "csrc").glob("*.[ch]")):
        for line in path.read_text().splitlines():
            n += len(re.findall(r"[=!]=\s*MODE_\w+|\bmode\s*[=!]=|case\s+MODE_\w+", line.split("//", 1)[0]))
    return n


def depth(edges: dict[str, set[str]]) -> int:
    """The longest import chain (1: a module importing none of the package); cycles are cut."""
    memo: dict[str, int] = {}

    def visit(v, seen):
        if v in memo:
            return memo[v]
        below = [visit(w, seen | {v}) for w in edges.get(v, ()) if w not in seen]
        memo[v] = 1 + max(below, default=0)
        return memo[v]

    return max((visit(v, frozenset()) for v in edges), default=0)


def folder_of(module: str, modules: dict[str, Path]) -> str:
    """The folder (package) holding a module: a package's __init__ belongs to its own folder."""
    path = modules[module]
    return path.parent.as_posix()


def folder_cycles(edges: dict[str, set[str]], modules: dict[str, Path]) -> list[list[str]]:
    """Cycles in the imports folded onto folders: one folder importing another that imports it back."""
    folded: dict[str, set[str]] = {}
    for v, ws in edges.items():
        fv = folder_of(v, modules)
        folded.setdefault(fv, set()).update(f for w in ws if (f := folder_of(w, modules)) != fv)
    return cycles(folded)


def measure(root: Path) -> dict:
    """Every figure of the report, for the checkout at `root`."""
    modules = python_modules(root)
    trees = {m: ast.parse(p.read_text(), str(p)) for m, p in modules.items()}
    long_functions = []
    for module, tree in trees.items():
        for name, n in functions(tree):
            if n > LONG_FUNCTION:
                long_functions.append((n, f"{modules[module].relative_to(root)}:{name}"))
    for path in sorted((root / "csrc").glob("*.c")):
        for name, n in c_functions(path):
            if n > LONG_FUNCTION:
                long_functions.append((n, f"{path.relative_to(root)}:{name}"))
    long_files = []
    for path in sorted([*root.rglob("*.py"), *(root / "csrc").glob("*.[ch]")]):
        rel = path.relative_to(root)
        if rel.parts[0] in ("tests", "bench", "build") or rel.parts[0].startswith("."):
            continue
        n = len(path.read_text().splitlines())
        if n > LONG_FILE:
            long_files.append((n, str(rel)))
    edges, private = imports(modules, trees)
    hubs = sorted(((len(v), k) for k, v in edges.items()), reverse=True)[:3]
    relative = {m: p.relative_to(root) for m, p in modules.items()}
    c_funcs = [n for path in sorted((root / "csrc").glob("*.c")) for _, n in c_functions(path)]
    return {
        "folders": len({p.parent for p in modules.values()}),
        "depth": depth(edges),
        "folder_cycles": folder_cycles(edges, relative),
        **rechecks(trees),
        "c_mode_checks": c_mode_checks(root),
        "c_functions": len(c_funcs),
        "c_longest": max(c_funcs, default=0),
        "modules": len(modules),
        "long_functions": sorted(long_functions, reverse=True),
        "long_files": sorted(long_files, reverse=True),
        "cycles": cycles(edges),
        "private_imports": sorted(set(private)),
        "hubs": hubs,
    }


def main(argv: list[str]) -> int:
    """Print the figures for ROOT (default: the checkout holding this script)."""
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent
    m = measure(root)
    print(f"modules: {m['modules']} in {m['folders']} folders; import depth {m['depth']}")
    print(f"functions over {LONG_FUNCTION} lines: {len(m['long_functions'])}")
    for n, name in m["long_functions"]:
        print(f"  {n:4d} {name}")
    print(f"files over {LONG_FILE} lines: {len(m['long_files'])}")
    for n, name in m["long_files"]:
        print(f"  {n:4d} {name}")
    print(f"import cycles: {len(m['cycles'])}")
    for comp in m["cycles"]:
        print("  " + " <-> ".join(comp))
    print(f"private cross-imports: {len(m['private_imports'])}")
    for line in m["private_imports"]:
        print("  " + line)
    print(f"folders importing each other: {len(m['folder_cycles'])}")
    for comp in m["folder_cycles"]:
        print("  " + " <-> ".join(comp))
    print(f"C functions: {m['c_functions']}, longest {m['c_longest']} lines")
    print(f"mode checks: {m['mode_checks']} in Python, {m['c_mode_checks']} in C")
    print(f"meter-spec parses outside meters/base.py: {m['spec_parses']}")
    print(f"timed-state strings ('kernel' as a state): {m['state_strings']}")
    print("largest hubs (modules of the package imported): " + ", ".join(f"{k} {n}" for n, k in m["hubs"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
