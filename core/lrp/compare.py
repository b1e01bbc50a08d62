"""Two models on one text, side by side: how a transformer and an SSM spread the relevance of their own next-token
prediction (or class) over the same words.

    compare(request, progress=None) -> data     each model's tokens, relevances and prediction, and per word
    compare_figure(data)                        words x models heatmap, and the cumulative |relevance| by distance
    word_rows(data), model_rows(data)           the tables (per word; per model: how local its evidence is)
    compare_status(data, source)                the account of it in words

The models tokenize the text differently, so their token relevances are summed per word (whitespace-separated, as
typed): each token counts for the word its first character falls in; tokens that are not in the text (a BOS or EOS
the tokenizer adds) are kept apart and their share of |relevance| reported. How local a model's evidence is: the
share of its |relevance| on the last word and within the last three, and the smallest number of words from the end
that holds half of it.
"""
from __future__ import annotations

import re
import time

import numpy as np

from core.lrp import inputs
from core.lrp.figures import DIVERGING, _scale, _visible
from core.figures import go, make_subplots, style
from core.progress import Progress, report, scaled
from core.results import source_text

STRUCTURE_COLOURS = {"attention": "#D55E00", "ssm": "#0072B2", "interleaved": "#009E73", "parallel": "#CC79A7"}
STRUCTURE_WORDS = {"attention": "transformer", "ssm": "SSM", "interleaved": "hybrid", "parallel": "hybrid (parallel)"}


def token_spans(text: str, pieces: list[str]) -> list[tuple[int, int] | None]:
    """Each token's ``(start, end)`` in ``text``, found in order (a token's text as :func:`core.lrp.inputs.tokenize`
    gives it: the typed characters), or None for a token that is not in the text (BOS, EOS, padding ids)."""
    spans, cursor = [], 0
    for piece in pieces:
        core = piece.strip()
        at = text.find(core, cursor) if core else -1
        if at < 0 or (core and text[cursor:at].strip()):  # not in the text, or only after skipping text
            spans.append(None)
            continue
        spans.append((at, at + len(core)))
        cursor = at + len(core)
    return spans


def words_of(text: str) -> list[tuple[int, int, str]]:
    """The whitespace-separated words of ``text``: ``(start, end, word)``."""
    return [(m.start(), m.end(), m.group()) for m in re.finditer(r"\S+", text)]


def word_relevance(text: str, pieces: list[str], relevance) -> tuple[list[float], float]:
    """``(per word relevance, |relevance| of the tokens outside the text)``."""
    words = words_of(text)
    out = [0.0] * len(words)
    outside = 0.0
    starts = [w[0] for w in words]
    for span, r in zip(token_spans(text, pieces), relevance):
        if span is None:
            outside += abs(float(r))
            continue
        i = int(np.searchsorted(starts, span[0], side="right")) - 1
        out[max(i, 0)] += float(r)
    return out, outside


def locality(word_values: list[float]) -> dict:
    """How close to the end a model's |relevance| lies: on the last word, within the last three, and the fewest
    words from the end that hold half of it."""
    a = np.abs(np.asarray(word_values, dtype=float))[::-1]  # from the end
    total = float(a.sum()) or 1.0
    cumulative = np.cumsum(a) / total
    return {"share_last_word": float(cumulative[0]) if a.size else 0.0,
            "share_last_3_words": float(cumulative[min(2, a.size - 1)]) if a.size else 0.0,
            "words_for_half": int(np.searchsorted(cumulative, 0.5) + 1) if a.size else 0,
            "cumulative_from_end": [round(float(c), 6) for c in cumulative]}


def compare(request, progress: Progress | None = None) -> dict:
    """Explain ``request.text`` with ``request.method`` on each of ``request.models`` (their own top prediction)."""
    from core.lrp.adapters import family_of
    from core.lrp.methods import METHODS, explain

    sides = []
    for i, ref in enumerate(request.models):
        step = scaled(progress, i / len(request.models), (i + 1) / len(request.models))
        report(step, 0.0, f"{ref}: loading")
        loaded = inputs.load(ref)
        ids, pieces, note = inputs.tokenize(loaded, request.text)
        t0 = time.perf_counter()
        e = explain(loaded.model, input_ids=ids, method=request.method, progress=step, **(
            {} if request.method == "mambalrp" else METHODS[request.method].options))
        seconds = time.perf_counter() - t0
        family = family_of(loaded.model)
        structure = family.structure if family else "ssm"
        words, outside = word_relevance(request.text, pieces, e.relevance.tolist())
        labels = inputs.labels_of(loaded)
        preds = inputs.predictions(loaded, inputs.logits(loaded, input_ids=ids), 3)
        sides.append({"model": ref, "fingerprint": loaded.fingerprint, "family": family.label if family else "Mamba",
                      "structure": structure, "model_kind": inputs.kind(loaded),
                      "parameters": sum(p.numel() for p in loaded.model.parameters()),
                      "tokens": pieces, "relevance": e.relevance.tolist(), "target": e.target,
                      "target_name": labels.get(e.target) if labels else inputs.pieces_of(loaded, [e.target])[0],
                      "predictions": preds, "logit": e.logit, "total": e.total, "absorbed": e.absorbed,
                      "seconds": seconds, "note": note, "words": words, "outside_text": outside,
                      **locality(words)})
    report(progress, 1.0, "done")
    attention = any(s["structure"] != "ssm" for s in sides)
    label = METHODS[request.method].label + (" + AttnLRP" if request.method == "mambalrp" and attention else "")
    return {"kind": "compare", "text": request.text, "method": request.method,
            "method_label": label, "words": [w for _, _, w in words_of(request.text)],
            "models": sides}


