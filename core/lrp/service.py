"""What the MambaLRP tab and ``python -m core lrp`` do, one function per user action, each returning a
:class:`core.results.Result` (status text, data, tables, figures, files):

    text_result(model, text, methods, target=None, rules=None)     relevance of every token, per method
    image_result(model, image=None, sample=None, methods, ...)     relevance of every patch, per method
    flow_result(model, text, target=None)                          where the relevance passes: SSM vs attention layers
    compare_result(models, text, method="mambalrp")                one text on two models, side by side
    evaluation_result(model, n, steps, methods, ...)               faithfulness (Delta A^F) and conservation
    long_range_result(model, ...), key_token_result(...)           where relevance lies; ground truth
    agreement_result(model, n, methods)                            ground truth on an LM: subject-verb agreement
    bias_audit_result(model, method, target)                       identity terms swapped (core.lrp.bias)
    analysis_result(name, progress=None, **inputs)                 any analysis of :data:`core.lrp.views.ANALYSES`
    committed_result(item), example_result(kind)                   the committed evaluations and examples
    target_choices(model, text=None)                               a classifier's classes / an LM's likeliest tokens
    train_result(recipe, ...)                                      train an embedded model with its recipe
    precompute_examples(), precompute_evaluation(...)              the committed results the tab opens on

Every analysis goes one way (:func:`analysis_result`, through :func:`core.analyses.answer`): its request type
parses the raw inputs once (:mod:`core.lrp.requests`); :func:`core.runner.lookup` answers it from the committed
results (:data:`EXAMPLES`, ``assets/lrp/examples.json``: the tab's texts and digits; the evaluations in
``assets/lrp/evaluation/``, :mod:`core.lrp.committed`), else the results cache, else its compute function; its entry
in :data:`core.lrp.views.ANALYSES` shows it. A committed result answers at once, without loading a model.
"""
from __future__ import annotations

import time

from core.analyses import find, request_for, result_function
from core.errors import BadInputError
from core.lrp import batch as lrp_batch
from core.lrp import bias, committed, inputs
from core.lrp.committed import EVALUATION_ITEMS
from core.lrp.requests import (AGREEMENT_N, COMPARE_EXAMPLES, DEFAULT_METHODS, EVAL_N, EVAL_STEPS, FLOW_EXAMPLES,
                               IMAGE_MODELS, IMAGE_SAMPLES, TEXT_EXAMPLES, TrainRequest, whole)
from core.lrp.views import ANALYSES, train_view, view
from core.paths import ASSETS_DIR
from core.results import Result
from core.runner import ExampleStore, Found, precompute, recomputing, result_key

EXAMPLES = ExampleStore(ASSETS_DIR / "lrp" / "examples.json")


def _store(name: str, request) -> ExampleStore:
    """Where an analysis' committed results are: the evaluations' files, the bias audit's, or the tab's examples."""
    return committed.evaluation_store() if name in committed.ANALYSES else bias.STORE if name == "lrp-bias" else \
        EXAMPLES


# analysis_result(name, *raw, progress=None, **raw): analysis ``name`` of ANALYSES, committed, cached or computed
# (progress(fraction, message) may stop it: a stopped evaluation shows the samples it finished)
analysis_result = result_function(ANALYSES, _store)


def analysis_found(name: str, progress=None, check=None, **raw) -> Found:
    """What :func:`analysis_result` shows, not yet shown: the :class:`core.runner.Found` of the lookup. ``check``
    (default: building the view) is what a result must pass to be served or cached; a batch, which never shows a
    row, passes a lighter one (the fields it reads), under the same key."""
    return find(ANALYSES, name, request_for(ANALYSES, name, **raw), examples=_store, progress=progress, check=check)


lrp_batch.answer_rows_with(analysis_found)


def text_result(model: str, text: str, methods=DEFAULT_METHODS, target=None, rules: dict | None = None,
                progress=None) -> Result:
    """Relevance of every token of ``text`` for the model's prediction (or ``target``), per method; ``rules`` switch
    MambaLRP's rules (:data:`core.lrp.requests.TOGGLES`)."""
    return analysis_result("lrp/text", progress=progress, model=model, text=text, methods=methods, target=target,
                           rules=rules)


