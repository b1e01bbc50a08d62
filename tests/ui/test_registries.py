"""Adding an attribution method, a norm placement, a NeuZip baseline or an analysis is one registry entry (plus its
implementation): registered here, each appears in the CLI and in the tab (an analysis: in its service and a link
too) without touching either."""
import dataclasses
import json

import gradio as gr
import pytest
import torch

from core.cli import build_parser, build_registry, main
from core.zoo import registered_names
from ui.header import AppContext

pytestmark = pytest.mark.usefixtures("single_thread")


def _components(blocks, kind):
    return [b for b in blocks.blocks.values() if isinstance(b, kind)]


def _build(tab) -> gr.Blocks:
    with gr.Blocks() as blocks:
        tab.build(AppContext(model=gr.Dropdown(["mathneuro-tiny"], value="mathneuro-tiny", allow_custom_value=True)))
    return blocks


# ---- an attribution method ----------------------------------------------------------------------------------------
def saliency(adapter, embeds, target, **options):
    """|gradient| per position (Simonyan et al., 2014): the implementation a new method brings."""
    from core.lrp import lrp_rules

    x = embeds.detach().clone().requires_grad_(True)
    with lrp_rules(adapter.model, None):
        logits = adapter.logits(x)[0]
        t = int(logits.argmax()) if target is None else int(target)
        (grad,) = torch.autograd.grad(logits[t], x)
    return grad.norm(dim=-1)[0].float(), float(logits[t].detach()), t