# ---- views -----------------------------------------------------------------------------------------------------------
def _name(side: dict) -> str:
    return f"{side['model']} ({STRUCTURE_WORDS.get(side['structure'], side['structure'])})"


def _size(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def compare_figure(data: dict) -> go.Figure:
    """Top: models x words, each model's word relevance over its own largest |value| (red for its prediction, blue
    against). Bottom: the share of each model's |relevance| within d words of the end of the text."""
    sides, words = data["models"], data["words"]
    x = [f"{i}:{_visible(w)}" for i, w in enumerate(words)]
    fig = make_subplots(rows=2, cols=1, row_heights=[0.42, 0.58], vertical_spacing=0.38,
                        subplot_titles=["relevance per word (x: position:word), each row over its own largest "
                                        "|relevance|",
                                        "share of |relevance| within d words of the end"])
    z = [list(np.asarray(s["words"], float) / _scale(s["words"])) for s in sides]
    y = [f"{_name(s)}: {s['target_name']!r}" for s in sides]
    fig.add_trace(go.Heatmap(z=z, x=x, y=y, customdata=[s["words"] for s in sides], colorscale=DIVERGING, zmin=-1,
                             zmax=1, zmid=0, colorbar={"title": {"text": "relevance /<br>max |relevance|"},
                                                       "len": 0.42, "y": 0.8},
                             hovertemplate="%{y}<br>word %{x}<br>relevance %{customdata:.4g}<extra></extra>"),
                  row=1, col=1)
    for s in sides:
        d = list(range(1, len(s["cumulative_from_end"]) + 1))
        fig.add_trace(go.Scatter(x=d, y=[100 * c for c in s["cumulative_from_end"]], mode="lines+markers",
                                 name=f"{_name(s)}, {_size(s['parameters'])} parameters",
                                 line={"color": STRUCTURE_COLOURS.get(s["structure"], "#475569"), "width": 3},
                                 hovertemplate="last %{x} words: %{y:.1f}%<extra>" + s["model"] + "</extra>"),
                      row=2, col=1)
    style(fig, f"One text, two models: where the relevance of each model's prediction lies ({data['method_label']})",
          height=640)
    fig.update_xaxes(tickangle=-45, row=1, col=1)  # the words' axis is named in the subplot's title (a title below
    # the slanted words of a long text would cover the second subplot's title at talk size)
    fig.update_yaxes(title_text="model: its prediction", autorange="reversed", row=1, col=1)  # model A on top
    fig.update_xaxes(title_text="d, words counted from the end of the text", dtick=1, row=2, col=1)
    fig.update_yaxes(title_text="|relevance| within d words (%)", range=[0, 102], row=2, col=1)
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": -0.24, "yanchor": "top"}, margin={"b": 140})
    return fig


def word_rows(data: dict) -> list[dict]:
    """One row per word: its position, text and each model's relevance."""
    return [{"position": i, "word": w, **{s["model"]: round(s["words"][i], 6) for s in data["models"]}}
            for i, w in enumerate(data["words"])]


def model_rows(data: dict) -> list[dict]:
    """One row per model: what it is, what it predicts, conservation, how local its relevance is."""
    return [{"model": s["model"], "family": s["family"], "kind": STRUCTURE_WORDS.get(s["structure"], s["structure"]),
             "parameters": s["parameters"], "explained": s["target_name"], "logit": round(s["logit"], 4),
             "sum of relevances": round(s["total"], 4), "absorbed (logit - sum)": round(s["absorbed"], 4),
             "|R| on the last word (%)": round(100 * s["share_last_word"], 1),
             "|R| in the last 3 words (%)": round(100 * s["share_last_3_words"], 1),
             "words from the end holding half of |R|": s["words_for_half"],
             "|R| on tokens outside the text (%)": round(100 * s["outside_text"] / max(
                 1e-12, s["outside_text"] + sum(abs(v) for v in s["words"])), 1),
             "time (s)": round(s["seconds"], 2)} for s in data["models"]]


def compare_status(data: dict, source: str = "computed") -> str:
    parts = []
    for s in data["models"]:
        parts.append(f"**{s['model']}** ({s['family']}, {STRUCTURE_WORDS.get(s['structure'], s['structure'])}, "
                     f"{_size(s['parameters'])} parameters) predicts **{s['target_name']!r}** (logit "
                     f"{s['logit']:.3g}; relevances sum to {s['total']:.3g}, {s['absorbed']:+.3g} absorbed): "
                     f"**{100 * s['share_last_word']:.0f}%** of its |relevance| on the last word, "
                     f"{100 * s['share_last_3_words']:.0f}% within the last three, half within the last "
                     f"{s['words_for_half']} word{'s' if s['words_for_half'] != 1 else ''}.")
    sizes = [s["parameters"] for s in data["models"]]
    caveat = ""
    if max(sizes) > 10 * max(1, min(sizes)):
        caveat = (" The two models differ in size and training data: this shows each model's own evidence for its "
                  "own prediction, not a controlled comparison of the architectures.")
    src = f" ({source_text(source)})" if source != "computed" else ""
    notes = " ".join(f"⚠️ {s['model']}: {s['note']}" for s in data["models"] if s.get("note"))
    return (f"{data['method_label']} on the same text. " + " ".join(parts) + caveat + src
            + (f"\n\n{notes}" if notes else ""))
