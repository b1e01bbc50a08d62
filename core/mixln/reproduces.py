"""What reproduces: one row per claim of the Mix-LN paper (and of its follow-ups), each with the paper's figure, this
project's figure computed now from the committed runs (with n and its spread), and a verdict.

Every number here is read from the committed run folders (``run.json``, ``history.json``, ``diagnostics.json``);
nothing is typed in but the papers' figures (:mod:`core.mixln.published`) and the claims' wording.

Every verdict comes from :mod:`core.stats`: the comparison (difference, standard error, t, df, p and, at small n, the
exact permutation p) and the word its rule allows (:data:`core.stats.RULE`, printed in ``docs/statistics.md``):

- final held-out loss: Welch over seeds (:func:`core.mixln.summary.difference`); a side with one seed is "not
  resolved" (nothing is borrowed from the other side);
- gradient norms (logged during training, every seed): per seed the ratio of the two halves' mean norms, compared with
  1 over the seeds (paired: each seed's ratio against 1); a claim of a many-fold effect ("diminished", "vanish") met by
  under :data:`MIN_RELATIVE` of it is "too small";
- angular distance and layer removal: seed 0 only (the seed that keeps its weights), paired over the 64 held-out
  windows: the comparison is printed, and the word is "one model" (a spread over the inputs of one trained model says
  nothing about another seed's model).

Layers are split in halves: early ``l < L/2`` and deep ``l >= L/2``.

- :func:`claims`           the rows
- :func:`init_rows`        the embedding-init comparison (std 0.02 against the recipe's sqrt(2/5))
- :func:`followup_rows`    the follow-ups' published table beside the project's runs
- :func:`markdown`         the tables as Markdown, by block name (``python tools/docs.py`` writes them into
                           docs/mixln-reproduces.md and the README; this module knows no page); :func:`readme_markdown`
                           the README's table, :func:`readme_summary` its sentences with numbers
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from core.mixln.published import (FOLLOWUP_SOURCE, LNS_RERUN, MIXLN_71M, MIXLN_SOURCE, SIZES, published_rows)
from core.mixln.recipe import ASSETS, RUN_SETS, Job, recipe_label
from core.mixln.summary import difference, mean_std_text, run_diagnostic, seed_runs, seed_table
from core.stats import Comparison, paired, word

DEPTH_SETS = {"main": 12, "depth-24": 24}
INIT_SET = "12 layers, embedding init std 0.02"
# a mechanism claim (deep layers "idle", gradients that "vanish") is of a many-fold effect: a difference in its
# direction under this share of the value compared with is "too small" (core.stats.word)
MIN_RELATIVE = 0.25


def _val(mean: float, std: float | None, n: int, nd: int = 3) -> str:
    return f"{mean:.{nd}f}" + (f" ± {std:.{nd}f}" if n > 1 and std is not None else "")


class _Runs:
    """The committed runs under ``root``, read once: seed tables per set and seed-0 diagnostics."""

    def __init__(self, root: str | os.PathLike = ASSETS):
        self.root = Path(root)
        self.tables = {s: {r["run"]: r for r in seed_table(s, self.root)} for s in (*DEPTH_SETS, "init-0.02")
                       if (self.root / RUN_SETS[s].folder).is_dir()}

    def row(self, set_name: str, name: str) -> dict | None:
        return self.tables.get(set_name, {}).get(name)

    def diagnostic(self, set_name: str, name: str, analysis: str) -> dict | None:
        folder = self.root / Job(set_name, name).relative_folder
        return run_diagnostic(folder, analysis) if folder.is_dir() else None

    def per_window(self, set_name: str, name: str, analysis: str) -> np.ndarray | None:
        """(windows, layers) seed 0's d(h_l, h_l+1) (``angular``) or loss increase when skipped (``removal``)."""
        key = {"angular": ("mixln/angular", "adjacent_per_window"),
               "removal": ("mixln/removal", "loss_increase_per_window")}[analysis]
        data = self.diagnostic(set_name, name, key[0])
        if not data or not data.get(key[1]):
            return None
        return np.asarray([[np.nan if v is None else v for v in row] for row in data[key[1]]], dtype=float)

    def grad_norms(self, set_name: str, name: str, which: int) -> list[list[float]]:
        """Per seed that finished: the per-layer weight-gradient norms of log ``which`` (0: step 1, -1: the end)."""
        out = []
        for run in seed_runs(name, set_name, self.root):
            logs = run.history.get("grad_norms", [])
            if logs and run.meta.get("status") == "finished":
                out.append(logs[which]["param"])
        return out


