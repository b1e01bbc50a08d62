"""Layerwise for agents: the analyses as typed API endpoints that answer in JSON, which ``python app.py --mcp`` (or
``LAYERWISE_MCP=1`` on a Space) serves as MCP tools (gradio's ``launch(mcp_server=True)``).

Each tool is a handler here, named as its tool (gradio names an MCP tool after its function), with a docstring that
says what it does and, under ``Args:``, each input's meaning, range and default (gradio turns it into the tool's
description and input schema). The inputs are hidden components of the page (:mod:`ui.tool_endpoints`), so each
keeps the app's own checks (a number out of range gets the app's message) and the choices of a dropdown or checkbox
group are the schema's enum. Every tool answers with one JSON text (:func:`ui.answers.answer`): the status paragraph,
where the result came from, its tables (rows of numbers and names), the columns of its long-format table and links to
its files (the figures as HTML, the tables as CSV and Parquet). Heavy tools report progress (MCP progress
notifications: ``step k of 100``) and can be stopped like the tab's work.

With MCP on, the MCP server lists only these tools (:func:`ui.tool_endpoints.only_tools`): the tabs' own endpoints
return page updates (HTML, charts, dropdown choices) that an agent cannot use; ``gradio_client`` still reaches all.
"""
from __future__ import annotations

import json
from urllib.parse import parse_qsl

import gradio as gr

import core.examples as ex
import core.lrp as lrp
from core.errors import BadInputError
from ui.answers import answer, progress_steps
from ui.errors import user_errors


# ---- the tools -------------------------------------------------------------------------------------------------
@user_errors
def layerwise_views(request: gr.Request = None) -> str:
    """List every precomputed view of the four papers (MambaLRP, MathNeuro, Mix-LN, NeuZip): its tab, example name,
    title, the chart it draws, its link and its inputs (kind, choices or range, and the precomputed value). Open one
    with the layerwise_view tool; precomputed values answer at once.

    Returns:
        JSON: {"views": [{"tab", "example", "title", "figure", "link", "inputs": [...]}]}
    """
    views = []
    for tab, examples in ex.registry().items():
        for e in examples:
            inputs = [{"name": p.name, "label": p.label, "kind": p.kind, "choices": [str(c) for c in p.choices],
                       "open": p.open, "low": p.low, "high": p.high, "whole": p.whole,
                       "default": p.format(e.defaults[p.name])} for p in e.params]
            views.append({"tab": tab, "example": e.name, "title": e.title, "figure": e.figure,
                          "link": ex.default_view(tab, e.name).query(), "inputs": inputs})
    return json.dumps({"views": views})


@user_errors
def layerwise_view(tab: str, example: str, inputs: str = "", request: gr.Request = None,
                   progress=gr.Progress()) -> str:
    """Open one view of a paper's tab (any view layerwise_views lists): its result with the given inputs. The
    precomputed inputs answer at once; other values are computed (with progress).

    Args:
        tab: the paper: lrp (MambaLRP), mathneuro (MathNeuro), mixln (Mix-LN) or neuzip (NeuZip).
        example: the view's name, e.g. sentiment-1, faithfulness, bias-audit, effect, loss, tradeoff.
        inputs: the inputs as in the view's link, e.g. "method=mambalrp,mamba_attr"; "" for the precomputed ones.

    Returns:
        JSON: status, source, tables (name -> rows), long_table columns, files (figures: HTML; tables: CSV, Parquet),
        and the view's link.
    """
    if tab not in ex.PAPERS:
        raise BadInputError(f"no tab {tab!r}.", fix=f"use one of {', '.join(ex.PAPERS)}.")
    values = dict(parse_qsl(inputs or "", keep_blank_values=True))
    view = ex.view(tab, example, values)
    res = ex.show(view, None if view.precomputed else progress_steps(request, progress))
    return answer(res, request, link=view.query(), figure=view.example.figure)


@user_errors
def lrp_relevance(model: str, text: str, methods: list, target: float = -1, request: gr.Request = None) -> str:
    """MambaLRP: the relevance of every token of a text for a model's prediction, per explanation method (relevances
    add up to the explained logit for MambaLRP, less what biases and attention softmaxes absorb; AttnLRP on attention
    layers and MLPs). Red/positive values speak for the explained output.

    Args:
        model: mamba-sentiment (review classifier), mamba-lm or smollm2-135m (next token), or a model folder.
        text: the text to explain (cut to 512 tokens).
        methods: one or more registered methods (default mambalrp); integrated_gradients and smoothgrad are slower.
        target: the class index or next-token id to explain; -1 (default) for the model's top prediction.

    Returns:
        JSON: status, source, tables.relevance (position, token, one column per method), summary (per method: logit,
        sum of relevances, time), predictions, files.
    """
    res = lrp.text_result(model, text, methods or ["mambalrp"], target)
    d = res.data
    return answer(res, request, target=d["target"], target_name=d["target_name"],
                  predictions=d["predictions"][:10], summary=res.views["summary"])


