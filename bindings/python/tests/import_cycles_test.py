"""No two modules of the distkit package import each other, directly or
through others. Every import statement counts, also one inside a function
(a deferred import hides a cycle, it does not remove it). The modules are
read with ast, not imported, so the test needs neither torch nor the
library."""
import ast
import os
import sys
import unittest

PACKAGE = "distkit"
# The package's folder: given as its __init__.py (Bazel), else beside tests/.
ROOT = os.path.dirname(sys.argv.pop(1)) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", PACKAGE)


def package_modules(root: str) -> dict:
    """Dotted module name -> (path, is a package's __init__)."""
    modules = {}
    for folder, _, files in os.walk(root):
        relative = os.path.relpath(folder, root)
        parts = [PACKAGE] + ([] if relative == "." else relative.split(os.sep))
        for name in files:
            if not name.endswith(".py"):
                continue
            is_init = name == "__init__.py"
            dotted = ".".join(parts if is_init else parts + [name[:-3]])
            modules[dotted] = (os.path.join(folder, name), is_init)
    return modules


def imported_modules(module: str, path: str, is_init: bool, modules: dict) -> list:
    """(line, module) for every module of the package `module` imports by
    name. `from X import y` names X.y where that is a module, else X."""
    package = module if is_init else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.append((node.lineno, submodule if submodule in modules else source))
    return [(line, name) for line, name in found if name in modules and name != module]


def import_graph(root: str) -> dict:
    """module -> {imported module: first line importing it}."""
    modules = package_modules(root)
    graph = {}
    for module, (path, is_init) in modules.items():
        edges = {}
        for line, target in imported_modules(module, path, is_init, modules):
            edges.setdefault(target, line)
        graph[module] = edges
    return graph


def cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan),
    each as a sorted list."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def describe(component: list, graph: dict) -> str:
    return "; ".join(f"{a} imports {b} (line {graph[a][b]})"
                     for a in component for b in sorted(graph[a]) if b in component)


class ImportCyclesTest(unittest.TestCase):

    def test_finds_the_package(self):
        graph = import_graph(ROOT)
        self.assertIn(PACKAGE, graph)
        self.assertIn(f"{PACKAGE}.dist.groups", graph)
        self.assertIn(f"{PACKAGE}.fsdp.unit", graph)

    def test_no_cycles(self):
        graph = import_graph(ROOT)
        found = cycles(graph)
        self.assertEqual(found, [], "\n".join(describe(c, graph) for c in found))

    def test_detects_a_cycle(self):
        """The check itself: a cycle through a deferred import is found."""
        graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 9}, "d": {"a": 1}}
        self.assertEqual(cycles(graph), [["a", "b", "c"]])


if __name__ == "__main__":
    unittest.main()
