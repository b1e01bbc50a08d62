"""NeuZip measurements: histograms and entropies, the compression table, throughput."""
import math
import zlib

import numpy as np
import pytest
import torch
from torch import nn

from core.errors import BadInputError
from core.neuzip.measure import bitfield_histograms, compression_table, entropy_bits, throughput, zstd_available


def state_dict():
    g = torch.Generator().manual_seed(0)
    return {"a.weight": (torch.randn(64, 64, generator=g) * 0.02).to(torch.bfloat16),
            "b.weight": (torch.randn(32, 64, generator=g) * 0.05).to(torch.bfloat16),
            "b.bias": torch.zeros(32, dtype=torch.bfloat16)}


def test_entropy_bits():
    assert entropy_bits([5, 5]) == 1.0
    assert entropy_bits([1, 1, 1, 1, 0]) == 2.0
    assert entropy_bits([7]) == 0.0 and entropy_bits([]) == 0.0


def test_histograms_count_every_field():
    sd = state_dict()
    h = bitfield_histograms(sd)
    assert h["tensors"] == ["a.weight", "b.weight"]  # matrices only by default
    n = 64 * 64 + 32 * 64
    assert h["numel"] == n and sum(h["exponent"]) == n and sum(h["mantissa"]) == n
    bits = torch.cat([sd["a.weight"].reshape(-1), sd["b.weight"].reshape(-1)]).view(torch.int16).to(torch.int32)
    assert h["sign"][1] == int((bits < 0).sum())
    assert h["exponent"] == np.bincount(((bits >> 7) & 0xFF).numpy(), minlength=256).tolist()
    e = h["entropy"]
    assert 0.99 < e["sign"] <= 1.0 and 2.0 < e["exponent"] < 3.5 and 6.5 < e["mantissa"] <= 7.0
    assert h["note"] is None


def test_tied_weights_count_once():
    sd = state_dict()
    sd["lm_head.weight"] = sd["a.weight"]
    assert bitfield_histograms(sd)["tensors"] == ["a.weight", "b.weight"]


def test_histograms_of_a_float32_model_say_they_converted():
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    h = bitfield_histograms(model)
    assert "float32" in h["note"] and "lossy" in h["note"] and h["numel"] == 80
    exact = {k: v.float() for k, v in state_dict().items()}
    assert "exact here" in bitfield_histograms(exact)["note"]
    assert "exact here" in compression_table(exact)["note"]
    with pytest.raises(BadInputError):
        bitfield_histograms({"bias": torch.zeros(4)})


@pytest.mark.parametrize("k,block", [(7, None), (3, 64)])
def test_compression_table(k, block):
    sd = state_dict()
    t = compression_table(sd, mantissa_bits=k, block_size=block)
    assert [r["name"] for r in t["rows"]] == ["a.weight", "b.weight"]
    for r in t["rows"]:
        # achieved rate sits just above the empirical bound (table + chunk states + metadata)
        assert r["entropy_bound"] < r["bits_per_weight"] < r["entropy_bound"] + 1.0
        raw = sd[r["name"]].view(torch.int16).numpy().tobytes()
        assert r["zlib_bits_per_weight"] == 8 * len(zlib.compress(raw, 6)) / r["numel"]
        assert (r["zstd_bits_per_weight"] is None) == (not zstd_available())
    total = t["total"]
    assert total["numel"] == 64 * 64 + 32 * 64
    w = [r["numel"] / total["numel"] for r in t["rows"]]
    assert math.isclose(total["bits_per_weight"], sum(wi * r["bits_per_weight"] for wi, r in zip(w, t["rows"])))
    if k == 7:
        h_exp = bitfield_histograms({"a": sd["a.weight"]})["entropy"]["exponent"]
        assert math.isclose(t["rows"][0]["exponent_entropy"], h_exp)
        assert total["bits_per_weight"] < total["zlib_bits_per_weight"]  # NeuZip beats generic deflate


def test_throughput_fields():
    x = (torch.randn(128, 128) * 0.02).to(torch.bfloat16)
    r = throughput(x, repeats=1)
    assert r["bytes"] == 2 * 128 * 128
    assert r["compress_MBps"] > 0 and r["decompress_MBps"] > 0 and r["memcpy_MBps"] > 0
    assert math.isclose(r["decompress_vs_memcpy"], r["memcpy_MBps"] / r["decompress_MBps"], rel_tol=1e-9)
    assert 10 < r["bits_per_weight"] < 12
