"""``python -m core neuzip ...``: bad input exits with code 2 and a message (before any model is loaded),
checkpoints round-trip, outputs are written whole or not at all."""
import json

import pytest
import torch
from safetensors.torch import load_file

from core.cli import main
from core.neuzip import compress, save_compressed


@pytest.mark.parametrize("argv,message", [
    (["tradeoff", "--k", "7", "5"], "mantissa_bits must be one of"),
    (["table", "--k", "2"], "mantissa_bits must be one of"),
    (["throughput", "--k", "3", "--block-size", "100"], "power of two"),
    (["tradeoff", "--block-size", "48"], "power of two"),
    (["table", "--k", "7", "--block-size", "64"], "B applies to k < 7 only"),
    (["compress", "--k", "4", "--out", "x.safetensors"], "mantissa_bits must be one of"),
    (["histograms", "--model", "no-such-model"], "not a registered model"),
    (["table", "--model", "/no/such/folder"], "not a registered model"),
    (["tradeoff", "--words", "0"], "evaluate on 100 to 10,000 words, not 0"),
    (["tradeoff", "--window", "4"], "window = 4 is out of range"),
    (["throughput", "--repeats", "0"], "repeats = 0 is out of range"),
    (["tradeoff", "--out", "result.png"], ".json, .csv, .html"),
    (["compress", "--out", "weights.json"], ".safetensors"),
    (["decompress", "/no/such/file.safetensors"], "does not exist"),
])
def test_bad_input_exits_2_with_a_message(argv, message, capsys):
    assert main(["neuzip", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_json_errors_are_machine_readable(capsys):
    assert main(["neuzip", "table", "--k", "5", "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert "mantissa_bits" in doc["error"] and doc["fix"]


@pytest.fixture
def checkpoint(tmp_path):
    w = (torch.randn(48, 40, generator=torch.Generator().manual_seed(0)) * 0.05).to(torch.bfloat16)
    path = save_compressed(tmp_path / "w.neuzip.safetensors", {"layer": compress(w)})
    return path, w


def test_decompress_round_trip_writes_plain_weights(checkpoint, tmp_path, capsys):
    path, w = checkpoint
    out = tmp_path / "plain.safetensors"
    assert main(["neuzip", "decompress", str(path), "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tensors"] == 1 and doc["weights"] == w.numel() and doc["mantissa_bits"] == [7]
    assert torch.equal(load_file(out)["layer.weight"].view(torch.int16), w.view(torch.int16))


def test_tampered_or_truncated_checkpoint_is_refused_and_nothing_is_written(checkpoint, tmp_path, capsys):
    path, _ = checkpoint
    data = path.read_bytes()
    out = tmp_path / "plain.safetensors"
    bad = tmp_path / "truncated.safetensors"
    bad.write_bytes(data[: len(data) - 50])
    assert main(["neuzip", "decompress", str(bad), "--out", str(out)]) == 2
    tampered = bytearray(data)
    tampered[-3] ^= 0xFF
    bad.write_bytes(bytes(tampered))
    assert main(["neuzip", "decompress", str(bad), "--out", str(out)]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["truncated.safetensors",
                                                                                "w.neuzip.safetensors"]


@pytest.mark.slow
def test_model_commands_on_a_local_folder(tiny_folder, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LAYERWISE_HOME", str(tmp_path / "home"))  # a private results cache
    ckpt = tmp_path / "tiny.neuzip.safetensors"
    assert main(["neuzip", "compress", "--model", str(tiny_folder), "--out", str(ckpt), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tensors"] == 7 and 9 < doc["bits_per_weight"] < 13  # q k v o gate up down
    assert main(["neuzip", "decompress", str(ckpt), "--model", str(tiny_folder), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["bit_exact"] is True and doc["max_abs_error"] == 0.0

    csv_path, html_path = tmp_path / "table.csv", tmp_path / "hist.html"
    assert main(["neuzip", "table", "--model", str(tiny_folder), "--k", "3", "--block-size", "32",
                 "--out", str(csv_path)]) == 0
    lines = csv_path.read_text().splitlines()
    assert lines[0].startswith("layer,weights,bits_per_weight,entropy_bound") and lines[1].startswith("total,")
    assert len(lines) == 2 + 7
    assert main(["neuzip", "histograms", "--model", str(tiny_folder), "--out", str(html_path)]) == 0
    html = html_path.read_text()
    assert "Bit fields of" in html and "biased exponent" in html and "plotly" in html.lower()
    # no tokenizer: the trade-off cannot measure perplexity, and says so
    monkeypatch.undo()  # the evaluation text lives in the real user cache
    assert main(["neuzip", "tradeoff", "--model", str(tiny_folder), "--words", "100", "--no-baselines"]) == 2
    assert "no tokenizer" in capsys.readouterr().err
