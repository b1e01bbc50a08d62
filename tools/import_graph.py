"""The house's import graph, counting every import: module level and inside functions and methods.

    python tools/import_graph.py [--json] [--root DIR] [--papers lrp,mathneuro,mixln,neuzip]

Reads (never imports) every ``.py`` file under ``core/``, ``ui/`` and ``kernels/`` and ``app.py`` with :mod:`ast`, and
takes every ``import x``, ``from x import y`` (relative ones too), ``importlib.import_module("literal")`` and
``__import__("literal")`` wherever it stands; an ``import_module(NAME[...])`` or a loop ``for m in NAME:
import_module(m)`` over a module-level tuple, list or dict of literals counts as an import of each of them. Each is
mapped to a file of the project: ``import a.b`` and ``from a import b`` where ``a.b`` is a module give ``a/b.py`` (or
``a/b/__init__.py``); ``from a import name`` gives ``a``'s file. A package's ``__init__`` that Python runs on the way
(``a/__init__.py`` for ``import a.b`` or ``from a import b``) is not an edge: every package would be a circle with its
own submodules. What it reports:

- **circles**: the strongly connected groups (more than one file) of the file graph of every import, each with the
  import lines inside it (``file:line``, and whether the import sits in a function); and, beside them, the circles of
  the module-level imports alone (what Python meets at import time).
- **upward arrows**: a shared core module (``core/*.py`` and the core subpackages that are not a paper's) importing a
  paper package ``core/<paper>``; ``core`` importing ``ui``, ``app``, gradio or playwright; ``kernels`` importing
  ``core``, ``ui``, ``app`` or gradio; ``ui`` importing ``app``. The paper registry (``--registry``, default
  ``core/papers.py``) is the one shared module allowed to import the papers. Imports between two paper packages are
  listed apart (sideways, not upward).
- **function-local imports**: how many import statements sit inside a function or method, per file (all of them, and
  those of a project file), and which of those of a project file keep no heavy third-party package (:data:`HEAVY`)
  out of the importer's import time, so could stand at the top of the file.
- **hand lists of the papers**: the string literals naming a paper (its package name, its title, or a dotted name or
  link with it as one part, e.g. ``core.lrp``, ``ui.tabs.mixln``, ``?tab=neuzip``) in the shared modules, the CLI, the UI's
  shared modules and ``tools/`` (the registry aside: it is the one list), grouped by the tuple, list, set, dict or
  comparison that holds them.
- **dynamic imports**: ``importlib.import_module(...)`` of a name that is not a literal (the graph cannot follow it).

``--json`` prints the same as one JSON object. Nothing here imports the project: it runs without torch or gradio.
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script (python tools/import_graph.py): the repository's packages

from tools.import_report import text_report  # noqa: E402

ROOTS = ("core", "ui", "kernels", "app.py")  # the files of the graph
# The four papers (package name -> title). The one list of the app is the paper registry; this tool reads files
# without importing them, so it keeps its own default, and --papers overrides it.
PAPERS = {"lrp": "MambaLRP", "mathneuro": "MathNeuro", "mixln": "Mix-LN", "neuzip": "NeuZip"}
REGISTRY = "core/papers.py"
UI_ONLY = {"gradio", "playwright"}  # third-party packages only ui/ (and tools) may import
# third-party packages whose import costs time or memory: a function-local import that keeps one of them out of the
# importer's import time buys something (laziness); one that does not could stand at the top of the file
HEAVY = {"torch", "transformers", "plotly", "pandas", "pyarrow", "gradio", "datasets", "triton", "scipy", "sklearn",
         "tokenizers", "huggingface_hub", "safetensors", "numpy", "mamba_ssm", "bitsandbytes", "accelerate",
         "starlette", "playwright", "PIL", "matplotlib"}


@dataclass
class Site:
    """One import: where it stands and what it names."""

    file: str  # relative path of the importing file
    line: int
    text: str  # the source line, stripped
    target: str  # the dotted name it resolves to (a project module, or a third-party top-level name)
    to: str | None  # the project file it reaches, or None (third party, or beyond the project)
    local: bool  # inside a function or method
    scope: str  # the enclosing function's qualified name, or "<module>"
    how: str  # "import", "from", "import_module"


@dataclass
class Graph:
    root: Path
    papers: dict[str, str]
    registry: str = REGISTRY
    files: dict[str, str] = field(default_factory=dict)  # dotted module -> relative path
    sites: list[Site] = field(default_factory=list)
    dynamic: list[dict] = field(default_factory=list)

    # ---- reading ---------------------------------------------------------------------------------------------------
    def scan(self, roots=ROOTS) -> "Graph":
        for root in roots:
            base = self.root / root
            paths = [base] if base.suffix == ".py" else sorted(base.rglob("*.py")) if base.is_dir() else []
            for path in paths:
                rel = path.relative_to(self.root)
                parts = rel.with_suffix("").parts
                self.files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = rel.as_posix()
        for module, rel in sorted(self.files.items()):
            self._read(module, rel)
        return self

    def _read(self, module: str, rel: str) -> None:
        source = (self.root / rel).read_text()
        lines = source.splitlines()
        package = module if rel.endswith("__init__.py") else module.rpartition(".")[0]
        graph = self

        def add(node, names, how, scope):
            for name in names:
                if name is None:
                    continue
                target, to = graph._resolve(name)
                graph.sites.append(Site(rel, node.lineno, lines[node.lineno - 1].strip(), target, to,
                                        scope != "<module>", scope, how))

        def relative(level: int, name: str | None) -> str | None:
            if not level:
                return name
            parts = package.split(".") if package else []
            if level - 1 > len(parts):
                return None
            anchor = parts[:len(parts) - level + 1]
            return ".".join(anchor + ([name] if name else [])) or None

        tree = ast.parse(source, filename=rel)
        constants = _string_constants(tree)

        def visit(node, scope: str, qual: list[str], loops: dict[str, ast.AST]):
            for child in ast.iter_child_nodes(node):
                inner_loops = loops
                if isinstance(child, (ast.For, ast.AsyncFor, ast.comprehension)) and \
                        isinstance(child.target, ast.Name):
                    inner_loops = {**loops, child.target.id: child.iter}
                inner_scope, inner_qual = scope, qual
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    inner_qual = qual + [child.name]
                    inner_scope = ".".join(inner_qual)
                elif isinstance(child, ast.Lambda):
                    inner_scope = ".".join(qual + ["<lambda>"])
                elif isinstance(child, ast.ClassDef):
                    inner_qual = qual + [child.name]  # a class body runs where the class statement runs
                if isinstance(child, ast.Import):
                    add(child, [a.name for a in child.names], "import", scope)
                elif isinstance(child, ast.ImportFrom):
                    base = relative(child.level, child.module)
                    if base is not None:
                        subs = [f"{base}.{a.name}" for a in child.names if a.name != "*"]
                        found = [s for s in subs if s in graph.files]
                        # each name that is a submodule is an edge to it; the other names come from the base module
                        add(child, found + ([base] if len(found) < len(child.names) else []), "from", scope)
                elif isinstance(child, ast.Call) and _is_import_call(child):
                    name = _literal_module(child, relative)
                    listed = [] if name is not None else _listed_modules(child, constants, loops)
                    if name is not None:
                        add(child, [name], "import_module", scope)
                    elif listed:  # a name from a module-level list of literals: each of them
                        add(child, listed, "import_module (listed)", scope)
                    else:
                        graph.dynamic.append({"file": rel, "line": child.lineno,
                                              "text": lines[child.lineno - 1].strip(), "local": scope != "<module>"})
                visit(child, inner_scope, inner_qual, inner_loops)

        visit(tree, "<module>", [], {})

    def _resolve(self, name: str) -> tuple[str, str | None]:
        """The project file ``name`` reaches (its longest prefix that is a module here), or its top-level name."""
        parts = name.split(".")
        for n in range(len(parts), 0, -1):
            candidate = ".".join(parts[:n])
            if candidate in self.files:
                return candidate, self.files[candidate]
        return parts[0], None

    # ---- the graph -------------------------------------------------------------------------------------------------
    def edges(self, local: bool = True) -> dict[str, dict[str, list[Site]]]:
        """``{file: {imported file: [sites]}}``; ``local=False`` keeps the module-level imports only."""
        out: dict[str, dict[str, list[Site]]] = {rel: defaultdict(list) for rel in self.files.values()}
        for s in self.sites:
            if s.to is not None and s.to != s.file and (local or not s.local):
                out[s.file][s.to].append(s)
        return out

    def circles(self, local: bool = True) -> list[dict]:
        """Each strongly connected group of more than one file, with the imports between its files."""
        edges = self.edges(local)
        groups = strongly_connected({f: set(t) for f, t in edges.items()})
        out = []
        for group in groups:
            members = set(group)
            inside = [s for f in group for t, sites in sorted(edges[f].items()) if t in members for s in sites]
            out.append({"files": group, "imports": [_site_dict(s) for s in inside]})
        return sorted(out, key=lambda c: (-len(c["files"]), c["files"]))

    def paper_of(self, rel: str) -> str | None:
        parts = rel.split("/")
        return parts[1] if parts[0] == "core" and len(parts) > 2 and parts[1] in self.papers else None

    def upward(self) -> list[dict]:
        """The imports that point up the house (see the module doc), each with its rule."""
        out = []
        for s in self.sites:
            top, target_top = s.file.split("/")[0], s.target.split(".")[0]
            rule = None
            if top == "core":
                if target_top in ("ui", "app") or target_top in UI_ONLY:
                    rule = "core imports the UI"
                elif (self.paper_of(s.file) is None and s.file != self.registry and s.to is not None
                      and self.paper_of(s.to) is not None):
                    rule = "shared core imports a paper"
            elif top == "kernels" and (target_top in ("core", "ui", "app") or target_top in UI_ONLY):
                rule = "kernels import core or the UI"
            elif top == "ui" and target_top == "app":
                rule = "ui imports app"
            if rule:
                out.append({"rule": rule, **_site_dict(s)})
        return out

    def sideways(self) -> list[dict]:
        """Imports from one paper package into another (not upward, but a seam between papers)."""
        return [_site_dict(s) for s in self.sites if s.to is not None and self.paper_of(s.file) is not None
                and self.paper_of(s.to) not in (None, self.paper_of(s.file))]

    def heavy_at_import(self) -> dict[str, set[str]]:
        """Per file, the :data:`HEAVY` packages importing it loads (its module-level imports, followed through the
        project's files and the packages' ``__init__`` files Python runs on the way)."""
        edges: dict[str, set[str]] = defaultdict(set)
        direct: dict[str, set[str]] = defaultdict(set)
        for s in self.sites:
            if not s.local:
                if s.to is not None:
                    edges[s.file] |= {s.to, *self._packages_of(s.to)}
                elif s.target in HEAVY:
                    direct[s.file].add(s.target)
        for rel in self.files.values():
            edges[rel] |= set(self._packages_of(rel))
        out: dict[str, set[str]] = {}
        for rel in self.files.values():  # a search from each file: a few hundred files, cheap
            seen, todo, found = {rel}, [rel], set()
            while todo:
                f = todo.pop()
                found |= direct[f]
                for t in edges[f] - seen:
                    seen.add(t)
                    todo.append(t)
            out[rel] = found
        return out

    def _packages_of(self, rel: str) -> list[str]:
        parts = rel.split("/")[:-1]
        inits = ["/".join(parts[:i]) + "/__init__.py" for i in range(1, len(parts) + 1)]
        return [p for p in inits if p != rel and p in self._rels()]

    def _rels(self) -> set[str]:
        if getattr(self, "_rel_set", None) is None or len(self._rel_set) != len(self.files):
            self._rel_set = set(self.files.values())
        return self._rel_set

    def lazy_without_reason(self) -> list[dict]:
        """The function-local imports of a project file that keep no :data:`HEAVY` package out of the importer's
        import time (the importer loads them anyway, or the target loads none): they could stand at the top of the
        file. The registry's imports of the papers are left out (they defer a whole paper by design)."""
        heavy = self.heavy_at_import()
        statements: dict[tuple[str, int], list[Site]] = defaultdict(list)
        for s in self.sites:
            if s.local and s.to is not None and s.to != s.file and s.file != self.registry:
                statements[(s.file, s.line)].append(s)
        out = []
        for (rel, line), sites in sorted(statements.items()):
            gained = set().union(*(heavy[s.to] | {h for p in self._packages_of(s.to) for h in heavy[p]}
                                   for s in sites)) - heavy[rel]
            if not gained:
                out.append(_site_dict(sites[0]))
        return out

    def local_counts(self) -> dict:
        local = [s for s in self.sites if s.local]
        # statements, not names: `from a import b, c` inside a function is one import
        statements = {(s.file, s.line) for s in local}
        project = {(s.file, s.line) for s in local if s.to is not None}  # of a file of the project
        by_file = Counter(f for f, _ in statements)
        return {"statements": len(statements), "names": len(local), "project_statements": len(project),
                "module_level_statements": len({(s.file, s.line) for s in self.sites if not s.local}),
                "by_root": dict(sorted(Counter(f.split("/")[0] for f, _ in statements).items())),
                "project_by_root": dict(sorted(Counter(f.split("/")[0] for f, _ in project).items())),
                "by_file": {f: {"statements": n, "project": sum(1 for g, _ in project if g == f)}
                            for f, n in sorted(by_file.items(), key=lambda x: (-x[1], x[0]))}}

    # ---- the hand lists of the papers ------------------------------------------------------------------------------
    def hand_lists(self, extra=("tools",)) -> list[dict]:
        """Where a shared module names the papers in string literals (see the module doc)."""
        paths = [rel for rel in self.files.values() if self._shared_for_lists(rel)]
        for root in extra:
            base = self.root / root
            if base.is_dir():
                paths += [p.relative_to(self.root).as_posix() for p in sorted(base.rglob("*.py"))
                          if p.resolve() != Path(__file__).resolve()]  # this tool's own default list aside
        out = []
        for rel in sorted(set(paths)):
            out += paper_literals(self.root / rel, rel, self.papers)
        return out

    def _shared_for_lists(self, rel: str) -> bool:
        parts = rel.split("/")
        if parts[0] == "core":  # the registry is the one list
            return self.paper_of(rel) is None and rel != self.registry
        if parts[0] == "ui":  # a paper's own tab (ui/<paper>.py, ui/<paper>_*.py, ui/tabs/<paper>/...) names its paper
            names = [Path(part).stem for part in parts[1:]]
            return not any(n == p or n.startswith(p + "_") for n in names for p in self.papers)
        return rel == "app.py"

    def report(self) -> dict:
        upward = self.upward()
        circles = self.circles()
        local = self.local_counts()
        lazy = self.lazy_without_reason()
        return {"root": str(self.root), "files": len(self.files), "papers": list(self.papers),
                "imports": {"names": len(self.sites), "project": sum(s.to is not None for s in self.sites)},
                "circles": circles, "circles_module_level": self.circles(local=False),
                "upward": upward, "sideways": self.sideways(), "function_local": local,
                "hand_lists": self.hand_lists(), "dynamic": self.dynamic, "lazy_without_reason": lazy,
                "summary": {"circles": len(circles), "files_in_circles": sum(len(c["files"]) for c in circles),
                            "upward": len(upward), "upward_by_rule": dict(Counter(u["rule"] for u in upward)),
                            # the same arrows counted once per importing file and imported package
                            "upward_pairs": len({(u["file"], (u["to"] and self.paper_of(u["to"])) or u["target"].split(".")[0])
                                                 for u in upward}),
                            "function_local_imports": local["statements"],
                            "function_local_project_imports": local["project_statements"],
                            "function_local_without_reason": len(lazy)}}