def image_result(model: str = IMAGE_MODELS[0], image=None, sample: int | None = None, methods=DEFAULT_METHODS,
                 target=None, rules: dict | None = None, progress=None) -> Result:
    """Relevance of every patch for the model's prediction (or ``target``), per method; ``image`` (an upload)
    wins over ``sample`` (an mnist-5k test index)."""
    return analysis_result("lrp/image", progress=progress, model=model, image=image, sample=sample, methods=methods,
                           target=target, rules=rules)


def flow_result(model: str, text: str, target=None, progress=None) -> Result:
    """Where the MambaLRP relevance of ``text`` passes: per layer (SSM mixer, attention, MLP) and token, and by kind."""
    return analysis_result("lrp/flow", progress=progress, model=model, text=text, target=target)


def compare_result(models, text: str, method: str = "mambalrp", progress=None) -> Result:
    """``text`` explained on two models (``models``: a pair, or ``"a,b"``), each its own top prediction, with one
    method, side by side: per word, and how close to the end each one's relevance lies."""
    return analysis_result("lrp/compare", progress=progress, models=models, text=text, method=method)


def evaluation_result(model: str, n=EVAL_N, steps=EVAL_STEPS, methods=None, progress=None, **options) -> Result:
    """Conservation and (unless ``faithfulness=False``) MoRF / LeRF faithfulness of the methods (default all) over
    ``n`` samples of the model's test split. ``options``: ``faithfulness``, ``dataset``, ``split``, ``seed``,
    ``target``, ``baseline``, ``options`` (per method), ``cache``."""
    return analysis_result("lrp-evaluation", progress=progress, model=model, n=n, steps=steps, methods=methods,
                           **options)


def long_range_result(model: str = "mamba-lm", n=50, methods=None, k: int = 10, progress=None, **options) -> Result:
    """Where a language model's next-token relevance lies: each method's top-``k`` tokens over ``n`` contexts.
    ``options``: ``max_tokens``, ``dataset``, ``split``, ``seed``, ``target``, ``options``, ``cache``."""
    return analysis_result("lrp-long-range", progress=progress, model=model, n=n, methods=methods, k=k, **options)


def key_token_result(n=100, methods=None, k: int = 1, progress=None, **options) -> Result:
    """How often each method finds the planted key token, over seeds. ``options``: ``seed``, ``seeds``,
    ``options``, ``cache``."""
    return analysis_result("lrp-key-token", progress=progress, n=n, methods=methods, k=k, **options)


def agreement_result(model: str = "mamba-lm", n=AGREEMENT_N, methods=None, progress=None, **options) -> Result:
    """The subject-verb agreement ground truth (:mod:`core.lrp.agreement`) on a language model: ``n`` generated
    sentences, each method's rank of the agreeing subject (MRR, pointing accuracy) where the model agrees.
    ``options``: ``seed``, ``options`` (per method), ``cache``."""
    return analysis_result("lrp-agreement", progress=progress, model=model, n=n, methods=methods, **options)


def bias_audit_result(model: str = "mamba-sentiment", method: str = "mambalrp", target: int = 1,
                      progress=None) -> Result:
    """The bias audit (:mod:`core.lrp.bias`): ``method``'s relevance for class ``target`` on the templated sentences
    (identity terms swapped), per term and per female / male swap, with the spread over the templates."""
    return analysis_result("lrp-bias", progress=progress, model=model, method=method, target=target)


def precompute_bias(path=None, log=print):
    """Compute the bias audit of every model in :data:`core.lrp.bias.MODELS` afresh into ``assets/lrp/bias.json``
    (the audits only: the sentences' own explanations are not kept as examples)."""
    path = precompute([lambda m=m: bias_audit_result(m) for m in bias.MODELS],
                      path if path is not None else bias.STORE.path, log=log)
    return ExampleStore.write(path, ExampleStore(path).entries("lrp-bias"))


def target_choices(model: str, text: str | None = None, k: int = 10) -> list[tuple[str, int]]:
    """``(label, id)`` pairs: a classifier's classes; a language model's ``k`` likeliest next tokens after ``text``."""
    from core.lrp.adapters import adapter_for

    loaded = inputs.load(model)
    if inputs.kind(loaded) != "lm":
        labels = inputs.labels_of(loaded)
        return [(f"{i}: {labels.get(i, str(i))}", i) for i in range(adapter_for(loaded.model).num_outputs)]
    if not text or not text.strip():
        return []
    ids, _, _ = inputs.tokenize(loaded, text)
    preds = inputs.predictions(loaded, inputs.logits(loaded, input_ids=ids), k)
    return [(inputs.target_label(p, lm=True), p["id"]) for p in preds]


