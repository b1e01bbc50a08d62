"""The MambaLRP docs' generated tables and sentences, written from the committed evaluations
(``assets/lrp/evaluation/``, :mod:`core.lrp.committed`), as Markdown by block name: ``python tools/docs.py``
writes them between their markers in docs/mambalrp.md and docs/mambalrp-ssm2.md (this module knows no page), and a
test checks that the pages hold what the files say.

Blocks: ``faithfulness-<model>`` (ΔA^F and the equal-retention pair per method, MambaLRP minus each method paired
over the same inputs with the verdict word and p), ``ablation`` (the paper's ablation: MambaLRP against the LN-rule
alone, per model), ``conservation-trained`` (the trained models: conservation, the share of |R| off the explained
token, the effective number of tokens), ``agreement-<model>`` (the subject-verb agreement ground truth).
"""
from __future__ import annotations

import json
from pathlib import Path

from core.lrp import verdicts
from core.lrp.agreement import caveat
from core.lrp.committed import EVALUATION_DIR, EVALUATION_ITEMS
from core.stats import word



def _load(item: str, folder=None) -> dict | None:
    path = Path(folder or EVALUATION_DIR) / f"{EVALUATION_ITEMS[item][0]}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _missing(item: str) -> str:
    return (f"Not committed yet: `python -m core lrp precompute-evaluation --only {item}` computes it and "
            "`python tools/docs.py` writes this block.")


def _cell(c) -> str:
    """A paired comparison in a table cell: difference ± se, t, df, p and the verdict word."""
    if c is None:
        return ""
    if c.p is None:
        return f"{c.delta:+.3f} (n = {c.n_a})"
    return (f"{c.delta:+.3f} ± {c.se:.3f} (t = {c.t:.1f}, df {c.df:.0f}, p = {verdicts.p_text(c.p)}): "
            f"{word(c, verdicts.CLAIM)}")


