"""Models loaded one tensor at a time (core.neuzip.streaming): a Hugging Face folder read tensor by tensor is the model
transformers loads, bit for bit; compressed as it is read it computes the compressed model's logits, bit for bit; a
NeuZip checkpoint streamed back decodes bit for bit to the weights it was written from (and a tampered one yields
nothing); random weights are the same whatever form the model is built in."""
import numpy as np
import pytest
import torch

from core.errors import BadInputError
from core.neuzip import compress, compress_model, save_compressed
from core.neuzip import streaming
from core.neuzip.checkpoint import stream_compressed
from core.neuzip.modules import CompressedLinear, linear_layers, load_compressed_model
from core.neuzip.train_models import ModelSource

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny Llama (tied embedding and head, float32 safetensors) saved as a Hugging Face folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    path = tmp_path_factory.mktemp("tiny-hf")
    LlamaForCausalLM(config).save_pretrained(path)
    return path


def _reference(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()


IDS = torch.randint(0, 512, (1, 24), generator=torch.Generator().manual_seed(1))


def test_a_folder_read_tensor_by_tensor_is_the_model_transformers_loads(folder):
    got = ModelSource(str(folder)).build()
    want = _reference(folder)
    mine, theirs = dict(got.named_parameters()), dict(want.named_parameters())
    assert set(mine) == set(theirs)
    for name, p in theirs.items():
        assert torch.equal(mine[name].detach().view(torch.int16), p.detach().view(torch.int16)), name
    assert got.lm_head.weight is got.model.embed_tokens.weight  # tied as the configuration says


def test_compressed_as_it_is_read_it_computes_the_compressed_models_logits(folder):
    streamed = load_compressed_model(str(folder))
    assert sum(isinstance(m, CompressedLinear) for m in streamed.modules()) == 14  # 7 a layer, not the head
    whole = compress_model(_reference(folder))
    with torch.inference_mode():
        a, b = streamed(IDS).logits, whole(IDS).logits
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))


def test_a_streamed_checkpoint_decodes_bit_for_bit_to_the_original(folder, tmp_path):
    model = _reference(folder)
    weights = {name: m.weight.detach().clone() for name, m in linear_layers(model)}
    path = save_compressed(tmp_path / "w.safetensors", {n: compress(w) for n, w in weights.items()})
    names = []
    for name, ct in stream_compressed(path):  # one tensor at a time, in name order
        names.append(name)
        assert torch.equal(ct.decompress().view(torch.int16), weights[name].view(torch.int16)), name
    assert names == sorted(weights)
    from_checkpoint = load_compressed_model(str(folder), checkpoint=path)  # the linear weights from the file
    with torch.inference_mode():
        a, b = from_checkpoint(IDS).logits, compress_model(model)(IDS).logits
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # one byte of the last array
    (tmp_path / "bad.safetensors").write_bytes(bytes(data))
    seen = []
    with pytest.raises(BadInputError, match="checksum"):
        for name, _ in stream_compressed(tmp_path / "bad.safetensors"):
            seen.append(name)
    assert seen == []  # nothing comes out of a tampered file


def test_a_checkpoint_of_another_model_is_refused(folder, tmp_path):
    path = save_compressed(tmp_path / "w.safetensors", {"model.layers.0.mlp.up_proj": compress(torch.randn(96, 64))})
    with pytest.raises(BadInputError, match="does not hold the linear weights"):
        load_compressed_model(str(folder), checkpoint=path)


def test_reading_converts_as_torch_does_through_a_small_buffer(tmp_path, monkeypatch):
    from safetensors.torch import save_file

    monkeypatch.setattr(streaming, "READ_BYTES", 1000)  # many slices, the last one short
    x = torch.randn(37, 53) * 1e-3
    save_file({"w": x, "b": x.to(torch.bfloat16)}, str(tmp_path / "t.safetensors"))
    f = streaming.SafetensorsFile(tmp_path / "t.safetensors")
    out = f.read_into("w", torch.empty(37, 53, dtype=torch.bfloat16))
    assert torch.equal(out.view(torch.int16), x.to(torch.bfloat16).view(torch.int16))
    assert torch.equal(f.read_into("b", torch.empty(37, 53, dtype=torch.bfloat16)), x.to(torch.bfloat16))
    assert np.array_equal(f.array("w", np.float32), x.numpy())


def test_random_weights_are_the_same_whatever_form_the_model_takes():
    """tiny-llama's random weights drawn into a bf16 model and into a model compressed as it is built: the same bits
    (the digest decodes the compressed layers), and not a constant (they were drawn)."""
    from core.neuzip.lomo import ZipState, weights_digest

    source = ModelSource("tiny-llama", seed=3)
    plain = source.build()
    state = ZipState(0.1)
    zipped = source.build(linear=state.layer, linears=linear_layers)
    state.ready(zipped)
    assert weights_digest(plain) == weights_digest(zipped)
    assert weights_digest(plain) != weights_digest(ModelSource("tiny-llama", seed=4).build())
    w = plain.model.layers[0].mlp.up_proj.weight.float()
    assert 0.015 < float(w.std()) < 0.025 and float(plain.model.norm.weight.float().min()) == 1.0


def test_a_checkpoint_is_written_back_as_plain_bf16_one_tensor_at_a_time(folder, tmp_path):
    """`neuzip decompress FILE --out plain.safetensors`: the file safetensors reads, every weight the original's bits."""
    from safetensors.torch import load_file

    from core.neuzip import decompress_result

    weights = {f"{name}.weight": m.weight.detach().clone() for name, m in linear_layers(_reference(folder))}
    path = save_compressed(tmp_path / "w.safetensors", {n.removesuffix(".weight"): compress(w)
                                                         for n, w in weights.items()})
    res = decompress_result(path, out=tmp_path / "plain.safetensors")
    assert res.data["tensors"] == len(weights) and res.data["mantissa_bits"] == [7]
    plain = load_file(str(tmp_path / "plain.safetensors"))
    assert set(plain) == set(weights)
    assert all(torch.equal(plain[n].view(torch.int16), w.view(torch.int16)) for n, w in weights.items())
