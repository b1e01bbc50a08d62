"""Checkpoints bigger than one device: a random-weight Llama loaded with ``--device-map auto --max-memory cpu=650KB``
(about half of its 0.85 MB in CPU memory, the other half offloaded to disk and read for each forward) gives MathNeuro
the same statistics, scores, masks and interventions as the model loaded whole, NeuZip the same compressed tensors
and Mix-LN the same diagnostics; what cannot work on an offloaded model is refused with one message."""
import json

import pytest
import torch

from core.cli import main
from core.errors import BadInputError, ModelLoadError
from core.zoo import clear_loaded, load_model
from core.zoo.placement import (Placement, is_dispatched, make_placement, offloaded_names, parameter_values,
                                weight_of)

CAP = "cpu=650KB"


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A local folder: a float32 Llama (4 layers, width 64, untied lm_head, 0.85 MB) with a 384-token tokenizer."""
    import transformers

    from tests.hub_repos import tokenizer
    torch.manual_seed(0)
    tok = tokenizer()
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                   num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                                   tie_word_embeddings=False)
    folder = tmp_path_factory.mktemp("llama") / "random-llama"
    transformers.LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def spread_placement(tmp_path) -> Placement:
    return make_placement("auto", CAP, str(tmp_path / "offload"))


@pytest.fixture
def pair(llama, tmp_path):
    """(the model loaded whole, the model spread over CPU and disk), each freshly loaded."""
    whole = load_model(str(llama), use_cache=False)
    spread = load_model(str(llama), use_cache=False, placement=spread_placement(tmp_path))
    return whole, spread


def token_samples(n=6, length=24, vocab=384, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (1, length), generator=gen) for _ in range(n)]


# ---- the placement itself ----------------------------------------------------------------------------------------

def test_placement_options_are_checked(tmp_path):
    assert make_placement() is None
    p = make_placement(None, "cpu=400KB,", None)
    assert p == Placement("auto", (("cpu", 400_000),), None)
    assert p.hf_kwargs() == {"device_map": "auto", "max_memory": {"cpu": 400_000}}
    assert make_placement("sequential", "cpu=1.5GiB").max_memory == (("cpu", int(1.5 * 2**30)),)
    (tmp_path / "file").write_text("x")
    for args, match in ((("everywhere", None), "not one of accelerate's"), ((None, "cpu=lots"), "is not a size"),
                        ((None, "cpu=0"), "not a positive size"), ((None, "gpu7=1GiB"), "neither a GPU index"),
                        ((None, "cpu=1GiB,cpu=2GiB"), "names cpu twice"), ((None, "cpu"), "no device=size"),
                        ((None, ","), "is empty")):
        with pytest.raises(BadInputError, match=match):
            make_placement(*args)
    with pytest.raises(BadInputError, match="is not a folder"):
        make_placement("auto", None, str(tmp_path / "file"))
    with pytest.raises(BadInputError, match="cannot be used here: File name too long"):
        make_placement("auto", None, "x" * 300)
    if not torch.cuda.is_available():
        with pytest.raises(BadInputError, match="names GPU 0, but this machine has 0 GPU"):
            make_placement(None, "0=20GiB,cpu=64GiB")


def test_a_cap_spreads_the_checkpoint_over_cpu_and_disk(pair, tmp_path):
    whole, spread = pair
    placed = spread.model.hf_device_map
    assert set(placed.values()) == {"cpu", "disk"}, placed
    assert placed["model.layers.0"] == "cpu" and placed["model.layers.3"] == "disk" and placed["lm_head"] == "disk"
    # the offloaded layers hold no weights: placeholders on meta, read from the checkpoint's file for each forward
    assert {p.device.type for p in spread.model.model.layers[3].parameters()} == {"meta"}
    assert len(offloaded_names(spread.model)) == 20 and not offloaded_names(whole.model)
    assert spread.fingerprint == whole.fingerprint  # the same weight files
    for name, p in whole.model.named_parameters():
        assert torch.equal(parameter_values(spread.model, name), p.detach()), name
    ids = torch.randint(0, 384, (2, 16))
    with torch.no_grad():
        assert torch.equal(spread.model(ids).logits, whole.model(ids).logits)
    assert not (tmp_path / "offload").exists() or (tmp_path / "offload").is_dir()


def test_a_layerwise_model_class_refuses_a_placement(tmp_path):
    with pytest.raises(ModelLoadError, match="loads on one device"):
        load_model("mamba-sentiment", use_cache=False, placement=spread_placement(tmp_path))


# ---- MathNeuro -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["mathneuro", "wanda", "random", "lape"])
def test_mathneuro_statistics_scores_and_masks_equal_the_in_memory_run(pair, method):
    from core.mathneuro import collect, importance_scores, scored_linears, select
    whole, spread = pair
    math, nonmath = token_samples(seed=1), token_samples(seed=2)
    sa, sb = collect(whole.model, math, nonmath, method), collect(spread.model, math, nonmath, method)
    for side in ("math", "nonmath"):
        a, b = getattr(sa, side), getattr(sb, side)
        va, vb = (a.sums, b.sums) if method != "lape" else (a.positive, b.positive)
        assert va.keys() == vb.keys() and all(torch.equal(va[k], vb[k]) for k in va)
    if method != "lape":  # the scores |W| * ||X||, matrix by matrix, the offloaded ones read from disk
        linears_a, linears_b = scored_linears(whole.model), scored_linears(spread.model)
        assert len(linears_a) == 29
        for name in linears_a:
            assert torch.equal(importance_scores(weight_of(linears_b[name]), sb.math.sums[name]),
                               importance_scores(linears_a[name].weight, sa.math.sums[name])), name
    ma, mb = select(whole.model, sa, 0.05, method, seed=3), select(spread.model, sb, 0.05, method, seed=3)
    assert ma.keys() == mb.keys() and all(torch.equal(ma[k], mb[k].to(ma[k].device)) for k in ma)
    assert sum(int(m.sum()) for m in ma.values()) > 0


@pytest.mark.parametrize("mode,factor", [("prune", None), ("scale", 1.5)])
def test_interventions_on_a_spread_model_equal_the_in_memory_ones(pair, mode, factor):
    from core.mathneuro import apply_intervention, collect, intervened, select
    whole, spread = pair
    masks = select(whole.model, collect(whole.model, token_samples(seed=1), token_samples(seed=2)), 0.1)
    assert any(n in offloaded_names(spread.model) for n in masks)  # the set reaches the layers on disk
    ids = torch.randint(0, 384, (2, 20))
    with torch.no_grad():
        before = spread.model(ids).logits
        with intervened(whole.model, masks, mode, factor) as view:
            want = view(ids).logits
        with intervened(spread.model, masks, mode, factor) as view:
            got = view(ids).logits
        after = spread.model(ids).logits
    assert torch.equal(got, want) and not torch.equal(got, before)
    assert torch.equal(after, before)  # the shared model never sees the intervention
    assert {p.device.type for p in spread.model.model.layers[3].parameters()} == {"meta"}  # nor keeps weights
    with pytest.raises(BadInputError, match="offloaded by --device-map"):
        apply_intervention(spread.model, masks, mode, factor)


def _cli(capsys, monkeypatch, tmp_path, name, *args):
    """``python -m core ...`` in-process with an empty results cache, so nothing is answered from an earlier run."""
    from core import runner
    from core.cache import ResultsCache
    monkeypatch.setattr(runner, "results_cache", lambda: ResultsCache(tmp_path / f"results-{name}"))
    clear_loaded()
    code = main(list(args))
    out = capsys.readouterr()
    from core.zoo.loading import _loaded
    spread = any(is_dispatched(m.model) for m in _loaded.values())
    assert spread == ("--max-memory" in args), args  # the command loaded the model as asked
    return code, out.out, out.err


@pytest.mark.slow
def test_mathneuro_cli_with_device_map_equals_the_whole_model(llama, tmp_path, capsys, monkeypatch):
    from safetensors.torch import load_file
    common = ["--model", str(llama), "--math", "arithmetic-words", "--nonmath", "review-sentiment", "-n", "8",
              "-K", "0.05", "--json"]
    spread = ["--max-memory", CAP, "--offload-folder", str(tmp_path / "offload")]
    found = {}
    for name, extra in (("whole", []), ("spread", spread)):
        code, out, err = _cli(capsys, monkeypatch, tmp_path, name, "mathneuro", "identify", *common, *extra,
                              "--out", str(tmp_path / f"{name}.safetensors"))
        assert code == 0, err
        ident = json.loads(out)
        code, out, err = _cli(capsys, monkeypatch, tmp_path, name + "-prune", "mathneuro", "prune", *common,
                              *extra, "--eval-n", "6", "--metric", "loss")
        assert code == 0, err
        found[name] = (ident, json.loads(out), load_file(str(tmp_path / f"{name}.safetensors")))
    (ia, pa, ma), (ib, pb, mb) = found["whole"], found["spread"]
    assert pa["source"] == pb["source"] == "computed"
    assert {k: v for k, v in ia.items() if k not in ("seconds", "masks_file")} == \
        {k: v for k, v in ib.items() if k not in ("seconds", "masks_file")}
    assert ma.keys() == mb.keys() and all(torch.equal(ma[k], mb[k]) for k in ma)
    assert pa["rows"] == pb["rows"] and pa["rows"][0]["math_after"] != pa["rows"][0]["math_before"]


# ---- NeuZip and Mix-LN --------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_neuzip_compresses_a_spread_model_layer_by_layer(llama, tmp_path, capsys, monkeypatch):
    from safetensors import safe_open

    from core.neuzip.service import linear_weights
    from core.zoo.placement import ParameterValues
    spread = load_model(str(llama), use_cache=False, placement=spread_placement(tmp_path))
    assert isinstance(linear_weights(spread.model), ParameterValues)  # each weight read when it is compressed
    files = {}
    for name, extra in (("whole", []), ("spread", ["--max-memory", CAP])):
        files[name] = tmp_path / f"{name}.neuzip.safetensors"
        code, out, err = _cli(capsys, monkeypatch, tmp_path, name, "neuzip", "compress", "--model", str(llama),
                              "--k", "7", *extra, "--out", str(files[name]))
        assert code == 0, err
    with safe_open(str(files["whole"]), "pt") as a, safe_open(str(files["spread"]), "pt") as b:
        assert a.metadata() == b.metadata() and sorted(a.keys()) == sorted(b.keys())
        assert all(torch.equal(a.get_tensor(k), b.get_tensor(k)) for k in a.keys())
    code, out, err = _cli(capsys, monkeypatch, tmp_path, "tradeoff", "neuzip", "tradeoff", "--model", str(llama),
                          "--max-memory", CAP, "--k", "7", "--words", "100", "--no-baselines")
    assert code == 2 and "needs the model on one device" in err and "Traceback" not in err


@pytest.mark.slow
def test_mixln_diagnostics_of_a_spread_hub_style_model(llama, tmp_path, capsys, monkeypatch):
    found = {}
    for name, extra in (("whole", []), ("spread", ["--max-memory", CAP])):
        res = {}
        for cmd in ("angular", "removal"):
            code, out, err = _cli(capsys, monkeypatch, tmp_path, f"{name}-{cmd}", "mixln", cmd, "--model", str(llama),
                                  "--samples", "4", "--seq", "32", "--json", *extra)
            assert code == 0, err
            res[cmd] = json.loads(out)
        found[name] = res
    assert found["whole"] == found["spread"]
    code, out, err = _cli(capsys, monkeypatch, tmp_path, "gradnorms", "mixln", "gradnorms", "--model", str(llama),
                          "--samples", "2", "--seq", "32", "--max-memory", CAP)
    assert code == 2 and "offloaded by --device-map" in err and "Traceback" not in err
    assert is_dispatched(load_model(str(llama), use_cache=False, placement=spread_placement(tmp_path)).model)
