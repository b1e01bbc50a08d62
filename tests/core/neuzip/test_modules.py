"""Compressed modules: identical outputs for k = 7, the shared buffer, the memory report, bad input."""
import pytest
import torch
from torch import nn

from core.errors import BadInputError
from core.neuzip import (
    CompressedLinear, apply_compressed, compress_model, compressed_tensors, decompress_model, load_compressed,
    memory_report, save_compressed, set_decode_ahead,
)
from core.neuzip.codec import compress
from kernels.dispatch import triton_available


class TinyLM(nn.Module):
    def __init__(self, vocab=50, dim=32, hidden=48):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"up": nn.Linear(dim, hidden), "down": nn.Linear(hidden, dim, bias=False)})
            for _ in range(2))
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        h = self.embed(ids)
        for b in self.blocks:
            h = h + b["down"](torch.nn.functional.gelu(b["up"](h)))
        return self.lm_head(h)


def tiny(dtype=torch.bfloat16):
    torch.manual_seed(0)
    return TinyLM().to(dtype).eval()


IDS = torch.tensor([[1, 5, 9, 13, 2, 40]])


def test_lossless_model_gives_identical_outputs():
    model = tiny()
    with torch.no_grad():
        before = model(IDS)
    compress_model(model)
    swapped = [n for n, m in model.named_modules() if isinstance(m, CompressedLinear)]
    assert swapped == ["blocks.0.up", "blocks.0.down", "blocks.1.up", "blocks.1.down"]
    assert isinstance(model.lm_head, nn.Linear) and not isinstance(model.lm_head, CompressedLinear)
    with torch.no_grad():
        after = model(IDS)
        again = model(IDS)  # the reused buffer gives the same answer twice
    assert torch.equal(before.view(torch.int16), after.view(torch.int16))
    assert torch.equal(after.view(torch.int16), again.view(torch.int16))
    # no plain weight left behind in the swapped layers
    assert all("weight" not in n for n, _ in model.blocks.named_parameters())


def test_decompress_model_computes_the_same():
    model = compress_model(tiny(), mantissa_bits=1, block_size=32)
    with torch.no_grad():
        want = model(IDS)
    decompress_model(model)
    assert not any(isinstance(m, CompressedLinear) for m in model.modules())
    assert isinstance(model.blocks[0]["up"], nn.Linear) and model.blocks[0]["up"].bias is not None
    with torch.no_grad():
        got = model(IDS)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_layers_share_one_buffer_sized_for_the_largest_weight():
    model = compress_model(tiny())
    with torch.no_grad():
        model(IDS)
    layers = [m for m in model.modules() if isinstance(m, CompressedLinear)]
    assert len({id(m._buffer) for m in layers}) == 1
    assert layers[0]._buffer.nbytes == 2 * 32 * 48


def test_memory_report():
    plain = tiny()
    before = memory_report(plain)
    assert before["compressed_weight_bytes"] == 0 and before["peak_transient_bytes"] == 0
    model = compress_model(tiny())
    rep = memory_report(model)
    comp = compressed_tensors(model)
    assert set(comp) == {"blocks.0.up", "blocks.0.down", "blocks.1.up", "blocks.1.down"}
    assert rep["compressed_weight_bytes"] == sum(c.nbytes for c in comp.values())
    linear_bytes = 4 * 32 * 48 * 2
    assert rep["other_bytes"] == before["other_bytes"] - linear_bytes
    assert rep["resident_bytes"] < before["resident_bytes"]
    largest = 32 * 48
    assert rep["buffer_bytes"] == 2 * largest
    assert rep["decode_workspace_bytes"] == 8 * 2**15 + 5 * largest  # the decode table + one chunk's scratch
    assert rep["peak_bytes"] == rep["resident_bytes"] + rep["buffer_bytes"] + rep["decode_workspace_bytes"]


def test_lossy_model_close_and_float32_warns():
    model = tiny(torch.float32)
    with torch.no_grad():
        before = model(IDS)
    with pytest.warns(UserWarning, match="float32 linear weights to bfloat16 \\(lossy"):
        compress_model(model, mantissa_bits=3, block_size=32)
    with torch.no_grad():
        after = model(IDS)
    assert after.dtype == torch.float32
    assert (after - before).abs().max() < 0.2 * before.abs().max()
    assert not torch.equal(after, before)