def _halves(layers: int) -> tuple[slice, slice]:
    return slice(0, layers // 2), slice(layers // 2, layers)


def _window_contrast(a: np.ndarray, sa: slice, b: np.ndarray | None = None, sb: slice | None = None) -> dict:
    """(mean of ``a`` over layers ``sa``) minus (mean of ``b`` (default ``a``) over ``sb``), paired per window
    (:func:`core.stats.paired`), and the two means."""
    b = a if b is None else b
    sb = sa if sb is None else sb
    x, y = np.nanmean(a[:, sa], axis=1), np.nanmean(b[:, sb], axis=1)
    return {"c": paired(x, y), "a": float(np.nanmean(a[:, sa])), "b": float(np.nanmean(b[:, sb])), "windows": len(x)}


def _seed_ratio(grads: list[list[float]], num: slice, den: slice) -> dict:
    """Per seed: mean norm over layers ``num`` / mean over ``den``; their mean, std, n, and the ratios compared with
    1 (each seed's ratio against 1: :func:`core.stats.paired`)."""
    r = [float(np.mean(g[num]) / np.mean(g[den])) for g in grads]
    return {"mean": float(np.mean(r)), "std": float(np.std(r, ddof=1)) if len(r) > 1 else None, "n": len(r),
            "c": paired(r, [1.0] * len(r))}


def _m(c: Comparison, expected: str, text: str, of: dict, one_model: bool = False, rel: float | None = None) -> dict:
    """One measurement of a claim: its comparison, its word (core.stats.word), its text, and ``of``: what was
    compared (the runs, the log), so that a test can recompute it from the run files."""
    small = rel is not None and abs(rel) < MIN_RELATIVE
    return {"c": c, "word": word(c, expected, one_model=one_model, too_small=small), "text": text,
            "one_model": one_model, "of": {**of, "expected": expected, "too_small": small}}


def _claim(claim: str, paper: str, measured: list[tuple[str, dict | None, str]], source: str = "Mix-LN") -> dict:
    """A row from per-depth measurements ``(depth text, measurement, what the n is)``; one word per depth, joined
    when they differ. ``evidence``: per depth the comparison (core.stats.Comparison.as_dict) and its word."""
    parts, words, evidence = [], [], {}
    for depth, m, n_text in measured:
        if m is None:
            continue
        words.append((depth, m["word"]))
        evidence[depth] = {**m["c"].as_dict(), "word": m["word"], "one_model": m["one_model"], "of": m["of"]}
        parts.append(f"{depth}: {m['text']} ({n_text}) → {m['word']}")
    if not words:
        return {"claim": claim, "source": source, "paper": paper, "ours": "no committed runs", "verdict": "no runs",
                "depths": {}, "evidence": {}}
    kinds = list(dict.fromkeys(w for _, w in words))
    verdict = kinds[0] if len(kinds) == 1 else "; ".join(f"{w} ({d})" for d, w in words)
    return {"claim": claim, "source": source, "paper": paper, "ours": "; ".join(parts), "verdict": verdict,
            "depths": dict(words), "evidence": evidence}


def _loss_vs(runs: _Runs, set_name: str, name: str, expected: str, base: str = "pre-ln",
             reference: dict | None = None) -> dict | None:
    from core.mixln.figures import at_unigram_level
    a, b = runs.row(set_name, name), runs.row(set_name, base)
    if not a or not b:
        return None
    c = difference(a, b)
    if c is None:
        return None
    text = (f"{a['label']} {_val(a['eval_loss_mean'], a['eval_loss_std'], a['n'])} against "
            f"{b['label']} {_val(b['eval_loss_mean'], b['eval_loss_std'], b['n'])}: {c.text(unit='nats')}"
            + (", at the unigram level" if at_unigram_level(a["eval_loss_mean"], reference) else ""))
    return _m(c, expected, text, {"kind": "loss", "a": [set_name, name], "b": [set_name, base]})


def _n_seeds(m: dict | None) -> str:
    return f"n = {m['c'].n_a} / {m['c'].n_b} seeds" if m else ""


def _seeds(n: int) -> str:
    return f"n = {n} seed{'s' if n != 1 else ''}"


def claims(root: str | os.PathLike = ASSETS, reference: dict | None = None) -> list[dict]:
    """One row per claim: {claim, source, paper, ours, verdict, depths, evidence}. ``reference``: the unigram /
    bigram levels (:func:`core.mixln.reference.load_reference`), to say when a run sits at the unigram level."""
    if reference is None:
        from core.mixln.reference import load_reference
        reference = load_reference(root)
    runs = _Runs(root)
    rows = []

    by_depth = {s: f"{layers} layers" for s, layers in DEPTH_SETS.items()}

    def loss_claim(claim, paper, name, expected, source="Mix-LN", where=None):
        """``where``: run set -> how the measurement is named (default: the depth sets)."""
        measured = []
        for s, named in (where or by_depth).items():
            m = _loss_vs(runs, s, name, expected, reference=reference)
            measured.append((named, m, _n_seeds(m)))
        return _claim(claim, paper, measured, source)

    pre71 = MIXLN_71M["pre"]
    with_init = {**by_depth, "init-0.02": INIT_SET}
    # the embedding init the LNS authors say produced their numbers (std 0.02) is a setting of its own here
    rows.append(loss_claim(
        "Mix-LN trains to a lower loss than Pre-LN",
        f"71M: perplexity {MIXLN_71M['mix']} against {pre71} ({math.log(MIXLN_71M['mix'] / pre71):+.3f} nats); ahead "
        "at every size to 7B", "mix-ln-0.25", "lower", where=with_init))
    # Post-LN with depth: its 24-layer loss minus its 12-layer loss, over seeds
    post12, post24 = runs.row("main", "post-ln"), runs.row("depth-24", "post-ln")
    m = None
    if post12 and post24:
        from core.mixln.figures import at_unigram_level
        c = difference(post24, post12)
        if c is not None:
            text = (f"Post-LN {_val(post24['eval_loss_mean'], post24['eval_loss_std'], post24['n'])} at 24 "
                    f"layers against {_val(post12['eval_loss_mean'], post12['eval_loss_std'], post12['n'])} at "
                    f"12: {c.text(unit='nats')}, {post24['diverged']} of {post24['n'] + post24['diverged']} diverged"
                    + (", at the unigram level" if at_unigram_level(post24["eval_loss_mean"], reference) else ""))
            m = _m(c, "higher", text, {"kind": "loss", "a": ["depth-24", "post-ln"], "b": ["main", "post-ln"]})
    rows.append(_claim("Post-LN fails with depth",
                       f"perplexity {published_rows()[0]['130M']} at 130M (12 layers), "
                       f"{published_rows()[0]['250M']} at 250M (24 layers): diverged",
                       [("12 → 24 layers", m, _n_seeds(m))]))
    for name in ("deepnorm", "deepnorm-deepnet"):
        rows.append(loss_claim(
            f"DeepNorm trains about as well as Pre-LN: {recipe_label(name)}",
            f"71M: perplexity {MIXLN_71M['deepnorm']} against {pre71} "
            f"({math.log(MIXLN_71M['deepnorm'] / pre71):+.3f} nats), with the authors' constants", name, "tied"))

    # mechanisms: halves of the layers, seed 0, paired per window: one model
    def half_claim(claim, paper, name, analysis, expected, first="deep", versus=None, source="Mix-LN"):
        measured = []
        for s, layers in DEPTH_SETS.items():
            a = runs.per_window(s, name, analysis)
            early, deep = _halves(layers)
            b = None if versus is None else runs.per_window(s, versus, analysis)
            if a is None or (versus is not None and b is None):
                measured.append((f"{layers} layers", None, ""))
                continue
            what = "d(h_l, h_l+1)" if analysis == "angular" else "loss increase when skipped (nats)"
            if versus is None:
                sa, sb = (deep, early) if first == "deep" else (early, deep)
                w = _window_contrast(a, sa, None, sb)
                text = (f"{runs.row(s, name)['label']}, {what}: {first} half {w['a']:.3f}, "
                        f"{'early' if first == 'deep' else 'deep'} half {w['b']:.3f}, difference {w['c'].text()}")
            else:
                w = _window_contrast(a, deep, b, deep)
                text = (f"{what}, deep half: {runs.row(s, name)['label']} {w['a']:.3f}, "
                        f"{runs.row(s, versus)['label']} {w['b']:.3f}, difference {w['c'].text()}")
            rel = w["c"].delta / w["b"] if w["b"] else None
            text += f" ({100 * rel:+.0f} %)" if rel is not None else ""
            of = {"kind": "windows", "set": s, "name": name, "analysis": analysis, "versus": versus}
            measured.append((f"{layers} layers", _m(w["c"], expected, text, of, one_model=True, rel=rel),
                             f"seed 0, paired over {w['windows']} held-out windows"))
        return _claim(claim, paper, measured, source)

    rows.append(half_claim(
        "Pre-LN's deep layers barely change the hidden state (angular distance)",
        "LLaMA2-7B and a Pre-LN LLaMA-130M: the deeper layers' states are close to their neighbours' (small "
        "angular distance), unlike Post-LN's", "pre-ln", "angular", "lower"))
    rows.append(half_claim(
        "Pre-LN's deep layers can be removed at little cost (layer removal)",
        "LLaMA2-7B: pruning one of its deeper layers costs little on MMLU; in Post-LN BERT-large it costs more",
        "pre-ln", "removal", "lower"))

    def grad_claim(claim, paper, name, which, expected, num="deep"):
        measured = []
        for s, layers in DEPTH_SETS.items():
            g = runs.grad_norms(s, name, which)
            if not g:
                measured.append((f"{layers} layers", None, ""))
                continue
            early, deep = _halves(layers)
            r = _seed_ratio(g, deep, early) if num == "deep" else _seed_ratio(g, early, deep)
            value = f"{r['mean']:.3f}" + (f" ± {r['std']:.3f} (std)" if r["std"] is not None else "")
            text = (f"{runs.row(s, name)['label']}, weight-gradient norm {num} half / "
                    f"{'early' if num == 'deep' else 'deep'} half: {value}; ratio - 1: {r['c'].text()}")
            of = {"kind": "grad", "set": s, "name": name, "log": which, "num": num}
            measured.append((f"{layers} layers", _m(r["c"], expected, text, of, rel=r["c"].delta),
                             f"{_seeds(r['n'])}, each seed's ratio against 1"))
        return _claim(claim, paper, measured)

    rows.append(grad_claim("Pre-LN's deep layers get smaller gradients (at initialisation)",
                           "Pre-LN leads to diminished gradient norms in its deeper layers", "pre-ln", 0, "lower"))
    rows.append(grad_claim("Pre-LN's deep layers get smaller gradients (end of training)",
                           "Pre-LN leads to diminished gradient norms in its deeper layers", "pre-ln", -1, "lower"))
    rows.append(half_claim(
        "Post-LN's early layers are weak (layer removal)",
        "Post-LN's gradients vanish in the earlier layers, so they learn little (BERT-large, a Post-LN LLaMA-130M)",
        "post-ln", "removal", "lower", first="early"))
    rows.append(grad_claim("Post-LN's early layers get smaller gradients (at initialisation)",
                           "Post-LN's gradients vanish in the earlier layers (larger in the deeper ones)", "post-ln", 0,
                           "lower", num="early"))
    rows.append(grad_claim("Post-LN's early layers get smaller gradients (end of training)",
                           "Post-LN's gradients vanish in the earlier layers (larger in the deeper ones)", "post-ln", -1,
                           "lower", num="early"))
    rows.append(half_claim(
        "Mix-LN's deep layers change the hidden state more than Pre-LN's (angular distance)",
        "its angular-distance heatmaps (LLaMA-1B): Mix-LN's deeper layers are less alike than Pre-LN's",
        "mix-ln-0.25",
        "angular", "higher", versus="pre-ln"))
    rows.append(half_claim(
        "Mix-LN's deep layers cost more to remove than Pre-LN's (layer removal)",
        "Mix-LN's deeper layers contribute more than Pre-LN's (a larger drop when one is pruned)", "mix-ln-0.25",
        "removal", "higher", versus="pre-ln"))
    # the follow-ups
    lns = published_rows()[-1]
    rows.append(loss_claim(
        "LayerNorm Scaling trains to a lower loss than Pre-LN",
        f"perplexity {lns['130M']} against {FOLLOWUP_PRE['130M']} at 130M (a third party's rerun of the authors' "
        f"130M script: {LNS_RERUN['130M']}, {LNS_RERUN['where']}), {lns['250M']} against {FOLLOWUP_PRE['250M']} at "
        "250M, ahead to 7B; trained with embedding init std 0.02", "lns", "lower", source="LNS", where=with_init))
    rows.append(half_claim(
        "LayerNorm Scaling's deep layers cost more to remove than Pre-LN's (layer removal)",
        "LNS's deeper layers contribute more than Pre-LN's (a larger drop when one is pruned)", "lns", "removal",
        "higher", versus="pre-ln", source="LNS"))
    rows.append(loss_claim(
        "Peri-LN trains to a lower loss than Pre-LN",
        "400M to 3.2B parameters: lower loss and steadier training than Pre-LN (the Peri-LN paper)", "peri-ln",
        "lower", source="Peri-LN"))
    return rows


FOLLOWUP_PRE = {s: v for s, v in published_rows()[3].items() if s in SIZES}


def init_rows(root: str | os.PathLike = ASSETS) -> list[dict]:
    """Per placement of the init set: final held-out loss with embedding std 0.02 and with the recipe's sqrt(2/5)
    (the main set), mean ± std and n, and the difference (0.02 minus sqrt(2/5)) over seeds with its p and the rule's
    word for it (:data:`INIT_WORDS`)."""
    runs = _Runs(root)
    rows = []
    for name in RUN_SETS["init-0.02"].placements:
        a, b = runs.row("init-0.02", name), runs.row("main", name)
        if not a or not b:
            continue
        c = difference(a, b)
        if c is None:
            continue
        rows.append({"run": name, "label": a["label"],
                     "std_0.02": mean_std_text(a["eval_loss_mean"], a["eval_loss_std"], a["n"]),
                     "std_sqrt(2/5)": mean_std_text(b["eval_loss_mean"], b["eval_loss_std"], b["n"]),
                     "difference": c.text(), "0.02 is": INIT_WORDS[word(c, "lower")], **c.as_dict()})
    return rows


# the init table's last column: the rule's word for "0.02 ends lower than sqrt(2/5)", said as a direction
INIT_WORDS = {"reproduced": "lower", "opposite": "higher", "suggestive": "lower, suggestive",
              "suggestive, opposite": "higher, suggestive", "not reproduced": "no difference found",
              "not resolved": "not resolved (one seed)", "too small": "too small"}


def followup_rows(root: str | os.PathLike = ASSETS) -> list[dict]:
    """The published perplexities (71 M: the Mix-LN paper; 130 M to 1 B: the LNS paper) beside this project's final
    held-out perplexity at 12 and 24 layers (mean ± std, n), one row per placement in either."""
    runs = _Runs(root)
    published = {r["placement"]: r for r in published_rows()}
    rows = []
    names = {"pre": "pre-ln", "post": "post-ln", "mix": "mix-ln-0.25", "deepnorm": "deepnorm",
             "deepnet": "deepnorm-deepnet", "lns": "lns", "peri": "peri-ln", "sandwich": "sandwich-ln"}
    for key, run in names.items():
        p = published.get(key, {})
        ours = {}
        for s, layers in DEPTH_SETS.items():
            r = runs.row(s, run)
            ours[f"ours_{layers}"] = (mean_std_text(r["eval_perplexity_mean"], r["eval_perplexity_std"], r["n"], 1)
                                      if r else "-")
        if not p and all(v == "-" for v in ours.values()):
            continue
        from core.mixln.placements import placement_label
        rows.append({"placement": key, "label": placement_label(key),
                     **{f"paper_{s}": (_ppl(p.get(s)) if p else "-") for s in SIZES}, **ours})
        if key == "lns":  # the third party's rerun of the authors' 130M script, beside the paper's row
            rows.append({"placement": "lns-rerun", "label": f"LayerNorm Scaling, rerun ({LNS_RERUN['where']})",
                         **{f"paper_{s}": _ppl(LNS_RERUN.get(s)) for s in SIZES},
                         **{f"ours_{layers}": "" for layers in DEPTH_SETS.values()}})
    return rows


def pending_rows() -> list[dict]:
    """The recipe runs not committed yet (:data:`core.mixln.recipe.PENDING`), one row per run set and placement: its
    seeds and the command that trains them (and nothing already committed)."""
    from core.mixln.placements import placement_label
    from core.mixln.recipe import RECIPE, recipe_jobs
    groups: dict[tuple[str, str], list[int]] = {}
    for j in recipe_jobs():
        if j.pending:
            groups.setdefault((j.set, j.name), []).append(j.seed)
    return [{"set": s, "title": RUN_SETS[s].title, "run": n,
             "label": placement_label(RECIPE[n]["norm"], RECIPE[n]["alpha"]), "seeds": ", ".join(map(str, seeds)),
             "command": f"python -m core mixln reproduce --skip-done --set {s} --only {n} --seeds "
                        + " ".join(map(str, seeds))} for (s, n), seeds in groups.items()]


def _ppl(v) -> str:
    if v is None:
        return "-"
    return f"{v:,.2f}" + (" (diverged)" if v > 1000 else "")


# ---- Markdown ---------------------------------------------------------------------------------------------------
def _table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    head = "| " + " | ".join(title for _, title in columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(str(r.get(key, "")).replace("|", "/") for key, _ in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def claims_markdown(rows: list[dict]) -> str:
    named = [{**r, "claim": r["claim"] if r["source"] == "Mix-LN" else f"{r['source']}: {r['claim']}"} for r in rows]
    return _table(named, [("claim", "claim (Mix-LN paper, or the follow-up named)"), ("paper", "the paper's figure"),
                          ("ours", "this project (committed runs)"), ("verdict", "verdict")])


def _p_text(e: dict) -> str:
    from core.stats import _p
    return f"p = {_p(e['p'])}" + (f", exact {_p(e['p_exact'])}" if e.get("p_exact") is not None else "")


def compact(depth: str, e: dict) -> str:
    """One depth's verdict with what it rests on: ``opposite (12 layers, p = 0.021, exact 0.10)``, ``not resolved
    (24 layers, one seed)``, ``one model (12 layers)``."""
    if e["one_model"] or e["word"] == "one model":
        return f"one model ({depth})"
    if e["p"] is None:
        return f"{e['word']} ({depth}, one seed)"
    return f"{e['word']} ({depth}, {_p_text(e)})"


def readme_markdown(rows: list[dict]) -> str:
    """The README's what-reproduces table: one row per claim, each depth's word with its p (or "one seed" / "one
    model"), from the same rows as the docs page (so the two cannot drift)."""
    out = []
    for r in rows:
        single = [d for d, e in r["evidence"].items() if e["one_model"]]
        parts = [compact(d, e) for d, e in r["evidence"].items() if not e["one_model"]]
        parts += [f"one model ({' and '.join(single)})"] if single else []
        out.append({"claim": f"{r['claim']} ({r['source']})", "here": "; ".join(parts) or r["verdict"]})
    return _table(out, [("claim", "claim (paper)"), ("here", "here (the rule: docs/statistics.md)")])


def readme_summary(root: str | os.PathLike = ASSETS) -> str:
    """The README's sentences with numbers in them (so they cannot drift from the committed runs either): the
    12-layer placements the README names, ordered by final held-out loss, and Mix-LN 0.25 against Pre-LN at embedding
    std 0.02, each with its n."""
    runs = _Runs(root)
    named = [r for r in (runs.row("main", n) for n in ("peri-ln", "pre-ln", "mix-ln-0.25", "lns")) if r]
    if len(named) < 2:
        return "Not enough committed 12-layer runs to order the placements yet."
    named.sort(key=lambda r: r["eval_loss_mean"])
    n = sorted({r["n"] for r in named})
    loss = [f"{r['label']} ({r['eval_loss_mean']:.3f} ± {r['eval_loss_std']:.3f})" for r in named]
    text = (f"At 12 layers (final held-out loss, n = {' / '.join(map(str, n))} seeds) {loss[0]} leads, then "
            f"{', '.join(loss[1:-1])}{' and ' if len(loss) > 2 else ''}{loss[-1]}.")
    a, b = runs.row("init-0.02", "mix-ln-0.25"), runs.row("init-0.02", "pre-ln")
    c = difference(a, b) if a and b else None
    if c is not None:
        text += (" These runs use the Mix-LN code's embedding init std sqrt(2/5); with 0.02 (which the LNS authors "
                 f"used) Mix-LN 0.25 ends {abs(c.delta):.3f} ± {c.se:.3f} nats "
                 f"{'below' if c.delta < 0 else 'above'} Pre-LN (n = {c.n_a} / {c.n_b} seeds; "
                 f"{word(c, 'lower')} by the rule, {_p_text(c.as_dict())}).")
    return text


def init_markdown(rows: list[dict]) -> str:
    if not rows:
        return "No run of the init set (embedding std 0.02) is committed yet: see the runs not committed yet."
    return _table(rows, [("label", "placement (12 layers)"), ("std_0.02", "embedding std 0.02"),
                         ("std_sqrt(2/5)", "embedding std sqrt(2/5) (the committed set)"),
                         ("difference", "0.02 minus sqrt(2/5) (nats ± se, Welch over seeds)"),
                         ("0.02 is", "0.02 is")])


def followup_markdown(rows: list[dict]) -> str:
    cols = [("label", "placement")] + [(f"paper_{s}", f"{s} ({SIZES[s]['layers']} layers, {SIZES[s]['tokens']} "
                                                      "tokens)") for s in SIZES]
    cols += [("ours_12", "this project, 12 layers (1.1M, 3.1M tokens)"), ("ours_24", "24 layers (1.7M)")]
    return _table(rows, cols)


def pending_markdown(rows: list[dict]) -> str:
    if not rows:
        return "Every run of the recipe is committed."
    return _table([{**r, "command": f"`{r['command']}`"} for r in rows],
                  [("title", "run set"), ("label", "placement"), ("seeds", "seeds not committed"),
                   ("command", "trains them")])


def markdown_sources() -> str:
    return f"71M: {MIXLN_SOURCE}. 130M-1B: {FOLLOWUP_SOURCE}."


def markdown(root: str | os.PathLike = ASSETS) -> dict[str, str]:
    """{claims, init, followups, sources, pending, readme, readme-summary}: the tables as Markdown (what ``docs/mixln-reproduces.md``
    holds between its generated markers, what the tab shows, and the README's table)."""
    rows = claims(root)
    return {"claims": claims_markdown(rows), "init": init_markdown(init_rows(root)),
            "followups": followup_markdown(followup_rows(root)),
            "sources": markdown_sources(), "pending": pending_markdown(pending_rows()), "readme": readme_markdown(rows),
            "readme-summary": readme_summary(root)}
