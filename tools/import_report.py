"""tools/import_graph.py's report in words (its ``--json`` prints the same as one JSON object)."""
from __future__ import annotations

from collections import Counter


def _where(s: dict) -> str:
    listed = f"  [-> {s['to'] or s['target']}]" if s.get("how") == "import_module (listed)" else ""
    return f"{s['file']}:{s['line']}{' (in ' + s['scope'] + ')' if s['local'] else ''}: {s['text']}{listed}"


def text_report(r: dict, roots=("core", "ui", "kernels", "app.py")) -> str:
    """The report of :meth:`tools.import_graph.Graph.report` in words; ``roots``: the folders and files it read."""
    s = r["summary"]
    lines = [f"Import graph of {r['files']} files ({', '.join(roots)}) counting every import "
             f"({r['imports']['names']} imported names, {r['imports']['project']} of them project files).",
             f"  circles between files: {s['circles']} ({s['files_in_circles']} files); at import time "
             f"(module-level imports only): {len(r['circles_module_level'])}",
             f"  upward arrows: {s['upward']} imports, {s['upward_pairs']} (file, package) pairs"
             + (f" ({', '.join(f'{k}: {v}' for k, v in s['upward_by_rule'].items())})" if s["upward"] else ""),
             f"  function-local import statements: {s['function_local_imports']} "
             f"({', '.join(f'{k}: {v}' for k, v in r['function_local']['by_root'].items())}), "
             f"{s['function_local_project_imports']} of them of a project file "
             f"({', '.join(f'{k}: {v}' for k, v in r['function_local']['project_by_root'].items())}); "
             f"module-level statements: {r['function_local']['module_level_statements']}",
             f"  function-local imports of project files that keep no heavy package out of import time: "
             f"{s['function_local_without_reason']}",
             f"  imports between paper packages (sideways): {len(r['sideways'])}",
             f"  string literals naming the papers outside their packages: {len(r['hand_lists'])} places in "
             f"{len({h['file'] for h in r['hand_lists']})} files",
             f"  import_module of a name that is not a literal: {len(r['dynamic'])}", ""]
    for i, c in enumerate(r["circles"], 1):
        lines.append(f"Circle {i}: {len(c['files'])} files: {', '.join(c['files'])}")
        lines += [f"    {_where(x)}" for x in c["imports"]]
        lines.append("")
    if r["circles_module_level"]:
        lines.append("Circles of the module-level imports alone:")
        lines += [f"    {', '.join(c['files'])}" for c in r["circles_module_level"]]
        lines.append("")
    if r["upward"]:
        lines.append("Upward arrows:")
        lines += [f"    [{u['rule']}] {_where(u)}" for u in r["upward"]]
        lines.append("")
    if r["sideways"]:
        lines.append("Sideways (one paper package importing another):")
        lines += [f"    {_where(u)}" for u in r["sideways"]]
        lines.append("")
    lines.append("Function-local import statements by file (most first; of project files in brackets):")
    lines += [f"    {n['statements']:4d} ({n['project']:3d})  {f}" for f, n in r["function_local"]["by_file"].items()]
    lines.append("")
    if r["lazy_without_reason"]:
        lines.append("Function-local imports that keep no heavy package out of import time (they could stand at the "
                     "top):")
        lines += [f"    {_where(x)}" for x in r["lazy_without_reason"]]
        lines.append("")
    if r["hand_lists"]:
        lines.append("Papers named by hand outside their packages (string literals):")
        strings = Counter(h["file"] for h in r["hand_lists"] if h["kind"] == "string")
        folded = set()
        for h in r["hand_lists"]:
            if h["kind"] != "string" or strings[h["file"]] <= 3:
                lines.append(f"    {h['file']}:{h['line']} [{h['kind']}; {', '.join(h['papers'])}] "
                             f"{h['excerpt'].splitlines()[0]}")
            elif h["file"] not in folded:  # many single names in one file (e.g. element ids): one line for them
                folded.add(h["file"])
                same = [g for g in r["hand_lists"] if g["file"] == h["file"] and g["kind"] == "string"]
                lines.append(f"    {h['file']}:{same[0]['line']}-{same[-1]['line']} [{len(same)} strings; "
                             f"{', '.join(sorted({p for g in same for p in g['papers']}))}] "
                             f"{', '.join(sorted({g['excerpt'][:30] for g in same})[:4])}, ...")
        lines.append("")
    if r["dynamic"]:
        lines.append("import_module of a computed name (not followed):")
        lines += [f"    {d['file']}:{d['line']}: {d['text']}" for d in r["dynamic"]]
    return "\n".join(lines).rstrip() + "\n"