def test_checkpoint_into_a_fresh_model(tmp_path):
    model = compress_model(tiny(), mantissa_bits=3, block_size=64)
    with torch.no_grad():
        want = model(IDS)
    path = save_compressed(tmp_path / "tiny.nz", compressed_tensors(model))
    fresh = apply_compressed(tiny(), load_compressed(path))
    with torch.no_grad():
        got = fresh(IDS)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    with pytest.raises(BadInputError):
        apply_compressed(tiny(), {"embed": compressed_tensors(model)["blocks.0.up"]})
    with pytest.raises(BadInputError):
        apply_compressed(tiny(), {"blocks.0.down": compressed_tensors(model)["blocks.0.up"]})


def _with_nan():
    model = tiny()
    with torch.no_grad():
        model.blocks[1].down.weight[0, 0] = float("nan")
    return model


@pytest.mark.parametrize("model,kwargs", [
    (nn.Sequential(nn.Embedding(4, 4), nn.LayerNorm(4)), {}),
    (tiny(), dict(skip=("blocks", "lm_head"))),
    (tiny(), dict(mantissa_bits=5)),
    (tiny(), dict(mantissa_bits=3, block_size=48)),
    (_with_nan(), dict(mantissa_bits=0)),
])
def test_bad_input(model, kwargs):
    with pytest.raises(BadInputError):
        compress_model(model, **kwargs)
    assert not any(isinstance(m, CompressedLinear) for m in model.modules())  # nothing half-done


def test_progress_and_cancel():
    seen = []
    compress_model(tiny(), progress=lambda fraction, message: seen.append((fraction, message)))
    assert seen == [(0.0, "compressing layer 0/4: blocks.0.up"), (0.25, "compressing layer 1/4: blocks.0.down"),
                    (0.5, "compressing layer 2/4: blocks.1.up"), (0.75, "compressing layer 3/4: blocks.1.down")]

    def cancel(fraction, message):
        if fraction >= 0.5:
            raise KeyboardInterrupt

    model = tiny()
    with pytest.raises(KeyboardInterrupt):
        compress_model(model, progress=cancel)
    assert not any(isinstance(m, CompressedLinear) for m in model.modules())


@pytest.mark.slow
def test_transformers_llama_identical_logits():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    with torch.no_grad():
        before = model(ids).logits
    compress_model(model)
    assert sum(isinstance(m, CompressedLinear) for m in model.modules()) == 2 * 7
    with torch.no_grad():
        after = model(ids).logits
    assert torch.equal(before.view(torch.int16), after.view(torch.int16))


@pytest.mark.parametrize("ahead", [1, 2, 5])
def test_decode_ahead_gives_identical_outputs(ahead):
    model = tiny()
    with torch.no_grad():
        want = model(IDS)
    compress_model(model, decode_ahead=ahead)
    buffer = model._neuzip_buffer
    assert buffer.ahead == ahead and len(buffer.layers) == 4
    with torch.no_grad():
        for _ in range(3):  # the decodes in flight wrap around into the next forward
            got = model(IDS)
            assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    assert len(buffer._pending) == min(ahead, 3)  # the next forward's first layers are ready
    rep = memory_report(model)
    assert rep["decode_ahead"] == ahead and rep["buffer_bytes"] == 2 * 32 * 48 * (ahead + 1)
    assert buffer.nbytes <= rep["buffer_bytes"]


def test_decode_ahead_survives_an_unexpected_call_order():
    model = compress_model(tiny(), decode_ahead=1)
    layers = [m for m in model.modules() if isinstance(m, CompressedLinear)]
    x = torch.randn(3, 32).to(torch.bfloat16)
    plain = {id(m): m.weight_compressed.decompress() for m in layers}
    for layer in [layers[2], layers[0], layers[0], layers[3], layers[1], layers[2]]:
        xin = x if layer.in_features == 32 else torch.randn(3, 48).to(torch.bfloat16)
        with torch.no_grad():
            got = layer(xin)
            want = torch.nn.functional.linear(xin, plain[id(layer)], layer.bias)
        assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_set_decode_ahead_checks_its_input():
    model = compress_model(tiny())
    for bad in (-1, 9, 1.5, True):
        with pytest.raises(BadInputError):
            set_decode_ahead(model, bad)
    with pytest.raises(BadInputError):
        set_decode_ahead(tiny(), 1)
    with pytest.raises(BadInputError):
        compress_model(tiny(), decode_ahead=-2)
    set_decode_ahead(model, 2)
    with torch.no_grad():
        model(IDS)
    decompress_model(model)
    assert not hasattr(model, "_neuzip_buffer")


