"""No host sync per layer on the three GPU hot paths: the NeuZip-compressed forward, a batch-1 generation step and
MambaLRP ``explain``.

The ``meta`` device stands in for the GPU: its tensors have shapes but no data, so any op that would read a value
back to the host (``.item()``, ``bool(t)``, ``.tolist()``, ``.cpu()``, ``nonzero``, ...) cannot run there.
:class:`tests.syncs.HostSyncs` records each such op and answers it with a placeholder, so a whole forward runs and
every sync is counted. Each path runs twice, as dispatched to the PyTorch twins (what a GPU runs with
``LAYERWISE_KERNELS=ref``) and down the Triton path (its launches replaced by stubs that count them: the host code
around the kernels is what is under test), on models of 1 and 2 layers: the syncs must not grow with the layers.
"""
import pytest
import torch
import transformers
from torch import nn

from core.neuzip import apply_compressed
from core.neuzip.codec import compress
from tests.syncs import HostSyncs

LLAMA = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2)
MAMBA = dict(vocab_size=64, hidden_size=16, state_size=4, expand=2, conv_kernel=4)


def test_the_counter_sees_each_kind_of_sync_and_answers_on_meta():
    x = torch.empty(4, 3, device="meta")
    with HostSyncs(answer=True) as syncs:
        x.sum().item()
        bool(x.sum() > 0)
        x[0, 0].tolist()
        x.cpu()
        torch.nonzero(x)
        x[x > 0]
        torch.equal(x, x)
        torch.repeat_interleave(torch.arange(3, device="meta"), torch.ones(3, dtype=torch.long, device="meta"))
    ops = [e.op for e in syncs.events]
    assert ops == ["item", "item", "to_host", "to_host", "nonzero", "mask_index", "equal", "repeat_interleave"]
    assert all(e.where.startswith("core/test_host_syncs.py:") for e in syncs.events)
    with HostSyncs(answer=True) as syncs:  # none of these waits: sizes from the graph, or an explicit length
        y = x * 2 + x.sum(0)
        torch.repeat_interleave(torch.arange(3, device="meta"), torch.ones(3, dtype=torch.long, device="meta"),
                                output_size=3)
        y.argmax(), y.shape[0], x.to(torch.bfloat16)
        torch.zeros(3).sum().item()  # a CPU tensor: no device to wait for
    assert syncs.count == 0, syncs.report()


def _llama(layers: int) -> nn.Module:
    """A compressed Llama on the meta device, in chunks of 64 weights (the twin decodes round by round, and ops on
    meta tensors under a dispatch mode take about a millisecond each: the app's 2**17 would take hours here)."""
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(num_hidden_layers=layers, **LLAMA))
    model = model.to(torch.bfloat16).eval()
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear) and "lm_head" not in name]
    return apply_compressed(model, {name: compress(m.weight.detach(), chunk_size=64) for name, m in linears}).to("meta")


def _syncs(fn) -> HostSyncs:
    with HostSyncs(answer=True) as syncs:
        fn()
    return syncs


@pytest.mark.slow
def test_the_compressed_forward_makes_no_host_sync_per_layer(path):
    """A 12-token forward of a compressed Llama: the decodes flag a corrupt stream on the device; the model reads the
    flag once, after the forward (the 2-layer model: 14 compressed linears, none of them waits)."""
    mode, launched = path
    counts = {}
    for layers in (1, 2):
        model = _llama(layers)
        ids = torch.zeros(1, 12, dtype=torch.long, device="meta")
        with torch.inference_mode():
            syncs = _syncs(lambda: model(ids))
        counts[layers] = syncs
    assert counts[2].count == counts[1].count <= 1, (counts[1].report(), counts[2].report())
    assert all("raise_if_corrupt" in e.where for e in counts[2].events)  # the one check per forward
    if mode == "triton":  # every linear decoded and merged by one kernel, straight into the shared buffer
        assert launched["rans"] == 7 * (1 + 2) and launched["merge"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("fused", [False, True])
def test_a_batch1_generation_step_makes_no_host_sync_per_layer(path, fused, monkeypatch):
    """One generated token (one row through every layer, with the KV cache of a 5-token prompt), decoding each
    weight into the shared buffer or, opted in on the Triton path, through the fused decode + GEMV."""
    mode, launched = path
    if fused and mode != "triton":
        pytest.skip("the fused GEMV is a Triton kernel only")
    counts = {}
    for layers in (1, 2):
        model = _llama(layers)
        with torch.inference_mode():
            with HostSyncs(answer=True):  # the prompt (its one check answered)
                cache = model(torch.zeros(1, 5, dtype=torch.long, device="meta"), use_cache=True).past_key_values
            launched.clear()
            token = torch.zeros(1, 1, dtype=torch.long, device="meta")
            counts[layers] = _syncs(lambda: model(token, past_key_values=cache, use_cache=True))
    assert counts[2].count == counts[1].count <= 1, (counts[1].report(), counts[2].report())
    if mode == "triton":
        assert launched["rans"] == 7 * 2  # the fused GEMV (LAYERWISE_KERNELS=triton chooses it) or the decode


@pytest.mark.slow
def test_explain_makes_no_host_sync_per_layer(path):
    """MambaLRP ``explain`` of 9 tokens: a few syncs per explanation (the token-id check, the target's argmax, the
    logit, the relevance handed back), none per mixer, with the scan kernel launched twice per mixer (forward and
    relevance backward) on the Triton path."""
    from core.lrp import explain

    mode, launched = path
    counts = {}
    for layers in (1, 2):
        torch.manual_seed(0)
        model = transformers.MambaForCausalLM(transformers.MambaConfig(num_hidden_layers=layers, **MAMBA))
        model = model.eval().to("meta")
        launched.clear()
        counts[layers] = _syncs(lambda: explain(model, input_ids=torch.zeros(1, 9, dtype=torch.long, device="meta")))
        if mode == "triton":
            assert launched["scan"] == 2 * layers
    assert counts[2].count == counts[1].count <= 5, (counts[1].report(), counts[2].report())
    assert not any("mixer" in e.where or "rules" in e.where or "context" in e.where for e in counts[2].events)