@pytest.mark.skipif("mamba-sentiment" not in registered_names(), reason="embedded Mamba models not committed")
def test_a_new_attribution_method_reaches_the_cli_and_the_tab(monkeypatch, capsys, fresh_cache):
    import core.lrp as lrp
    from ui.tabs import lrp as tab

    monkeypatch.setitem(lrp.METHODS, "saliency", lrp.Method("Saliency", saliency, "|gradient| of the input",
                                                            colour="#117733"))
    assert main(["lrp", "explain", "--model", "mamba-sentiment", "--text", "a fine film", "--method",
                 "mambalrp,saliency", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["methods"]) == {"mambalrp", "saliency"} and min(out["methods"]["saliency"]["relevance"]) >= 0
    boxes = [b for b in _components(_build(tab), gr.CheckboxGroup) if b.label == "Methods"]
    assert boxes and all(("Saliency", "saliency") in b.choices for b in boxes)
    status, page, table, target, files = tab.explain_text("mamba-sentiment", "a fine film", ["saliency"], tab.TOP,
                                                          True, True, True, True, None, [])
    assert list(table["method"]) == ["Saliency"] and "Saliency" in page


# ---- a norm placement ---------------------------------------------------------------------------------------------
def test_a_new_norm_placement_reaches_the_cli_and_the_tab(monkeypatch):
    import core.mixln as mixln
    from ui.tabs import mixln as tab

    monkeypatch.setitem(mixln.PLACEMENTS, "rescale", mixln.Placement("Rescale-LN", "#AA3377", "x + F(N(x)) / 2",
                                                                     "a made-up placement"))
    parser = build_parser(build_registry("mixln"))
    args = parser.parse_args(["mixln", "train", "--norm", "rescale", "--out", "x"])
    assert args.norm == "rescale"
    assert mixln.MixLNConfig(norm="rescale").norm == "rescale"  # the config accepts what the registry lists
    radios = [b for b in _components(_build(tab), gr.Radio) if b.label == "Norm placement"]
    assert radios and ("Rescale-LN", "rescale") in radios[0].choices
    assert mixln.placement_label("rescale") == "Rescale-LN" and mixln.placement_colour("rescale") == "#AA3377"


# ---- a NeuZip baseline --------------------------------------------------------------------------------------------
def int4_absmax(w: torch.Tensor, **_):
    """Row-wise absmax INT4: the quantizer a new baseline brings; stored bytes = 4 bits per weight + a fp16 scale."""
    w = w.float()
    scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 7.0
    return (torch.round(w / scale).clamp(-7, 7) * scale), w.numel() // 2 + 2 * w.shape[0]


@pytest.mark.skipif("mathneuro-tiny" not in registered_names(), reason="mathneuro-tiny not committed")
def test_a_new_neuzip_baseline_reaches_the_cli_and_the_tab(monkeypatch, capsys, fresh_cache):
    import importlib

    import core.neuzip as nz
    from ui.tabs import neuzip as tab

    T = importlib.import_module("core.neuzip.tradeoff")  # the module (core.neuzip.tradeoff is also a function)

    monkeypatch.setattr(T, "bnb_available", lambda: False)  # keep the test to the new baseline (bnb is slow to load)
    monkeypatch.setitem(nz.TRADEOFF_METHODS, "int4-absmax", nz.Method("int4-absmax", "absmax INT4", int4_absmax,
                                                                     "INT4 (absmax)", nz.Style("#117733", "hexagon")))
    status, fig, frame, state = tab.measure_tradeoff("mathneuro-tiny", "none", 120, False, None)
    assert "INT4 (absmax)" in list(frame["setting"]) and "absmax INT4" in [t.name for t in fig.data]
    assert main(["neuzip", "tradeoff", "--model", "mathneuro-tiny", "--block-size", "0", "--words", "120",
                 "--json"]) == 0  # the tab's request from the command line: answered from the cache
    out = json.loads(capsys.readouterr().out)
    points = {p["label"]: p for p in out["points"]}
    assert {"bf16", "NeuZip k=7 (lossless)", "NeuZip k=0", "INT4 (absmax)"} <= set(points)
    assert points["INT4 (absmax)"]["bits_per_weight"] < 5 and points["INT4 (absmax)"]["family"] == "absmax INT4"
    assert out["source"] == "cache"


# ---- an analysis --------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class NormsRequest:
    """The request of the toy analysis: a causal LM, checked once; ``key()`` stores its result by the weights."""

    model: str

    @classmethod
    def parse(cls, model="mathneuro-tiny"):
        from core.errors import BadInputError

        if not str(model).strip():
            raise BadInputError("no model chosen.", fix="name a model, e.g. mathneuro-tiny")
        return cls(str(model).strip())

    def key(self):
        from core.zoo import fingerprint

        return self.model, fingerprint(self.model), {"norm": "frobenius"}


def weight_norms(req, progress=None) -> dict:
    """The compute function: the Frobenius norm of each 2-D weight (known answer: the norms of the loaded tensors)."""
    from core.zoo import load_model

    model = load_model(req.model).model
    return {"model": req.model, "rows": [{"matrix": n, "norm": float(p.detach().double().norm())}
                                         for n, p in model.named_parameters() if p.ndim == 2]}


@pytest.mark.slow
@pytest.mark.skipif("mathneuro-tiny" not in registered_names(), reason="mathneuro-tiny not committed")
def test_a_new_analysis_is_one_entry_and_reaches_the_service_the_cli_a_link_and_the_tab(monkeypatch, capsys,
                                                                                       fresh_cache):
    """The recipe of docs/architecture.md: one Analysis entry (request type, compute function, cache policy, view,
    inputs and an example) in a paper's registry. Its service answers it (computed, then from the cache), the CLI
    lists and runs it, a link opens it and the tab's stage lists it: nothing else is edited."""
    import plotly.graph_objects as go

    import core.examples as ex
    import core.mathneuro as mn
    from core.analyses import Analysis, Example, Param
    from core.schema import ListOf, Num, Rec, Str
    from core.zoo import load_model
    from ui.stage import build_stage

    monkeypatch.setitem(mn.ANALYSES, "weight-norms", Analysis(
        NormsRequest, lambda d, shown: f"{len(d['rows'])} matrices of **{d['model']}** ({shown.source_text}).",
        weight_norms, stored_as="toy/weight-norms", stem="weight-norms",
        schema=Rec({"model": Str, "rows": ListOf(Rec({"matrix": Str, "norm": Num}), 1)}),
        tables=lambda d, shown: {"norms": d["rows"]},
        figures=lambda d, shown: {"norms": go.Figure(go.Bar(x=[r["matrix"] for r in d["rows"]],
                                                            y=[r["norm"] for r in d["rows"]], name="Frobenius norm"),
                                                     layout={"title": {"text": f"Weight norms of {d['model']}"}})},
        inputs=(Param("model", "model", "choice", ("mathneuro-tiny",), open=True),),
        examples=(Example("weight-norms", "Weight norms", "norms", defaults={"model": "mathneuro-tiny"}),)))
    monkeypatch.setattr(ex, "_registry", {})  # the examples registry is built again, with the new entry's
    monkeypatch.setattr(ex, "_shown", {})

    # the service: computed once (a known answer), then from the results cache
    first = mn.analysis_result("weight-norms", model="mathneuro-tiny")
    again = mn.analysis_result("weight-norms", model="mathneuro-tiny")
    weights = {n: p for n, p in load_model("mathneuro-tiny").model.named_parameters() if p.ndim == 2}
    assert [r["matrix"] for r in first.data["rows"]] == list(weights)
    assert all(abs(r["norm"] - float(weights[r["matrix"]].detach().double().norm())) < 1e-9 for r in first.data["rows"])
    assert (first.source, again.source) == ("computed", "cache") and again.data == first.data
    assert first.status == f"{len(weights)} matrices of **mathneuro-tiny** (computed now)."
    assert sorted(f.rsplit("/", 1)[1] for f in first.files()) == ["weight-norms-long.csv", "weight-norms-long.parquet",
                                                                  "weight-norms.csv", "weight-norms.html",
                                                                  "weight-norms.json"]

    # the CLI: listed with its inputs and its link, answered by name (the same data, from the cache)
    assert main(["analyses", "list", "--paper", "mathneuro", "--json"]) == 0
    listed = {r["analysis"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed["weight-norms"]["inputs"] == "model" and listed["weight-norms"]["stored as"] == "toy/weight-norms"
    assert listed["weight-norms"]["links"] == "?tab=mathneuro&example=weight-norms"
    assert main(["analyses", "run", "mathneuro", "weight-norms", "--set", "model=mathneuro-tiny", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == first.data
    assert main(["analyses", "run", "mathneuro", "weight-norms", "--set", "norm=l1"]) == 2
    assert "has no input 'norm'" in capsys.readouterr().err

    # a deep link opens it
    opened = ex.resolve({"tab": "mathneuro", "example": "weight-norms"})
    assert opened.notice == "" and opened.view.query() == "?tab=mathneuro&example=weight-norms&model=mathneuro-tiny"
    shown = ex.show(opened.view)
    assert shown.source == "cache" and shown.figures["norms"].layout.title.text == "Weight norms of mathneuro-tiny"

    # the tab's stage lists it
    with gr.Blocks():
        stage = build_stage("mathneuro")
    assert ("Weight norms", "weight-norms") in stage.picker.choices
