"""One budget for every heavy request (issue 42): each is priced before it runs (tokens x steps x batch x model size,
samples, settings), a request over the budget is refused with one message before anything loads or trains, and
every view the app offers by default fits in it."""
from __future__ import annotations

import dataclasses

import pytest

import core.lrp.views as lrp_views
import core.mathneuro.views as mathneuro_views
import core.mixln.views as mixln_views
import core.neuzip.views as neuzip_views
from core.budget import DEFAULT_PUBLIC_FLOPS, Price, charge, max_request_flops, model_flops
from core.errors import BadInputError

REGISTRIES = (lrp_views.ANALYSES, mathneuro_views.ANALYSES, mixln_views.ANALYSES, neuzip_views.ANALYSES)
# fields that say how much work a request asks for: a request type with one of them must have a price()
SIZE_FIELDS = {"n", "eval_n", "samples", "steps", "batch", "seq", "seq_len", "words", "numel", "repeats", "seeds",
               "tokens", "max_tokens", "layers"}
UNPRICED = {"TrainRequest": "mixln train: the command line only (no budget there)",
            "DeviceMemoryRequest": "a GPU host only; one forward of at most 512 tokens per setting"}


@pytest.fixture
def public(monkeypatch):
    monkeypatch.setenv("LAYERWISE_PUBLIC", "1")
    monkeypatch.delenv("LAYERWISE_MAX_REQUEST_FLOPS", raising=False)


def test_the_budget_is_public_only_and_can_be_set(monkeypatch):
    monkeypatch.delenv("LAYERWISE_MAX_REQUEST_FLOPS", raising=False)
    monkeypatch.setenv("LAYERWISE_PUBLIC", "0")
    assert max_request_flops() is None
    charge(Price(1e30, "anything"))  # locally nothing is refused
    monkeypatch.setenv("LAYERWISE_PUBLIC", "1")
    assert max_request_flops() == DEFAULT_PUBLIC_FLOPS
    monkeypatch.setenv("LAYERWISE_MAX_REQUEST_FLOPS", "1e9")
    with pytest.raises(BadInputError, match=r"about 2\.0e\+09 operations \(x\); this server runs at most 1\.0e\+09"):
        charge(Price(2e9, "x"))
    assert model_flops(10, 3) == 60 and model_flops(10, 3, backward=True) == 180


def test_a_training_request_over_the_budget_is_refused_before_anything_loads(public, monkeypatch):
    """Issue 42, item 6: 1 step x batch 64 x 4,096 tokens on SmolLM2 was accepted, used 4-5.5 GB and ran past 22
    minutes. Priced, it is 1.1e15 operations: refused with the cost, the budget and the fix, nothing trained."""
    import core.neuzip as nz
    from core.neuzip import training

    monkeypatch.setattr(training, "train_modes", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(BadInputError) as err:
        nz.training_result("smollm2-135m", ["vanilla", "vanilla-adamw", "lomo", "lomo+neuzip"], 1, 64, 4096)
    message = str(err.value)
    assert message.startswith("This request would cost about 1.1e+15 operations (4 modes x 1 step x 64 x 4,096 "
                              "tokens of smollm2-135m (134.5 M parameters)); this server runs at most 5.0e+13")
    assert "Fix: fewer steps, a smaller batch or shorter sequences" in message


def test_the_price_counts_what_the_request_asks_for():
    from core.neuzip.requests import TrainingRequest

    one = TrainingRequest.parse("tiny-llama", ["lomo"], steps=2, batch=1, seq=64).price()
    assert TrainingRequest.parse("tiny-llama", ["lomo"], steps=6, batch=2, seq=128).price().flops == 12 * one.flops
    both = TrainingRequest.parse("tiny-llama", ["lomo", "lomo+neuzip"], steps=2, batch=1, seq=64).price()
    assert both.flops == 3 * one.flops  # LOMO + NeuZip decompresses each layer twice
    # tiny-llama by hand: embedding and head 4,096 x 64 each; 2 layers of q, o 64 x 64, k, v 64 x 32, the MLP's three
    # 64 x 160 and two norms of 64; the final norm
    params = 2 * 4096 * 64 + 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 160 + 2 * 64) + 64
    assert params == 610_624 and one.flops == 6 * params * 2 * 64


def test_every_request_that_says_how_much_work_it_asks_has_a_price():
    """A new analysis whose request takes a size (samples, steps, tokens, ...) is priced, or listed here with why."""
    missing = []
    for registry in REGISTRIES:
        for name, a in registry.items():
            r = a.request
            sizes = {f.name for f in dataclasses.fields(r)} & SIZE_FIELDS if dataclasses.is_dataclass(r) else set()
            if sizes and not callable(getattr(r, "price", None)) and r.__name__ not in UNPRICED:
                missing.append(f"{name}: {r.__name__} {sorted(sizes)}")
    assert not missing, missing


def default_requests() -> dict:
    """The heavy requests each tab starts with (its default numbers), on the largest registered model it offers."""
    from core.lrp.eval_requests import EvaluationRequest, KeyTokenRequest
    from core.mathneuro.requests import DEFAULTS, ConsistencyRequest, EffectRequest, ScaleSweepRequest
    from core.mixln.requests import AngularRequest, LiveRequest, ModelGradnormsRequest, RemovalRequest
    from core.neuzip.requests import ThroughputRequest, TradeoffRequest, TrainingRequest

    mn = dict(math=DEFAULTS["math"], nonmath=DEFAULTS["nonmath"], n=DEFAULTS["n"])
    live = ["vanilla", "vanilla-adamw", "lomo", "lomo+neuzip"]  # the live training's default modes
    return {
        "lrp evaluation": lambda: EvaluationRequest.parse("mamba-lm", 100, 10, None),
        "lrp key-token": lambda: KeyTokenRequest.parse(100, None, 1),
        "mathneuro effect": lambda: EffectRequest.parse("smollm2-135m", **mn, proportion=0.05, eval_n=100),
        "mathneuro scale sweep": lambda: ScaleSweepRequest.parse("smollm2-135m", **mn, proportion=0.05, eval_n=100),
        "mathneuro consistency": lambda: ConsistencyRequest.parse("smollm2-135m", **mn),
        "mixln angular": lambda: AngularRequest.parse("smollm2-135m"),
        "mixln removal": lambda: RemovalRequest.parse(["smollm2-135m"]),
        "mixln gradnorms": lambda: ModelGradnormsRequest.parse("smollm2-135m"),
        "mixln live": lambda: LiveRequest(),
        "neuzip tradeoff": lambda: TradeoffRequest.parse("smollm2-135m"),
        "neuzip throughput": lambda: ThroughputRequest.parse("smollm2-135m", 3, 128),
        **{f"neuzip training {m}": (lambda m=m: TrainingRequest.parse(m, live, 8, 2, 64))
           for m in ("tiny-llama", "smollm2-135m", "mixln:pre-ln")},
    }


@pytest.mark.slow
def test_every_view_the_app_offers_fits_the_public_budget(public):
    """The tabs' default requests, priced: each fits the public budget (a visitor meets a refusal only when asking
    for more than the app offers by default), and none is priced at nothing."""
    prices = {label: make().price() for label, make in default_requests().items()}
    print("\n" + "\n".join(f"{label}: {p.flops:.2e} ({p.what})" for label, p in prices.items()))
    over = {label: p.what for label, p in prices.items() if not 0 < p.flops <= DEFAULT_PUBLIC_FLOPS}
    assert not over, over
