"""core.neuzip's service: the committed example answers without loading the model, a repeated measurement is a cache
hit, and the registry gives every setting a label, a family and a style."""

import pytest

import core.neuzip as nz
from core.errors import LayerwiseError
from core.zoo import card_of


def test_the_committed_example_answers_without_loading(fresh_cache):
    from core.zoo import clear_loaded, loading

    if not card_of(nz.EXAMPLE_MODEL).ready:
        pytest.skip("smollm2-135m not prepared")
    clear_loaded()
    weights = nz.weights_result(nz.EXAMPLE_MODEL, 7, None)
    tradeoff = nz.tradeoff_result(nz.EXAMPLE_MODEL, block_size=128, words=2000)
    assert weights.source == tradeoff.source == "precomputed"
    assert not loading._loaded  # the fingerprint came from the weight files, the model was never loaded
    parts, shown = nz.example_parts()
    assert set(parts) == {"histograms", "table", "tradeoff", "throughput"} and shown["tradeoff"].files()
    rows = parts["throughput"]["rows"]  # measured where zipnn is installed: every codec, and k=3, B=128
    assert [r["label"] for r in rows] == ["NeuZip (lossless)", "NeuZip k=3, B=128", "ZipNN 0.5.4",
                                          "zstd -3 (raw bytes)", "memory copy"]
    assert all(r["decompress_MBps"] > 0 and 0 < r["bits_per_weight"] <= 16 for r in rows)
    assert "ZipNN 0.5.4" in shown["throughput"].status and not loading._loaded


def test_a_repeated_measurement_is_a_cache_hit(tiny_folder, fresh_cache):
    first = nz.table_result(str(tiny_folder), 3, 32)
    second = nz.table_result(str(tiny_folder), 3, 32)
    assert (first.source, second.source) == ("computed", "cache") and second.data == first.data
    assert first.tables["table"][0]["layer"] == "total" and second.files() == first.files()


def test_every_setting_is_labelled_by_the_registry():
    from core.neuzip.formats import setting_label
    from core.neuzip.tradeoff import default_settings

    for s in default_settings((7, 3), 64, baselines=True):
        label = setting_label(s)
        assert label and nz.TRADEOFF_METHODS[s["method"]].view(s)[1]
    assert setting_label({"method": "neuzip", "k": 3, "block_size": 64}) == "NeuZip k=3, B=64"
    with pytest.raises(LayerwiseError, match="unknown method"):
        setting_label({"method": "no-such-format"})


def _synthetic(ref, progress=None):
    from core.neuzip.compare import synthetic_weights

    return synthetic_weights({f"layers.{i}.weight": ((64, 96), 0.02) for i in range(3)}, "gaussian", seed=2)


@pytest.fixture
def synthetic_model(monkeypatch):
    """``any-model``: three synthetic weights (its fingerprint made up: nothing is read from disk)."""
    import core.zoo
    from core.neuzip import compute as C

    monkeypatch.setattr(C, "_weights", _synthetic)
    monkeypatch.setattr(core.zoo, "fingerprint", lambda ref: "fp-" + ref)


def test_throughput_compares_every_installed_codec_and_the_lossy_setting(synthetic_model, capsys, tmp_path):
    from core.cli import main

    res = nz.throughput_result("any-model", 3, 64, numel=64 * 96 * 2, repeats=1)
    r = res.data
    installed = [c for c in nz.CODECS if nz.CODECS[c].available()]
    assert [x["codec"] for x in r["rows"]] == installed[:1] + ["neuzip"] + installed[1:]
    assert r["rows"][1]["label"] == "NeuZip k=3, B=64" and r["numel"] == 2 * 64 * 96 and r["tensors"] == 2
    assert [x["codec"] for x in res.tables["throughput"]] == [x["label"] for x in r["rows"]]
    for x in r["rows"]:
        assert x["label"] in res.status or x["codec"] == "memcpy"
    assert "memory copy" in res.status and "pip install zipnn" not in res.status
    assert res.key is None and res.source == "computed"  # timed each time: no key, its files are written afresh
    lossless = nz.throughput_result("any-model", 7, 128, numel=1024, repeats=1).data  # B is ignored for k = 7
    assert [x["lossless"] for x in lossless["rows"]] == [True] * len(installed) and lossless["tensors"] == 1

    # the CLI prints and writes the same result
    assert main(["neuzip", "throughput", "--model", "any-model", "--k", "3", "--block-size", "64", "--numel",
                 str(64 * 96 * 2), "--repeats", "1", "--out", str(tmp_path / "t.csv")]) == 0
    out = capsys.readouterr().out
    assert "NeuZip k=3, B=64" in out and "decompress_MBps" in out and "Measured now" in out
    csv_rows = (tmp_path / "t.csv").read_text().splitlines()
    assert csv_rows[0].startswith("codec,bits_per_weight") and len(csv_rows) == 1 + len(r["rows"])


def test_throughput_without_zipnn_says_how_to_add_it(synthetic_model, monkeypatch):
    import dataclasses

    monkeypatch.setitem(nz.CODECS, "zipnn", dataclasses.replace(nz.CODECS["zipnn"], available=lambda: False))
    res = nz.throughput_result("any-model", 7, None, numel=1024, repeats=1)
    assert "zipnn" not in [x["codec"] for x in res.data["rows"]] and "zipnn" in res.data["skipped"]
    assert "ZipNN is not installed" in res.status and "pip install zipnn==0.5.4" in res.status
    assert "ZipNN" not in {t.name for t in res.figures["throughput"].data}


def test_precompute_only_the_throughput_keeps_the_other_parts(monkeypatch, tmp_path):
    import core.zoo
    from core.neuzip import compute as C
    from core.neuzip.requests import CACHE_VERSION
    from core.runner import ExampleStore

    monkeypatch.setattr(C, "_weights", _synthetic)
    monkeypatch.setattr(core.zoo, "fingerprint", lambda ref: "fp-" + ref)
    store = tmp_path / "examples.json"
    old = [{"model": "m", "fingerprint": "fp-m", "analysis": a, "params": {"x": a, "version": CACHE_VERSION},
            "data": {"kept": a}} for a in ("neuzip/histograms", "neuzip/table", "neuzip/tradeoff-result")]
    stale = {"model": "m", "fingerprint": "fp-m", "analysis": "neuzip/throughput", "params": {"version": -1},
             "data": {"rows": []}}
    ExampleStore.write(store, old + [stale])
    nz.precompute_examples("m", path=store, only=("throughput",))
    entries = ExampleStore(store).entries()
    assert entries[:3] == old and len(entries) == 4
    thr = entries[3]["data"]
    assert entries[3]["params"]["version"] == CACHE_VERSION and thr["rows"][1]["label"] == "NeuZip k=3, B=128"
    ExampleStore.write(store, old[:1] + [stale])  # the trade-off to keep is missing
    with pytest.raises(LayerwiseError, match="holds no current table, tradeoff"):
        nz.precompute_examples("m", path=store, only=("throughput",))
    with pytest.raises(LayerwiseError, match="unknown example part"):
        nz.precompute_examples("m", path=store, only=("speed",))
