"""The MambaLRP views a speaker shows (:mod:`core.examples`): the precomputed text and digit explanations, where a
hybrid's or a transformer's relevance passes (SSM vs attention layers vs MLPs), one text on a transformer beside an
SSM, and the committed evaluations. A text or digit view may show a
subset of the methods (``method=mambalrp,integrated_gradients``) at once from the precomputed result; a method it
does not hold is computed."""
from __future__ import annotations

from core.analyses import Example, Param
from core.lrp import bias
from core.lrp.methods import METHODS
from core.lrp.requests import (COMPARE_EXAMPLES, DEFAULT_METHODS, EVAL_MODELS, FLOW_EXAMPLES, FLOW_MODELS,
                               IMAGE_MODELS, IMAGE_SAMPLES, TEXT_EXAMPLES)
from core.lrp.service import (bias_audit_result, committed_result, compare_result, flow_result, image_result,
                              text_result)
from core.lrp.views import view
from core.runner import Found

METHOD = Param("method", "methods", "multi", tuple(METHODS))
SHORT = {"mamba-sentiment": ("sentiment", "Review"), "mamba-lm": ("lm", "LM"),
         "mamba2-sentiment": ("mamba2", "Mamba-2 review"), "hybrid-sentiment": ("hybrid", "Hybrid review"),
         "smollm2-135m": ("smollm2", "SmolLM2")}


def _subset(res, methods):
    """``res`` showing only ``methods`` (all held by it), or None when it lacks one of them."""
    held = res.data["methods"]
    if not set(methods) <= set(held):
        return None
    if list(methods) == list(held):
        return res
    return view(f"lrp/{res.data['kind']}", Found({**res.data, "methods": {m: held[m] for m in methods}}, res.source,
                                                res.key))


def _text(model: str, text: str):
    def show(progress=None, method=DEFAULT_METHODS):
        return _subset(text_result(model, text, DEFAULT_METHODS), method) or \
            text_result(model, text, method, progress=progress)
    return show


def _digit(sample: int):
    def show(progress=None, method=DEFAULT_METHODS):
        return _subset(image_result(IMAGE_MODELS[0], sample=sample, methods=DEFAULT_METHODS), method) or \
            image_result(IMAGE_MODELS[0], sample=sample, methods=method, progress=progress)
    return show


def _flow(text: str):
    def show(progress=None, model=FLOW_MODELS[0]):
        return flow_result(model, text, progress=progress)
    return show


def _compare(text: str):
    def show(progress=None, model_a=None, model_b=None):
        return compare_result([model_a, model_b], text, progress=progress)
    return show


def _committed(item=None):
    def show(progress=None, model=None):
        res = committed_result(model or item)
        if res is None:
            from core.errors import BadInputError
            raise BadInputError(f"no committed evaluation of {model or item}.",
                                fix="run `python -m core lrp precompute-evaluation` to compute it.")
        return res
    return show


def _short(text: str, n: int = 20) -> str:
    return text if len(text) <= n else text[:n].rsplit(" ", 1)[0] + "…"


def _views() -> list[Example]:
    methods = {"method": list(DEFAULT_METHODS)}
    out = [Example(f"{SHORT[model][0]}-{i + 1}", f"{SHORT[model][1]}: {_short(text)}", "heatmap", _text(model, text),
                   (METHOD,), methods)
           for model, texts in TEXT_EXAMPLES.items() for i, text in enumerate(texts)]
    out += [Example(f"digit-{s}", f"Digit, test sample {s}", "patches", _digit(s), (METHOD,), methods)
            for s in IMAGE_SAMPLES]
    flow_model = Param("model", "model", "choice", FLOW_MODELS, open=True)
    first = next(iter(FLOW_EXAMPLES))  # its views keep the links flow-1, flow-2; the others name their model
    out += [Example(f"flow-{i + 1}" if model == first else f"flow-{SHORT[model][0]}-{i + 1}",
                    f"Layers: {_short(text)}" if model == first else f"Layers, {SHORT[model][1]}: {_short(text)}",
                    "layer-flow", _flow(text), (flow_model,), {"model": model})
            for model, texts in FLOW_EXAMPLES.items() for i, text in enumerate(texts)]
    for pair, texts in COMPARE_EXAMPLES.items():
        sides = (Param("model_a", "model A", "choice", (pair[0],), open=True),
                 Param("model_b", "model B", "choice", (pair[1],), open=True))
        out += [Example(f"compare-{i + 1}", f"Side by side: {_short(text)}", "compare", _compare(text), sides,
                        {"model_a": pair[0], "model_b": pair[1]}) for i, text in enumerate(texts)]
    model = Param("model", "model", "choice", EVAL_MODELS)
    out += [Example("faithfulness", "Faithfulness (MoRF / LeRF)", "faithfulness", _committed(), (model,),
                    {"model": EVAL_MODELS[0]}),
            Example("conservation", "Conservation", "conservation", _committed(), (model,), {"model": EVAL_MODELS[0]}),
            Example("long-range", "Long range (mamba-lm)", "long-range", _committed("lm")),
            Example("bias-audit", "Bias audit: names and gendered words", "bias",
                    lambda progress=None, model=bias.MODELS[0]: bias_audit_result(model, progress=progress),
                    (Param("model", "model", "choice", bias.MODELS, open=True),), {"model": bias.MODELS[0]})]
    return out


EXAMPLE_VIEWS = tuple(_views())
