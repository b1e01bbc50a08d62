"""The imports keep the house's shape: no circle between the files of ``core`` and ``kernels``, and nothing imports
upward (``kernels`` never imports ``core``; ``core`` never imports ``ui``, ``app``, gradio or a browser).

A file's edges are its module-level imports of other files (``from core.lrp.views import X`` -> core/lrp/views.py;
``from core.lrp import views`` -> the submodule too). An import inside a function is a deferred dependency (the
explicit registries import a paper package when it is asked for, e.g. ``core.examples`` and ``core.cli``): it is
not an edge of a circle, but it is checked for the upward rule like any other. Then
``test_no_circle_and_no_upward_arrow_counting_every_import`` counts every import, inside functions too, with
tools/import_graph.py (issue 44): no circle even then.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOTS = ("core", "kernels")
FORBIDDEN = {"kernels": {"core", "ui", "app", "gradio", "playwright"}, "core": {"ui", "app", "gradio", "playwright"}}


def modules() -> dict[str, Path]:
    """``{dotted module name: file}`` of every Python file under core/ and kernels/."""
    out = {}
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(path: Path, module: str, *, top_level: bool, known=()) -> list[str]:
    """The dotted names ``path`` imports: ``import a.b`` gives ``a.b``; ``from a import b`` gives ``a.b`` when that is
    a module of ``known`` (a submodule), else ``a`` (a name defined by ``a``). With ``top_level``, only the imports
    run when the module is imported (not those inside a function)."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def walk(node, inside_function: bool):
        for child in ast.iter_child_nodes(node):
            deferred = inside_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import) and not (top_level and inside_function):
                yield from (a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom) and not (top_level and inside_function):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[:len(package.split(".")) - child.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for a in child.names:
                    yield f"{base}.{a.name}" if f"{base}.{a.name}" in known or not known else base
            yield from walk(child, deferred)
    return list(walk(tree, False))


def graph() -> dict[str, set[str]]:
    """Module-level import edges between the files of core/ and kernels/."""
    mods = modules()
    return {m: {n for n in _imports(p, m, top_level=True, known=mods) if n in mods and n != m}
            for m, p in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each as a sorted list."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_circle_between_files():
    found = cycles(graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def _every_import():
    import sys

    sys.path.insert(0, str(REPO / "tools"))
    try:
        import import_graph
    finally:
        sys.path.remove(str(REPO / "tools"))
    return import_graph.build(REPO)


def test_no_circle_and_no_upward_arrow_counting_every_import():
    """Issue 44: every import in every file of core/, ui/, kernels/ and app.py (module level and inside functions,
    importlib over listed names too): no circle between files, no upward arrow (shared core imports no paper, only
    the registry core/papers.py does; core imports no UI; kernels import no core), and the tool's list of the papers
    is the registry's."""
    from core import papers

    g = _every_import()
    assert g.papers == papers.titles()
    found = g.circles(local=True)
    assert not found, "circles: " + "; ".join(", ".join(c["files"]) for c in found)
    up = g.upward()
    assert not up, "upward: " + "; ".join(f"{u['file']}:{u['line']} {u['text']}" for u in up)


def test_nothing_imports_upward():
    bad = []
    for module, path in modules().items():
        forbidden = FORBIDDEN[module.split(".")[0]]
        for name in _imports(path, module, top_level=False):
            if name.split(".")[0] in forbidden:
                bad.append(f"{path.relative_to(REPO)} imports {name}")
    assert not bad, "\n".join(sorted(set(bad)))


CHOICE_NAMES = {"use_triton", "kernel_trusted", "device_eligible", "triton_available", "interpreting"}


def _names(path: Path) -> set[str]:
    """Every identifier a file uses: names, attributes, imported names and their aliases, keyword arguments."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {part for a in node.names for part in (a.name.split(".")[-1], a.asname) if part}
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)
    return out


def triton_specific(name: str) -> bool:
    """A name that belongs to the kernels' choice of implementation: a Triton function or flag (any name with
    ``triton`` in it), the dispatcher's predicates, or a kernel's ``*_eligible`` / ``*_chosen`` test."""
    return "triton" in name.lower() or name in CHOICE_NAMES or name.endswith(("_chosen", "_eligible"))


def test_core_leaves_the_kernel_choice_to_the_kernels():
    """``core`` names no Triton function and makes no kernel choice: it calls the kernels' entry points (e.g.
    ``kernels.neuzip_rans.fused_decode_bf16``, which answers None where the fused kernel does not apply or is not
    chosen) and their dispatchers. Prose (docstrings, comments, strings) may say Triton."""
    found = [f"{p.relative_to(REPO)}: {name}" for p in sorted((REPO / "core").rglob("*.py"))
             for name in sorted(_names(p)) if triton_specific(name)]
    assert not found, found


def test_the_name_rule_finds_a_triton_name_and_a_choice(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('from kernels.neuzip_rans import pair_rans_decode_bf16_triton as fast\n'
                    'import kernels.dispatch as d\n\n\ndef f(x):\n    """Triton in prose is fine."""\n'
                    '    return d.merge_chosen(x) or fast(x, block=4)\n')
    assert {n for n in _names(path) if triton_specific(n)} == {"pair_rans_decode_bf16_triton", "merge_chosen"}

def test_the_checker_finds_a_circle_and_a_deferred_import_is_no_edge(tmp_path):
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    path = tmp_path / "m.py"
    path.write_text("import core.x\nfrom . import y\n\ndef f():\n    from core import z\n")
    assert _imports(path, "core.pkg.m", top_level=True, known={"core.x", "core.pkg.y"}) == ["core.x", "core.pkg.y"]
    assert _imports(path, "core.pkg.m", top_level=False, known={"core.x"}) == ["core.x", "core.pkg", "core"]
