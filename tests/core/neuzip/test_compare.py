"""NeuZip against other codecs and against bf16: the comparison's bookkeeping, synthetic weights, forward ratios."""
import math

import numpy as np
import pytest
import torch

from core.errors import BadInputError
from core.neuzip import compare
from core.neuzip.compare import CODECS, codec_comparison, forward_ratio, synthetic_weights


def _weights():
    return synthetic_weights({"a": ((64, 96), 0.02), "b": ((33, 17), 0.05)}, "gaussian", seed=1)


def test_comparison_rows_and_breakdown_add_up():
    r = codec_comparison(_weights(), codecs=("neuzip", "zstd", "memcpy"), repeats=1)
    assert r["weights"] == 64 * 96 + 33 * 17 and r["bytes"] == 2 * r["weights"] and r["threads"] == 1
    rows = {row["codec"]: row for row in r["rows"]}
    assert set(rows) == {"neuzip", "zstd", "memcpy"}
    assert rows["memcpy"]["bits_per_weight"] == 16.0 and rows["memcpy"]["compress_MBps"] is None
    for row in rows.values():
        assert row["decompress_MBps"] > 0 and row["label"] == CODECS[row["codec"]].label
    nz = rows["neuzip"]
    b = r["neuzip_breakdown"]
    parts = b["exponent_entropy"] + b["sign_and_mantissa"] + b["coding_loss"] + b["tables"] + b["chunk_headers"] \
        + b["metadata"]
    assert math.isclose(parts, nz["bits_per_weight"], rel_tol=1e-9)  # every stored byte is accounted for
    assert b["sign_and_mantissa"] == 8.0 and b["tables"] > 0 and b["chunk_headers"] > 0 and b["metadata"] > 0
    assert math.isclose(r["entropy_bound"], r["exponent_entropy"] + 8.0)
    assert math.isclose(nz["gap_percent"], 100 * (nz["bits_per_weight"] / r["entropy_bound"] - 1))
    assert nz["bits_per_weight"] < rows["zstd"]["bits_per_weight"] < 16


def test_missing_codecs_are_skipped_with_a_note(monkeypatch):
    monkeypatch.setitem(CODECS, "zipnn", compare.Codec("zipnn", "ZipNN", "#000", lambda: False, compare._zipnn, "pip it"))
    r = codec_comparison(_weights(), codecs=("neuzip", "zipnn"), repeats=1)
    assert [row["codec"] for row in r["rows"]] == ["neuzip"] and "not installed" in r["skipped"]["zipnn"]
    with pytest.raises(BadInputError):
        codec_comparison(_weights(), codecs=("gzip",))
    with pytest.raises(BadInputError):
        codec_comparison({})


def test_zipnn_round_trips_when_installed():
    pytest.importorskip("zipnn")
    r = codec_comparison(_weights(), codecs=("zipnn",), repeats=1)  # raises if a round trip is not bit-exact
    assert 10 < r["rows"][0]["bits_per_weight"] < 12


def test_float32_inputs_are_noted():
    r = codec_comparison({"w": torch.randn(40, 40) * 0.02}, codecs=("neuzip",), repeats=1)
    assert "float32" in r["note"]


def test_synthetic_weights():
    shapes = {"w": ((400, 500), 0.03)}
    g = synthetic_weights(shapes, "gaussian")["w"]
    t = synthetic_weights(shapes, "student-t")["w"]
    assert g.shape == t.shape == (400, 500) and g.dtype == t.dtype == torch.bfloat16
    for x in (g, t):
        assert abs(float(x.float().std()) / 0.03 - 1) < 0.05
    kurt = [float(((x.float() / x.float().std()) ** 4).mean()) for x in (g, t)]
    assert kurt[0] < 3.2 < kurt[1]  # Student-t(4) has heavy tails
    assert torch.equal(synthetic_weights(shapes, "gaussian")["w"], g)  # seeded
    with pytest.raises(BadInputError):
        synthetic_weights(shapes, "laplace")


def test_forward_ratio_rows():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 32), torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 50))
    ids = torch.tensor([[1, 5, 9, 13, 2, 40]])
    r = forward_ratio(model, ids, [(7, None), (1, 32)], decode_ahead=(0, 1), repeats=1)
    assert r["tokens"] == ids.numel() and r["bf16_seconds"] > 0
    assert [(row["k"], row["decode_ahead"]) for row in r["rows"]] == [(7, 0), (7, 1), (1, 0), (1, 1)]
    assert all(row["ratio"] > 0 and np.isfinite(row["seconds"]) for row in r["rows"])
    assert r["rows"][0]["max_abs_logit_diff"] == 0.0 and r["rows"][2]["max_abs_logit_diff"] > 0


def test_lossy_settings_are_timed_beside_the_lossless_codecs():
    r = codec_comparison(_weights(), codecs=("neuzip", "zstd", "memcpy"), repeats=1, lossy=((3, 64), (0, None)))
    assert [row["label"] for row in r["rows"]] == ["NeuZip (lossless)", "NeuZip k=3, B=64", "NeuZip k=0",
                                                   "zstd -3 (raw bytes)", "memory copy"]
    lossy = [row for row in r["rows"] if not row["lossless"]]
    assert [(row["codec"], row["k"], row["block_size"]) for row in lossy] == [("neuzip", 3, 64), ("neuzip", 0, None)]
    assert all(row["colour"] == CODECS["neuzip"].lossy_colour and row["gap_percent"] is None for row in lossy)
    # every stored byte, as when compressing alone (k=3: sign + 3 mantissa bits, the exponents, the scales)
    from core.neuzip import compress
    alone = sum(compress(w.reshape(-1), 3, 64).nbytes for w in _weights().values())  # measured flat
    assert math.isclose(lossy[0]["bits_per_weight"], 8 * alone / r["weights"])
    assert lossy[1]["bits_per_weight"] < lossy[0]["bits_per_weight"] < r["rows"][0]["bits_per_weight"]
    with pytest.raises(BadInputError):
        codec_comparison(_weights(), codecs=("neuzip",), lossy=((7, None),))
    with pytest.raises(BadInputError):
        codec_comparison(_weights(), codecs=("neuzip",), lossy=((3, 100),))


def test_the_truncation_reference_rounds_within_half_a_last_bit():
    x = synthetic_weights({"w": ((50, 40), 0.02)}, "student-t", seed=3)["w"].reshape(-1)
    for k in (0, 1, 3):
        y = compare.truncated_reference(x, k, None).float()
        assert float(((y - x.float()).abs() / x.float().abs().clamp_min(1e-30)).max()) <= 2.0 ** -(k + 1)
        assert torch.equal(compare.truncated_reference(y.to(torch.bfloat16), k, None).float(), y)  # idempotent


@pytest.mark.parametrize("lossy", [False, True])
def test_a_round_trip_that_is_not_bit_exact_is_caught(monkeypatch, lossy):
    import dataclasses

    def off_by_one(make):
        def wrapped(*args):
            comp, decomp, size = make(*args)
            return comp, (lambda blob: (decomp(blob).reshape(-1).view(torch.int16) ^ 1).view(torch.bfloat16)), size
        return wrapped
    nz = CODECS["neuzip"]
    bad = (dataclasses.replace(nz, make_lossy=off_by_one(nz.make_lossy)) if lossy
           else dataclasses.replace(nz, make=off_by_one(nz.make)))
    monkeypatch.setitem(CODECS, "neuzip", bad)
    with pytest.raises(RuntimeError, match="bit for bit"):
        codec_comparison(_weights(), codecs=("neuzip",), repeats=1, lossy=((1, 32),) if lossy else ())