def _table(rows: list[dict], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def faithfulness_block(res: dict, item: str | None = None) -> str:
    """Per method: ΔA^F, π-Soft-NC and π-Soft-NS (mean ± standard error over inputs), each with MambaLRP minus the
    method paired over the same inputs (difference ± se, t, p, the word for "MambaLRP more faithful"); a file made
    before the equal-retention protocol says so and names the command (``item``'s) that adds it."""
    metrics = verdicts.metrics_of(res)
    comparisons = {m: verdicts.paired_against(res, m) for m in metrics}
    faith = res["faithfulness"]
    rows, columns = [], ["method"]
    for metric in metrics:
        label = verdicts.METRICS[metric][0]
        columns += [label, f"MambaLRP − it ({label})"]
    for m in res["methods"]:
        row = {"method": res["labels"][m]}
        for metric in metrics:
            label = verdicts.METRICS[metric][0]
            row[label] = verdicts.mean_text(faith[m], metric)
            row[f"MambaLRP − it ({label})"] = _cell(comparisons[metric].get(m))
        rows.append(row)
    acc = f", model accuracy {100 * res['accuracy']:.1f}%" if res.get("accuracy") is not None else ""
    head = (f"`{res['model']}`, {res['dataset']} {res['split']}: n = {res['n_done']} inputs{acc}, K = {res['steps']} "
            f"flip steps, {res['baseline']} baseline")
    r = res.get("retention")
    if r:
        head += (f"; π-Soft at π = {r['grid'][0]:g}..{r['grid'][-1]:g} (softness {r['softness']:g}, {r['draws']} "
                 f"masks), {r['n_defined']} of {res['n_done']} inputs with a normalised score")
    head += f" (`{res['command']}`)."
    if not r and item is not None:
        head += (f" Faithfulness at equal retention (π-Soft-NC / NS) is not computed for this file (made before the "
                 f"protocol): `python -m core lrp precompute-evaluation --only {item}` adds it.")
    return head + "\n\n" + _table(rows, columns)


READING = {  # what a word says about the paper's ablation (the full rules more faithful than the LN-rule alone)
    "reproduced": "the full rules add faithfulness here, as in the paper's ablation",
    "opposite": "the full rules lower faithfulness here, against the paper's ablation",
    "suggestive": "a hint in the paper's direction, not established at this n",
    "suggestive, opposite": "a hint against the paper's direction, not established at this n",
    "not reproduced": "no difference found at this n: the rules beyond the LN-rule add nothing measurable here",
    "not resolved": "too few inputs to judge",
}


def ablation_block(items=("sentiment", "mnist", "sentiment-mamba2", "sentiment-hybrid"), folder=None) -> str:
    """One line per model: MambaLRP minus LRP with the LN-rule only (the paper's ablation claims the full rules are
    more faithful), paired over the same inputs, per metric, with the word, its p and what it says."""
    lines = []
    for item in items:
        res = _load(item, folder)
        if res is None:
            lines.append(f"- `{EVALUATION_ITEMS[item][2]}`: {_missing(item)}")
            continue
        parts = []
        for metric in verdicts.metrics_of(res):
            c = verdicts.paired_against(res, metric).get("lrp_ln")
            if c is not None:
                w = word(c, verdicts.CLAIM)
                parts.append(f"{verdicts.METRICS[metric][0]} {c.text()}: **{w}** ({READING[w]})")
        lines.append(f"- `{res['model']}`, MambaLRP minus LRP (LN-rule only), paired over the same {res['n_done']} "
                     "inputs: " + "; ".join(parts) + ".")
    return "\n".join(lines)


def key_token_block(items=("key-token", "key-token-mamba2", "key-token-hybrid"), folder=None) -> str:
    """The key-token hit rates, MambaLRP minus each method paired over the seeds (each seed: one trained classifier
    and its sequences), with the t-test's p, the exact sign-flip p and the word."""
    rows = []
    for item in items:
        res = _load(item, folder)
        if res is None:
            continue
        per_seed = res["hit_rate_per_seed"]
        comparisons = verdicts.against(per_seed, exact=True)
        backbone = {"mamba": "Mamba-1", "mamba2": "Mamba-2", "hybrid": "hybrid"}[res.get("family", "mamba")]
        for m in res["methods"]:
            if m == verdicts.REFERENCE:
                continue
            c = comparisons[m]
            rows.append({"backbone": backbone, "method": res["labels"][m],
                         "hit rate, MambaLRP / it (mean of seeds)":
                             f"{100 * res['hit_rate'][verdicts.REFERENCE]:.1f}% / {100 * res['hit_rate'][m]:.1f}%",
                         "MambaLRP − it, paired over seeds": c.text(),
                         "MambaLRP ahead?": f"**{word(c, verdicts.CLAIM)}**"})
    if not rows:
        return "Not committed yet: `python -m core lrp precompute-evaluation --only key-token`."
    return _table(rows, list(rows[0]))


def conservation_block(items=("sentiment", "sentiment-mamba2", "sentiment-hybrid", "mnist"), folder=None) -> str:
    """The trained models: MambaLRP's and Gradient x Input's mean |sum - logit| / |logit|, share of |R| off the
    explained token (the one the output is read from) and effective number of tokens, over the committed inputs."""
    rows = []
    for item in items:
        res = _load(item, folder)
        if res is None:
            continue
        for m in ("mambalrp", "gradient_x_input"):
            c = res["conservation"].get(m)
            if c is None or c.get("mean_share_off_explained") is None:
                continue
            rows.append({"model": f"`{res['model']}`", "method": res["labels"][m], "n": res["n_done"],
                         "tokens (mean)": f"{res['mean_length']:.1f}",
                         "mean \\|sum − logit\\| / \\|logit\\|": f"{c['mean_rel_error']:.2g}",
                         "share of \\|R\\| off the explained token": f"{100 * c['mean_share_off_explained']:.0f}%",
                         "effective tokens (sum \\|R\\|)² / sum R²": f"{c['mean_effective_units']:.1f}"})
    if not rows:
        return "Not committed yet: `python -m core lrp precompute-evaluation`."
    return _table(rows, list(rows[0]))


def agreement_block(item: str, folder=None) -> str:
    """The agreement ground truth of one committed model: its agreement, then per method MRR, rank and pointing
    accuracy with MambaLRP minus each method paired over the sentences."""
    res = _load(item, folder)
    if res is None:
        return _missing(item)
    if not res["n_done"]:
        return (f"`{res['model']}` prefers the agreeing verb on none of {res['n_explainable']} generated sentences: "
                f"nothing to explain (`{res['command']}`).")
    scores = res["scores"]
    rr = verdicts.against({m: s["reciprocal_rank"] for m, s in scores.items()})
    hits = verdicts.against({m: s["pointing"] for m, s in scores.items()})
    rows = []
    for m in res["methods"]:
        if m in res["refused"]:
            rows.append({"method": res["labels"][m], "MRR": "does not apply"})
            continue
        s = scores[m]
        rows.append({"method": res["labels"][m], "MRR": f"{s['mrr']:.3f} ± {s['mrr_sem']:.3f}",
                     "MambaLRP − it (MRR)": _cell(rr.get(m)),
                     "rank of the subject": f"{s['mean_rank']:.2f} ± {s['mean_rank_sem']:.2f} (median "
                                            f"{s['median_rank']:g})",
                     "pointing accuracy": f"{100 * s['pointing_accuracy']:.1f} ± {100 * s['pointing_accuracy_sem']:.1f}%",
                     "MambaLRP − it (pointing)": _cell(hits.get(m)),
                     "subject above attractor": f"{100 * s['subject_above_attractor_share']:.0f}%"})
    rows.append({"method": "chance (exact)", "MRR": f"{res['chance']['mrr']:.3f}",
                 "pointing accuracy": f"{100 * res['chance']['pointing_accuracy']:.1f}%"})
    by = ", ".join(f"{k} {100 * v['accuracy']:.0f}% (n = {v['n']})" for k, v in res["agreement_by_template"].items())
    head = (f"`{res['model']}` prefers the agreeing verb on **{100 * res['agreement_accuracy']:.1f}%** of "
            f"{res['n_explainable']} generated sentences ({by}); the {res['n_done']} it gets right are explained "
            f"({100 * res['agreeing_plural_share']:.0f}% with a plural subject; {res['mean_length']:.1f} tokens on "
            f"average) (`{res['command']}`).")
    if caveat(res):
        head += f" **{caveat(res)}**"
    return head + "\n\n" + _table(rows, list(rows[0]))


def blocks(folder=None) -> dict[str, str]:
    """Every generated block, by name (what the pages hold between their markers)."""
    out = {}
    for item, (_, analysis, model, _) in EVALUATION_ITEMS.items():
        if analysis == "lrp-evaluation":
            res = _load(item, folder)
            out[f"faithfulness-{model}"] = faithfulness_block(res, item) if res else _missing(item)
        elif analysis == "lrp-agreement":
            out[f"agreement-{model}"] = agreement_block(item, folder)
    out["ablation"] = ablation_block(folder=folder)
    out["ablation-ssm2"] = ablation_block(("sentiment-mamba2", "sentiment-hybrid"), folder=folder)
    out["key-token-paired"] = key_token_block(folder=folder)
    out["conservation-trained"] = conservation_block(folder=folder)
    return out
