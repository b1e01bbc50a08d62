"""Compressed checkpoint: round trip, checksum, truncated / tampered / foreign files, atomic writes."""
import json
import os

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
    with pytest.warns(UserWarning, match="version 1 checkpoint.*converted to version 2"):
        loaded = load_compressed(tmp_path / "old")
    assert torch.equal(loaded["a"].decompress().view(torch.int16), w.view(torch.int16))
    want = compress(w[:9], mantissa_bits=3, block_size=32).decompress()
    assert torch.equal(loaded["b"].decompress().view(torch.int16), want.view(torch.int16))
    path = save_compressed(tmp_path / "new", loaded)  # saved again: version 2, no warning on load
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata()["version"] == "2"
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = load_compressed(path)
    assert torch.equal(again["a"].decompress().view(torch.int16), w.view(torch.int16))


def test_unknown_version_names_the_readable_ones(tmp_path):
    tensors, _ = _tensors()
    path = save_compressed(tmp_path / "m", tensors)
    with safe_open(str(path), framework="pt") as f:
        meta, arrays = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    meta["version"] = "3"
    save_file(arrays, str(path), metadata=meta)
    with pytest.raises(BadInputError, match="unsupported version '3'.*reads versions 1, 2"):
        load_compressed(path)
