"""Compressed checkpoint: round trip, checksum, truncated / tampered / foreign files, atomic writes."""
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from core.errors import BadInputError
from core.neuzip import compress, load_compressed, save_compressed


def _tensors():
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(40, 50, generator=g) * 0.02).to(torch.bfloat16)
    return {"layer.0": compress(w), "layer.1": compress(w[:7], mantissa_bits=3, block_size=32),
            "odd": compress(torch.tensor([float("nan"), -0.0, float("inf")], dtype=torch.bfloat16))}, w


def test_round_trip(tmp_path):
    tensors, w = _tensors()
    path = save_compressed(tmp_path / "model.nz.safetensors", tensors)
    loaded = load_compressed(path)
    assert set(loaded) == set(tensors)
    for name, ct in tensors.items():
        got, want = loaded[name].decompress(), ct.decompress()
        assert got.shape == want.shape
        assert torch.equal(got.view(torch.int16), want.view(torch.int16))
        assert loaded[name].metadata() == ct.metadata()
        assert loaded[name].nbytes == ct.nbytes
    assert torch.equal(loaded["layer.0"].decompress().view(torch.int16), w.view(torch.int16))
    assert [p.name for p in tmp_path.iterdir()] == ["model.nz.safetensors"]  # no temp file left


def test_single_tensor(tmp_path):
    tensors, _ = _tensors()
    save_compressed(tmp_path / "one", tensors["odd"])
    assert list(load_compressed(tmp_path / "one")) == ["tensor"]