def _site_dict(s: Site) -> dict:
    return {k: v for k, v in asdict(s).items()}


def _is_import_call(node: ast.Call) -> bool:
    f = node.func
    return (isinstance(f, ast.Attribute) and f.attr == "import_module") or \
        (isinstance(f, ast.Name) and f.id in ("import_module", "__import__"))


def _literal_module(node: ast.Call, relative) -> str | None:
    """The module an ``import_module("x")`` names, when it is a literal (a relative one with a literal package)."""
    if not node.args or not (isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return None
    name = node.args[0].value
    if not name.startswith("."):
        return name
    package = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "package"),
                                                           None)
    if not (isinstance(package, ast.Constant) and isinstance(package.value, str)):
        return None
    level = len(name) - len(name.lstrip("."))
    parts = package.value.split(".")
    anchor = parts[:len(parts) - level + 1]
    return ".".join(anchor + ([name.lstrip(".")] if name.lstrip(".") else []))


def _string_constants(tree: ast.Module) -> dict[str, list[str]]:
    """The module-level names bound to a tuple, list, set or dict of string literals (a dict: its values, or its
    keys when the values are not strings), e.g. ``KINDS = {"lrp": "core.lrp.batch", ...}``."""
    out = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        value = getattr(node, "value", None)
        if not isinstance(target, ast.Name) or value is None:
            continue
        items = value.values if isinstance(value, ast.Dict) else getattr(value, "elts", None)
        if isinstance(value, ast.Dict) and not all(isinstance(v, ast.Constant) and isinstance(v.value, str)
                                                   for v in items):
            items = value.keys
        if items and all(isinstance(v, ast.Constant) and isinstance(v.value, str) for v in items):
            out[target.id] = [v.value for v in items]
    return out