def train_result(recipe: str, seed: int = 0, quick: bool = False, out=None, init_from: str | None = None,
                 epochs: int | None = None, threads: int = 2, progress=None) -> Result:
    """Train one embedded model with its recipe (``lm``, ``sentiment``, ``vision``) into ``out`` (default
    ``assets/models/<name>``); the card records the command that reproduces it."""
    from core.lrp import recipes

    request = TrainRequest.parse(recipe, seed, quick, out, init_from, epochs, threads)
    return train_view(recipes.train(request, progress))


# ---- the committed results ----------------------------------------------------------------------------------------
def _stored(entry: dict) -> Result:
    key = result_key(entry["fingerprint"], entry["analysis"], entry["params"])
    return view(entry["analysis"], Found(entry["data"], "precomputed", key))


def committed_result(item: str) -> Result | None:
    """A committed evaluation: ``mnist``, ``sentiment``, ``lm``, ``key-token`` or the name of an evaluated model;
    None when it is not there."""
    for name, (_, analysis, model, _) in EVALUATION_ITEMS.items():
        if item == name or (analysis == "lrp-evaluation" and item == model):
            entries = [e for e in committed.evaluation_store().entries(analysis) if e["model"] == model]
            return _stored(entries[-1]) if entries else None
    return None


def example_result(kind: str) -> Result | None:
    """The first precomputed example of ``kind`` (``text``, ``image``, ``flow`` or ``compare``), or None."""
    entries = EXAMPLES.entries(f"lrp/{kind}")
    return _stored(entries[0]) if entries else None


def default_requests() -> list[tuple[str, dict]]:
    """The tab's examples: ``(kind, keyword arguments of text_result / image_result / flow_result /
    compare_result)``."""
    calls = [("text", {"model": ref, "text": text, "methods": list(DEFAULT_METHODS)})
             for ref, texts in TEXT_EXAMPLES.items() for text in texts]
    calls += [("image", {"model": IMAGE_MODELS[0], "sample": s, "methods": list(DEFAULT_METHODS)})
              for s in IMAGE_SAMPLES]
    calls += [("flow", {"model": ref, "text": text}) for ref, texts in FLOW_EXAMPLES.items() for text in texts]
    return calls + [("compare", {"models": list(pair), "text": text}) for pair, texts in COMPARE_EXAMPLES.items()
                    for text in texts]


def precompute_examples(path=None, log=print):
    """Compute :func:`default_requests` afresh (:func:`core.runner.precompute`) into the example store."""
    actions = {"text": text_result, "image": image_result, "flow": flow_result, "compare": compare_result}
    calls = [lambda kind=kind, kwargs=kwargs: actions[kind](**kwargs) for kind, kwargs in default_requests()]
    return precompute(calls, path if path is not None else EXAMPLES.path, log=log)


def precompute_evaluation(only=None, n: int | None = None, out=None, progress=None, log=print) -> dict:
    """Recompute the committed evaluations the tab shows (:data:`core.lrp.committed.EVALUATION_ITEMS`, all or
    ``only`` some; ``n`` overrides every item's sample count, for smoke runs) afresh (:func:`core.runner.recomputing`)
    into their files in ``out`` (default ``assets/lrp/evaluation``). Returns ``{item: {"written", "seconds",
    "n_done"}}``."""
    only = [x.strip() for x in only.split(",")] if isinstance(only, str) else list(only or EVALUATION_ITEMS)
    unknown = [x for x in only if x not in EVALUATION_ITEMS]
    if unknown:
        raise BadInputError(f"Unknown item(s): {', '.join(unknown)}.", fix=f"Use: {', '.join(EVALUATION_ITEMS)}.")
    size = {} if n is None else {"n": whole(n, "-n", "Use e.g. -n 5 for a smoke run.")}
    folder = out if out is not None else committed.EVALUATION_DIR
    summary = {}
    for item in only:
        _, analysis, _, raw = EVALUATION_ITEMS[item]
        t0 = time.perf_counter()
        log(f"{item}: {analysis} {raw | size}")
        with recomputing():
            data = analysis_result(analysis, progress=progress, **{**raw, **size}).data
        written = committed.write_item(folder, item, data, n)
        summary[item] = {"written": [str(written)], "seconds": round(time.perf_counter() - t0, 1),
                         "n_done": data["n_done"]}
    return summary