def test_truncated_file(tmp_path):
    tensors, _ = _tensors()
    path = save_compressed(tmp_path / "m", tensors)
    data = path.read_bytes()
    for cut in (10, len(data) // 2, len(data) - 3):
        path.write_bytes(data[:cut])
        with pytest.raises(BadInputError, match="not a valid NeuZip checkpoint"):
            load_compressed(path)


def test_tampered_payload(tmp_path):
    tensors, _ = _tensors()
    path = save_compressed(tmp_path / "m", tensors)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01  # one bit in the last array
    path.write_bytes(bytes(data))
    with pytest.raises(BadInputError, match="checksum"):
        load_compressed(path)


def test_tampered_metadata(tmp_path):
    tensors, _ = _tensors()
    path = save_compressed(tmp_path / "m", tensors)
    with safe_open(str(path), framework="pt") as f:
        meta, arrays = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    codec = json.loads(meta["codec"])
    codec["layer.0"]["shape"] = [50, 40]
    meta["codec"] = json.dumps(codec)
    save_file(arrays, str(path), metadata=meta)
    with pytest.raises(BadInputError, match="checksum"):
        load_compressed(path)


def test_consistent_checksum_but_inconsistent_contents(tmp_path):
    """A file re-signed after editing (checksum recomputed) still fails cleanly at load."""
    from core.neuzip import checkpoint

    tensors, _ = _tensors()
    path = save_compressed(tmp_path / "m", tensors)
    with safe_open(str(path), framework="pt") as f:
        meta, arrays = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    arrays["layer.0::fields"] = arrays["layer.0::fields"][:-1].clone()
    views = {k: a.numpy().view(checkpoint._PART_DTYPES[k.rsplit("::", 1)[1]]) for k, a in arrays.items()}
    meta["sha256"] = checkpoint._digest(meta["codec"], views)
    save_file(arrays, str(path), metadata=meta)
    with pytest.raises(BadInputError, match="packed fields"):
        load_compressed(path)


def test_foreign_and_missing_files(tmp_path):
    save_file({"w": torch.zeros(3)}, str(tmp_path / "plain"))
    with pytest.raises(BadInputError, match="no NeuZip metadata"):
        load_compressed(tmp_path / "plain")
    (tmp_path / "junk").write_bytes(b"not safetensors at all")
    with pytest.raises(BadInputError):
        load_compressed(tmp_path / "junk")
    with pytest.raises(BadInputError, match="does not exist"):
        load_compressed(tmp_path / "missing")


def test_failed_save_leaves_old_file_intact(tmp_path, monkeypatch):
    tensors, _ = _tensors()
    path = save_compressed(tmp_path / "m", tensors)
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("core.neuzip.checkpoint.save_file", boom)
    with pytest.raises(OSError):
        save_compressed(path, {"other": tensors["odd"]})
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["m"]


def test_bad_names_and_folders(tmp_path):
    tensors, _ = _tensors()
    with pytest.raises(BadInputError):
        save_compressed(tmp_path / "m", {"a::b": tensors["odd"]})
    with pytest.raises(BadInputError):
        save_compressed(tmp_path / "no" / "such" / "m", tensors)
    with pytest.raises(BadInputError):
        save_compressed(tmp_path / "m", {})


def _write_version_1(path, tensors: dict):
    """A file as Layerwise wrote it before format 2: exponents in core.neuzip.rans format (1,024-weight chunks)."""
    from core.neuzip import checkpoint, rans
    from core.neuzip.codec import split_fields

    arrays, codec = {}, {}
    for name, (x, k, block) in tensors.items():
        exponent, fields, scales = split_fields(x.reshape(-1), k, block)
        s = rans.encode(exponent.numpy())
        parts = {"symbols": s.table.symbols, "freqs": s.table.freqs, "states": s.states, "offsets": s.offsets,
                 "words": s.words, "fields": fields.numpy()}
        if scales is not None:
            parts["scales"] = scales.numpy()
        arrays.update({f"{name}::{p}": a for p, a in parts.items()})
        codec[name] = {"shape": list(x.shape), "mantissa_bits": k, "block_size": block, "chunk_size": s.chunk_size,
                       "precision": s.table.precision, "numel": x.numel(), "source_dtype": "bfloat16", "note": None}
    codec_json = json.dumps(codec, sort_keys=True)
    meta = {"format": "layerwise-neuzip", "version": "1", "codec": codec_json,
            "sha256": checkpoint._digest(codec_json, arrays)}
    signed = {np.dtype(np.uint8): np.uint8, np.dtype(np.uint16): np.int16, np.dtype(np.uint32): np.int32}
    save_file({k: torch.from_numpy(np.ascontiguousarray(a).view(signed[a.dtype])) for k, a in arrays.items()},
              str(path), metadata=meta)


def test_version_1_files_are_converted_on_load(tmp_path):
    _, w = _tensors()
    _write_version_1(tmp_path / "old", {"a": (w, 7, None), "b": (w[:9], 3, 32)})
    with pytest.warns(UserWarning, match="version 1 checkpoint.*converted to version 3"):
        loaded = load_compressed(tmp_path / "old")
    assert torch.equal(loaded["a"].decompress().view(torch.int16), w.view(torch.int16))
    want = compress(w[:9], mantissa_bits=3, block_size=32).decompress()
    assert torch.equal(loaded["b"].decompress().view(torch.int16), want.view(torch.int16))
    path = save_compressed(tmp_path / "new", loaded)  # saved again: version 3, no warning on load
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata()["version"] == "3"
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = load_compressed(path)
    assert torch.equal(again["a"].decompress().view(torch.int16), w.view(torch.int16))


DATA = Path(__file__).resolve().parents[2] / "data"


def test_version_2_files_are_converted_on_load(tmp_path):
    """tests/data/neuzip_v2.safetensors was written by Layerwise's format-2 writer (32-bit states, 16-bit words):
    a lossless 40x37 tensor in 6 chunks of 256 with NaN, infinities, signed zero, subnormals and escaped
    exponents, and a k = 3, B = 32 tensor in chunks of 512; the expected bf16 values sit beside it."""
    from safetensors.torch import load_file

    want = load_file(str(DATA / "neuzip_v2_expected.safetensors"))
    with safe_open(str(DATA / "neuzip_v2.safetensors"), framework="pt") as f:
        assert f.metadata()["version"] == "2" and f.get_tensor("a::words").dtype == torch.int16
    with pytest.warns(UserWarning, match="version 2 checkpoint.*converted to version 3"):
        loaded = load_compressed(DATA / "neuzip_v2.safetensors")
    assert loaded["a"].exponents.escapes.size == 3 and loaded["a"].exponents.chunk_size == 256
    assert loaded["b"].exponents.chunk_size == 512 and loaded["b"].mantissa_bits == 3
    for name in ("a", "b"):
        assert torch.equal(loaded[name].decompress().view(torch.int16), want[name].view(torch.int16))
    path = save_compressed(tmp_path / "new", loaded)
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata()["version"] == "3" and f.get_tensor("a::states").dtype == torch.int64
    assert torch.equal(load_compressed(path)["a"].decompress().view(torch.int16), want["a"].view(torch.int16))


def test_a_corrupt_version_2_stream_is_refused(tmp_path):
    from core.neuzip import pairs

    with safe_open(str(DATA / "neuzip_v2.safetensors"), framework="pt") as f:
        arrays = {k: f.get_tensor(k).numpy() for k in f.keys()}
        codec = json.loads(f.metadata()["codec"])
    table = pairs.PairTable(arrays["a::symbols"], arrays["a::counts"].view(np.uint16), pairs.PRECISION)
    words = arrays["a::words"].view(np.uint16)
    n, chunk = codec["a"]["shape"][0] * codec["a"]["shape"][1], codec["a"]["chunk_size"]
    offsets = np.concatenate([[0], arrays["a::offsets"].view(np.uint32), [words.size]])
    escape_offsets = np.concatenate([[0], arrays["a::escape_offsets"].view(np.uint32), [arrays["a::escapes"].size]])
    states = arrays["a::states"].view(np.uint32)
    args = (table, states, offsets, words, arrays["a::escapes"], escape_offsets, n, chunk)
    ok = pairs.decode_format2(*args)
    assert ok.size == n
    bad = words.copy()
    bad[5] ^= 0x0F0F
    with pytest.raises(ValueError, match="corrupt"):
        pairs.decode_format2(table, states, offsets, bad, *args[4:])
    with pytest.raises(ValueError, match="corrupt"):  # escapes moved between chunks
        pairs.decode_format2(*args[:5], escape_offsets + np.r_[0, [1] * (escape_offsets.size - 2), 0], n, chunk)


def test_unknown_version_names_the_readable_ones(tmp_path):
    tensors, _ = _tensors()
    path = save_compressed(tmp_path / "m", tensors)
    with safe_open(str(path), framework="pt") as f:
        meta, arrays = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    meta["version"] = "4"
    save_file(arrays, str(path), metadata=meta)
    with pytest.raises(BadInputError, match="unsupported version '4'.*reads versions 1, 2, 3"):
        load_compressed(path)