@user_errors
def lrp_faithfulness(model: str, n: float = 20, steps: float = 10, methods: list | None = None,
                     request: gr.Request = None, progress=gr.Progress()) -> str:
    """MambaLRP evaluation over a test split: conservation (sum of relevances vs the explained logit) and
    faithfulness (MoRF / LeRF flip curves; Delta A^F = A_LeRF - A_MoRF, higher is more faithful) per method.
    Heavy: reports progress; the committed evaluation (N = 150 / 100, all methods) answers at once.

    Args:
        model: mamba-sentiment (movie-sentiment test split) or vision-mamba-mnist (mnist-5k test split).
        n: test samples, a whole number from 1 to 1000 (default 20).
        steps: flip steps K of the curves, from 1 to 100 (default 10).
        methods: the methods to compare (default: mambalrp, gradient_x_input, integrated_gradients, mamba_attr).

    Returns:
        JSON: status, source, tables.methods (per method: delta_af and its standard error, MoRF / LeRF areas,
        conservation errors, time), files.
    """
    res = lrp.evaluation_result(model, n, steps, methods or list(lrp.DEFAULT_METHODS),
                                progress_steps(request, progress))
    return answer(res, request)


@user_errors
def lrp_bias_audit(model: str = "mamba-sentiment", request: gr.Request = None, progress=gr.Progress()) -> str:
    """MambaLRP bias audit: the same review sentences with identity terms swapped (first names and gendered words,
    female / male pairs); per term, the relevance it receives for the class 'positive' and how the class logit moves
    when it is swapped in, with the spread over the 12 templates. Precomputed for mamba-sentiment.

    Args:
        model: a Mamba sentiment classifier: mamba-sentiment (precomputed) or a folder (computed, about a minute).

    Returns:
        JSON: status, source, tables.terms (per term: relevance and logit shift, mean / std / min / max over the
        templates), tables.pairs (female - male gaps), tables.sentences, files.
    """
    return answer(lrp.bias_audit_result(model, progress=progress_steps(request, progress)), request)


@user_errors
def mathneuro_pruning_effect(model: str = "mathneuro-tiny", math: str = "arithmetic-words",
                             nonmath: str = "review-sentiment", n: float = 100, proportion: float = 0.05,
                             eval_n: float = 100, request: gr.Request = None, progress=gr.Progress()) -> str:
    """MathNeuro: identify the math-specific parameters (each method's set at share K) and prune them: the math and
    non-math metric before and after, per method. Heavy: reports progress; the tab's defaults answer at once.

    Args:
        model: a causal LM: mathneuro-tiny (embedded, precomputed) or smollm2-135m, or a local folder.
        math: the math dataset: arithmetic-words or gsm-symbolic.
        nonmath: the non-math dataset: review-sentiment, movie-sentiment, mmlu or logiqa.
        n: identification samples per dataset, from 1 to 1000 (default 100).
        proportion: K, the share of parameters selected, from 0.0001 to 1 (default 0.05).
        eval_n: test items per dataset, from 1 to 1000 (default 100).

    Returns:
        JSON: status, source, tables.effect (per method: selected, math / non-math metric before and after), files.
    """
    import core.mathneuro as mn

    res = mn.effect_result(model, math, [nonmath], n, proportion, eval_n=eval_n,
                           progress=progress_steps(request, progress))
    return answer(res, request)


@user_errors
def neuzip_memory_perplexity(model: str = "smollm2-135m", words: float = 2000, request: gr.Request = None,
                             progress=gr.Progress()) -> str:
    """NeuZip: memory against word-level perplexity for bf16, lossless NeuZip (k = 7) and lossy k = 3, 1, 0 (with a
    normaliser of block 128) and the quantization baselines, with the Pareto front. Heavy (about a minute per setting
    per 2,000 words on 2 cores): reports progress; smollm2-135m's example answers at once.

    Args:
        model: a causal LM with a tokenizer: smollm2-135m (precomputed), mathneuro-tiny, or a local folder.
        words: evaluation words, from 100 to 10000 (default 2000).

    Returns:
        JSON: status, source, tables.tradeoff (per setting: memory_MB, bits per weight, word and token perplexity,
        on the Pareto front or not), files.
    """
    import core.neuzip as nz

    return answer(nz.tradeoff_result(model, words=int(words), progress=progress_steps(request, progress)), request)


@user_errors
def list_models(request: gr.Request = None) -> str:
    """The registered models: name, kind, status (ready or missing, and the command that gets it), parameters and
    the tabs that use them.

    Returns:
        JSON: {"models": [{"name", "kind", "ready", "parameters", "source", "fix", ...}]}
    """
    from core.zoo import list_cards

    return json.dumps({"models": [c.to_dict() for c in list_cards()]}, default=str)



HANDLERS = (layerwise_views, layerwise_view, lrp_relevance, lrp_faithfulness, lrp_bias_audit,
            mathneuro_pruning_effect, neuzip_memory_perplexity, list_models)  # the tools, as an agent sees them
TOOL_NAMES = tuple(h.__name__ for h in HANDLERS)


__all__ = ["HANDLERS", "TOOL_NAMES", *TOOL_NAMES]