def _arrays_of(model):
    return {f"{n}.{a}": t for n, m in model.named_modules() if isinstance(m, CompressedLinear)
            for a, t in m.arrays().items() if t is not None}


@pytest.mark.parametrize("k, block", [(7, None), (3, 64)])
def test_every_compressed_array_follows_the_module_to_its_device(k, block):
    """The stored arrays are buffers of each layer: ``model.to(device)`` moves every one of them (so on a GPU a forward
    reads nothing from the host), they stay out of ``state_dict()``, and on the CPU they share the stored memory."""
    model = compress_model(tiny(), mantissa_bits=k, block_size=block)
    arrays = _arrays_of(model)
    names = {a.rsplit(".", 1)[1] for a in arrays}
    assert names == {"states", "offsets", "words", "escapes", "escape_offsets", "slot_pair", "pair_info", "fields"} \
        | ({"scales"} if block else set())
    layer = model.blocks[0]["up"]
    assert layer.arrays().fields.data_ptr() == layer.weight_compressed.fields.data_ptr()  # no second host copy
    assert layer.arrays().words.data_ptr() == layer.weight_compressed.exponents.words.ctypes.data
    assert not any("nz_" in key for key in model.state_dict())
    model.to("meta")
    assert {t.device.type for t in _arrays_of(model).values()} == {"meta"}
    assert {m.device.type for m in model.modules() if isinstance(m, CompressedLinear)} == {"meta"}


@pytest.mark.parametrize("k, block", [(7, None), (3, 64), (0, 32)])
def test_the_device_path_decodes_each_layer_from_its_own_arrays_bit_for_bit(k, block, monkeypatch):
    """What a GPU forward runs (kernel twins here): the decode reads only the layer's resident arrays, building its
    decode table from the per-pair arrays, and gives the CPU decoder's bits."""
    from core.neuzip import pairs

    model = compress_model(tiny(), mantissa_bits=k, block_size=block)
    want = {n: m.weight_compressed.decompress() for n, m in model.named_modules() if isinstance(m, CompressedLinear)}
    for name in ("stream_arrays", "kernel_args", "segment_index"):  # nothing may be rebuilt from the host stream
        monkeypatch.setattr(pairs, name, lambda *a, **kw: pytest.fail("read the host stream"))
    for n, m in model.named_modules():
        if isinstance(m, CompressedLinear):
            got = m.weight_compressed.decode_arrays(m.arrays()).view(m.weight_compressed.shape)
            assert torch.equal(got.view(torch.int16), want[n].view(torch.int16)), n