def _listed_modules(call: ast.Call, constants: dict[str, list[str]], loops: dict[str, ast.AST]) -> list[str]:
    """The modules an ``import_module(expr)`` may name when ``expr`` reads a module-level list of literals, directly
    (``import_module(KINDS[name])``) or through a loop over it (``for m in TABS: import_module(m)``)."""
    if not call.args:
        return []
    names = [n.id for n in ast.walk(call.args[0]) if isinstance(n, ast.Name)]
    for n in list(names):
        if n in loops:
            names += [m.id for m in ast.walk(loops[n]) if isinstance(m, ast.Name)]
    return [value for n in dict.fromkeys(names) for value in constants.get(n, ())]


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one node (Tarjan's algorithm, without recursion), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            advanced = False
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(groups)


def paper_literals(path: Path, rel: str, papers: dict[str, str]) -> list[dict]:
    """The string literals of a file that name a paper (not docstrings, not comments), grouped by the tuple, list,
    set, dict or comparison holding them; each group with its line, the names and a short source excerpt."""
    source = path.read_text()
    tree = ast.parse(source, filename=rel)
    words = {p: p for p in papers} | {re.sub(r"\W", "", t).lower(): p for p, t in papers.items()}
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}

    def named(text: str) -> tuple[str | None, str]:
        """(paper, how): ``exact`` (the name or title itself), ``part`` (a dotted name, path or link with it)."""
        if text in papers:
            return text, "exact"
        if text in papers.values():
            return next(p for p, t in papers.items() if t == text), "exact"
        for token in re.split(r"[^A-Za-z0-9_]+", text):
            if token.lower() in words:
                return words[token.lower()], "part"
        return None, ""

    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    groups: dict[int, dict] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docstrings:
            continue
        if isinstance(parents.get(id(node)), ast.JoinedStr):
            continue  # a piece of an f-string's text: its words are prose
        paper, how = named(node.value)
        if paper is None or (how == "part" and len(node.value) > 80):  # long text is a message, not a name
            continue
        holder, up = node, parents.get(id(node))
        while up is not None and not isinstance(up, ast.stmt):
            if isinstance(up, (ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Compare)):
                holder = up
            up = parents.get(id(up))
        g = groups.setdefault(id(holder), {"file": rel, "line": holder.lineno,
                                           "kind": type(holder).__name__.lower() if holder is not node else "string",
                                           "papers": [], "strings": [],
                                           "excerpt": (ast.get_source_segment(source, holder) or "")[:160]})
        if isinstance(holder, ast.Dict) and any(node is k for k in holder.keys):
            g["kind"] = "dict keys"
        g["papers"] = sorted(set(g["papers"]) | {paper})
        g["strings"].append(node.value)
    return sorted(groups.values(), key=lambda g: (g["file"], g["line"]))


def build(root: Path = REPO, papers: dict[str, str] | None = None, registry: str = REGISTRY,
          roots=ROOTS) -> Graph:
    return Graph(Path(root), dict(PAPERS if papers is None else papers), registry).scan(roots)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--root", type=Path, default=REPO, help="the repository (default: this one)")
    parser.add_argument("--papers", help="the paper packages, comma-separated, each NAME or NAME=Title "
                        f"(default: {','.join(f'{k}={v}' for k, v in PAPERS.items())})")
    parser.add_argument("--registry", default=REGISTRY, help="the paper registry, the one shared module allowed to "
                        "import the papers (default: %(default)s)")
    args = parser.parse_args(argv)
    papers = None
    if args.papers:
        papers = dict((p.split("=", 1) + [p])[:2] for p in args.papers.split(",") if p)
    if not (args.root / "core").is_dir():
        print(f"error: {args.root} has no core/ folder (give the repository with --root).", file=sys.stderr)
        return 2
    r = build(args.root, papers, args.registry).report()
    print(json.dumps(r, indent=1) if args.json else text_report(r, ROOTS), end="\n" if args.json else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
