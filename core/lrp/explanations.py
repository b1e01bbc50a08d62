"""One explanation of one input, per method: what the text and image views show.

    explain_text(request, progress=None)   -> the tokens, the model's predictions and each method's relevances
    explain_image(request, progress=None)  -> the digit, the predictions and each method's patch relevances
    explain_flow(request, progress=None)   -> one text's MambaLRP relevance layer by layer (SSM, attention, MLP)

Both take a parsed request (:class:`core.lrp.requests.TextRequest` / :class:`~core.lrp.requests.ImageRequest`) and
return a JSON-able dict. The rule switches are translated into an :class:`LRPRules` here, once, with the model's
default gamma (0 for text, 0.25 for images). ``progress(fraction, message)`` moves per method (each its share of the
bar) and, within one, per mixer layer.
"""
from __future__ import annotations

import time

from core.lrp import inputs
from core.lrp.methods import METHODS, VISION_GAMMA, explain
from core.lrp.rules import LRPRules
from core.progress import Progress, report, scaled


def _options(method: str, rules: LRPRules) -> dict:
    return {"rules": rules} if method == "mambalrp" else dict(METHODS[method].options)


def _explain_all(loaded, methods, target, rules, progress: Progress | None, **model_inputs) -> dict:
    out = {}
    for i, name in enumerate(methods):
        label = METHODS[name].label
        step = scaled(progress, i / len(methods), (i + 1) / len(methods))  # this method's share of the bar
        report(step, 0.0, label)
        per_layer = None if step is None else (lambda fraction, message, label=label, step=step:
                                                step(fraction, f"{label}: {message}"))
        t0 = time.perf_counter()
        e = explain(loaded.model, target=target, method=name, progress=per_layer, **model_inputs,
                    **_options(name, rules))
        out[name] = {"label": METHODS[name].label, "relevance": e.relevance.tolist(), "logit": e.logit,
                     "total": e.total, "absorbed": e.absorbed, "target": e.target,
                     "conservative": METHODS[name].conservative, "seconds": time.perf_counter() - t0}
    report(progress, 1.0, "done")
    return out


def explain_text(request, progress: Progress | None = None) -> dict:
    """Relevance of every token of the request's text for the model's prediction (or its target), per method."""
    loaded = inputs.load(request.model)
    ids, pieces, note = inputs.tokenize(loaded, request.text)
    note = " ".join(part for part in (request.cut, note) if part)
    logits = inputs.logits(loaded, input_ids=ids)
    res = _explain_all(loaded, request.methods, request.target, LRPRules.from_toggles(**request.rules), progress,
                       input_ids=ids)
    t = next(iter(res.values()))["target"]
    labels = inputs.labels_of(loaded)
    return {"kind": "text", "model": request.model, "fingerprint": loaded.fingerprint,
            "model_kind": inputs.kind(loaded), "text": request.text, "tokens": pieces, "token_ids": ids[0].tolist(),
            "note": note, "target": t, "target_name": labels.get(t) if labels else inputs.pieces_of(loaded, [t])[0],
            "predictions": inputs.predictions(loaded, logits), "rules": request.rules, "methods": res}


def explain_image(request, progress: Progress | None = None) -> dict:
    """Relevance of every patch of the request's digit (an upload, or an mnist-5k test sample) per method."""
    import torch

    loaded = inputs.load_vision(request.model)
    pixels, label = request.pixels, None
    if pixels is None:
        pixels, label = inputs.test_image(request.source["sample"])
    px = torch.from_numpy(pixels)[None, None]
    logits = inputs.logits(loaded, pixel_values=px)
    rules = LRPRules.from_toggles(**request.rules, default_gamma=VISION_GAMMA)
    res = _explain_all(loaded, request.methods, request.target, rules, progress, pixel_values=px)
    t = next(iter(res.values()))["target"]
    labels = inputs.labels_of(loaded)
    return {"kind": "image", "model": request.model, "fingerprint": loaded.fingerprint,
            "image": pixels.round(4).tolist(), "label": label, "sample": request.source.get("sample"),
            "note": request.note, "target": t, "target_name": labels.get(t, str(t)),
            "predictions": inputs.predictions(loaded, logits), "grid": list(loaded.model.config.grid),
            "rules": request.rules, "methods": res}


def explain_flow(request, progress: Progress | None = None) -> dict:
    """Where one text's MambaLRP relevance passes (:func:`core.lrp.flow.relevance_flow`): per block its relevance at
    its input and output per token, by kind; the token relevances; what biases and softmaxes absorbed."""
    from core.lrp.adapters import family_of
    from core.lrp.flow import relevance_flow

    loaded = inputs.load(request.model)
    ids, pieces, note = inputs.tokenize(loaded, request.text)
    note = " ".join(part for part in (request.cut, note) if part)
    report(progress, 0.1, "MambaLRP with the trace of every layer")
    t0 = time.perf_counter()
    flow = relevance_flow(loaded.model, input_ids=ids, target=request.target)
    labels = inputs.labels_of(loaded)
    family = family_of(loaded.model)
    report(progress, 1.0, "done")
    return {"kind": "flow", "model": request.model, "fingerprint": loaded.fingerprint,
            "model_kind": inputs.kind(loaded), "family": family.label if family else "Mamba",
            "structure": family.structure if family else "ssm", "text": request.text, "tokens": pieces,
            "token_ids": ids[0].tolist(), "note": note, "target": flow.target,
            "target_name": labels.get(flow.target) if labels else inputs.pieces_of(loaded, [flow.target])[0],
            "predictions": inputs.predictions(loaded, inputs.logits(loaded, input_ids=ids)),
            "relevance": flow.relevance.tolist(), "logit": flow.logit, "total": flow.total,
            "absorbed": flow.absorbed, "residual": flow.residual, "blocks": flow.blocks,
            "seconds": time.perf_counter() - t0}