def test_a_layer_is_laid_out_for_the_device_it_lands_on(monkeypatch):
    """Moving a compressed model to a CUDA device (the meta device stands in, with an H100's 132 multiprocessors)
    re-indexes each layer's stream in the segments decode_layout picks for it; on the CPU a layer laid out in any
    segments decodes the same bits from its own arrays, and laid out in chunks again shares the stored memory."""
    import core.neuzip.codec as codec
    from kernels.neuzip_rans import decode_layout

    model = compress_model(tiny())
    layer = model.blocks[0]["up"]
    ct = layer.weight_compressed
    want = ct.decompress()
    for segment in (32, 512):
        layer.lay_out(segment)
        assert layer.segment == segment and layer.nz_states.shape == (-(-ct.numel // segment), 8)
        got = ct.decode_arrays(layer.arrays()).view(ct.shape)
        assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    layer.lay_out(None)
    assert layer.segment is None and layer.nz_states.data_ptr() == ct.exponents.states.ctypes.data
    monkeypatch.setattr(codec, "multiprocessors", lambda device: 132 if torch.device(device).type == "meta" else None)
    model.to("meta")
    for m in model.modules():
        if isinstance(m, CompressedLinear):
            n = m.weight_compressed.numel
            assert m.segment == decode_layout(n, m.weight_compressed.exponents.chunk_size, 132) < n
            assert m.nz_states.device.type == "meta" and m.nz_states.shape == (-(-n // m.segment), 8)


@pytest.mark.skipif(not triton_available(), reason="triton not installed")
@pytest.mark.parametrize("mantissa_bits", [7, 3])
def test_a_lossless_weight_is_decoded_and_merged_by_one_kernel_into_the_buffer(monkeypatch, mantissa_bits):
    """On the kernel path (dispatch opened to CPU tensors: the interpreter stands in for CUDA) a lossless weight is
    decoded and merged by the fused kernel straight into the buffer it is given, bit for bit; a lossy one takes
    the exponent decode, then the bit merge, and is copied into the buffer."""
    import kernels.dispatch as dispatch
    import kernels.neuzip_rans as rans

    asked, fused = [], []  # the kernels' choice, opened to CPU tensors (the interpreter stands in for CUDA)
    monkeypatch.setattr(dispatch, "device_eligible", lambda tensors: True)
    monkeypatch.setattr(dispatch, "kernel_trusted", lambda name, device, dtype: asked.append(name) or True)
    real = rans.launch
    monkeypatch.setattr(rans, "launch", lambda *a, **k: fused.append(len(a) > 5) or real(*a, **k))
    torch.manual_seed(0)
    w = torch.randn(48, 32).to(torch.bfloat16)
    ct = compress(w, mantissa_bits, chunk_size=512)
    arrays = ct.device_arrays(None, 64)
    out = torch.full((w.numel(),), float("nan"), dtype=torch.bfloat16)
    assert ct.decode_arrays(arrays, out=out) is out
    assert torch.equal(out.view(torch.int16), ct.decompress().reshape(-1).view(torch.int16))
    if mantissa_bits == 7:
        assert asked == ["pair_rans_decode_bf16"] and fused == [True]  # one launch, no exponent tensor
    else:  # lossy: the exponent decode, then the bit merge (both Triton here), then a copy into the buffer
        assert "pair_rans_decode_bf16" not in asked and fused == [False] and "merge_bf16" in asked


def test_the_decode_tables_are_built_once_not_per_decode(monkeypatch):
    """The two decode tables are buffers of the layer: a decode on the kernel path reads them and builds nothing."""
    from core.neuzip.pairs.table import PairTable

    model = compress_model(tiny())
    layer = model.blocks[1]["down"]
    assert layer.nz_slot_pair.dtype == torch.uint8 and layer.nz_slot_pair.numel() == 2**15
    assert layer.nz_pair_info.dtype == torch.int64 and layer.nz_pair_info.numel() <= 256
    monkeypatch.setattr(PairTable, "cpu_tables", lambda self: pytest.fail("built a decode table in a decode"))
    got = layer.weight_compressed.decode_arrays(layer.arrays())
    assert got.numel() == layer.in_features * layer.out_features


def test_a_flag_set_by_a_device_decode_is_raised_once_after_the_forward():
    """The decodes on a device flag a corrupt stream without waiting; the model reads the flag after its forward
    (one host sync), raises, and clears it."""
    model = compress_model(tiny())
    flag = model._neuzip_buffer.errors(torch.device("cpu"))
    with torch.no_grad():
        model(IDS)  # a clean flag: nothing raised
        flag.fill_(1)
        with pytest.raises(ValueError, match="corrupt"):
            model(IDS)
        model(IDS)  # cleared by the check
    decompress_model(model)
    assert not hasattr(model, "_neuzip_watch") and not model._forward_hooks


def test_memory_report_counts_the_resident_arrays_once():
    model = compress_model(tiny())
    report = memory_report(model)
    plain = sum(t.numel() * t.element_size() for n, t in model.named_parameters())
    assert report["other_bytes"] == plain  # the nz_ buffers are the compressed weights, not "other"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has CUDA")
def test_device_memory_needs_a_cuda_device_and_says_so_before_loading(monkeypatch):
    from core.neuzip import device_memory, device_memory_result
    from core.zoo import loading

    with pytest.raises(BadInputError, match="CUDA device"):
        device_memory(tiny(), "cuda")
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("loaded a model first"))
    with pytest.raises(BadInputError, match="CUDA device"):
        device_memory_result("mathneuro-tiny")
    with pytest.raises(BadInputError, match="not a device"):
        device_memory_result("mathneuro-tiny", device="bogus")


def test_device_memory_is_a_registered_analysis_the_cli_prints(monkeypatch, capsys):
    """``neuzip device-memory`` on a stand-in GPU: the request is checked, the model loaded, the measurement's MiB
    shown as the registry's status and table (core.neuzip.views.ANALYSES["device-memory"])."""
    from core.cli import main
    from core.neuzip import memory

    r = {"device": "Stand-in GPU", "tokens": 64, "mantissa_bits": 3, "block_size": 128,
         "bf16": {"loaded": 300 * 2**20, "forward_peak": 50 * 2**20},
         "compressed": {"loaded": 200 * 2**20, "forward_peak": 60 * 2**20}, "linear_bf16_bytes": 210 * 2**20,
         "linear_resident_bytes": 140 * 2**20, "linear_ratio": 2 / 3, "loaded_ratio": 2 / 3,
         "max_abs_logit_difference": 0.0125}
    asked = []
    monkeypatch.setattr(memory, "require_cuda", lambda device: device)
    monkeypatch.setattr(memory, "device_memory", lambda model, *args: asked.append(args) or dict(r))
    assert main(["neuzip", "device-memory", "--model", "mathneuro-tiny", "--k", "3", "--block-size", "128",
                 "--tokens", "64"]) == 0
    out = capsys.readouterr().out
    assert asked == [("cuda", 3, 128, 64)]
    assert "On Stand-in GPU: mathneuro-tiny holds 200.0 MiB NeuZip-compressed (k = 3) against 300.0 MiB" in out
    assert "(0.667x)" in out and "peaks 60.0 MiB" in out and "at most 0.0125" in out
    assert "compressed" in out and "300.0" in out


@pytest.mark.slow
def test_batch1_generation_multiplies_straight_from_the_compressed_arrays(monkeypatch):
    """Where the fused decode + matrix-vector kernel is chosen (on a GPU, opted in; here the CPU stands in, under
    the interpreter), each one-row call of a lossless compressed layer takes it: the prompt's forward decodes as
    before, every generated token's 14 layers use the kernel, and the greedy tokens and logits are the bf16
    model's (within the rounding of a different summation order)."""
    transformers = pytest.importorskip("transformers")
    import kernels.dispatch as dispatch
    import kernels.neuzip_gemv as gemv

    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    dense = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    torch.manual_seed(0)
    packed = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    linears = [(name, m) for name, m in packed.named_modules() if isinstance(m, nn.Linear) and "lm_head" not in name]
    apply_compressed(packed, {name: compress(m.weight.detach(), 7, chunk_size=256)  # 256: the interpreter's speed
                              for name, m in linears})
    calls = []
    fused = gemv.pair_rans_gemv_triton
    monkeypatch.setattr(gemv, "pair_rans_gemv_triton", lambda *a, **kw: calls.append(1) or fused(*a, **kw))
    monkeypatch.setattr(dispatch, "_verdicts", {})
    monkeypatch.setattr(dispatch, "device_eligible", lambda tensors: bool(tensors))
    one_row = torch.randn(1, 1, 32).to(torch.bfloat16)
    with torch.no_grad():
        packed.model.layers[0].self_attn.q_proj(one_row)
    assert calls == []  # auto mode: not chosen until it is shown to win on a GPU
    monkeypatch.setenv("LAYERWISE_KERNELS", "triton")  # opted in

    def generate(model, steps=3):
        with torch.no_grad():
            out = model(torch.tensor([[3, 1, 4, 1, 5]]), use_cache=True)
            logits, tokens = [out.logits[0, -1]], []
            for _ in range(steps):
                tokens.append(int(out.logits[0, -1].argmax()))
                out = model(torch.tensor([[tokens[-1]]]), past_key_values=out.past_key_values, use_cache=True)
                logits.append(out.logits[0, -1])
        return tokens, torch.stack(logits).float()

    want_tokens, want = generate(dense)
    got_tokens, got = generate(packed)
    assert len(calls) == 3 * 2 * 7  # three generated tokens x 2 blocks x 7 linear layers; none for the prompt
    assert got_tokens == want_tokens
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)  # the prompt: decoded weights, bit for bit
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * float(want.abs().max()))
