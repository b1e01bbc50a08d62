"""MambaLRP at length: the chunked scan and per-mixer recomputation give the relevances of the reference path,
conserve, leave the model as it was, and keep memory linear in L without a (B, D, L, N) factor."""
import pytest
import torch
from transformers import MambaConfig, MambaForCausalLM

import core.lrp.methods as methods
import core.lrp.mixer as mixer
import kernels._scan_chunked as chunked  # where the block size of the chunked scans lives
import kernels.selective_scan as scan
from core.lrp import LRPRules, VisionMamba, VisionMambaConfig, explain, lrp_rules

pytestmark = pytest.mark.usefixtures("single_thread")


def random_lm(hidden=32, layers=3, state=8, vocab=64, seed=0):
    torch.manual_seed(seed)
    cfg = MambaConfig(vocab_size=vocab, hidden_size=hidden, state_size=state, num_hidden_layers=layers, expand=2)
    return MambaForCausalLM(cfg).eval()


def ids(length, vocab=64, seed=0):
    return torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few steps, so that short test sequences span many blocks (state carried between them)."""
    monkeypatch.setattr(chunked, "CHUNK_ELEMENTS", 2048)


@pytest.fixture
def recompute(monkeypatch):
    """Every explanation recomputes its mixers in the backward pass."""
    monkeypatch.setattr(methods, "RECOMPUTE_ABOVE_BYTES", 0)


def _reference_relevance(monkeypatch, model, x, **options):
    """Relevance through the reference scans (materialised, autograd over L steps) without recomputation."""
    with monkeypatch.context() as m:
        m.setattr(mixer, "selective_scan_lrp", scan.selective_scan_lrp_ref)
        m.setattr(mixer, "selective_scan", scan.selective_scan_ref)
        m.setattr(methods, "RECOMPUTE_ABOVE_BYTES", float("inf"))
        return explain(model, x, **options)


@pytest.mark.parametrize("gamma", [0.0, 0.25])
def test_chunked_recomputed_mambalrp_equals_the_reference_path_and_conserves(monkeypatch, small_blocks, recompute,
                                                                           gamma):
    model = random_lm()
    x = ids(45)  # 45 steps in blocks of 2048 // (64 * 8) = 4: the last block is partial
    assert chunked._chunk_length(1, 64, 8, 45, None) == 4
    fast = explain(model, x, gamma=gamma)
    slow = _reference_relevance(monkeypatch, model, x, gamma=gamma)
    assert fast.logit == slow.logit and fast.target == slow.target  # the forward values are bit-identical
    torch.testing.assert_close(fast.relevance, slow.relevance, rtol=1e-5, atol=1e-6 * float(slow.relevance.abs().max()))
    assert fast.total == pytest.approx(fast.logit, rel=1e-5, abs=1e-5)  # bias-free model: conservation


@pytest.mark.parametrize("method,options", [("gradient_x_input", {}), ("lrp_ln", {}), ("mambalrp", {"gate": False}),
                                            ("smoothgrad", {"n_samples": 3}), ("integrated_gradients", {"n_steps": 4})])
def test_methods_through_the_ordinary_chunked_scan_equal_the_reference_path(monkeypatch, small_blocks, recompute,
                                                                           method, options):
    model, x = random_lm(), ids(37)
    fast = explain(model, x, method=method, **options)
    slow = _reference_relevance(monkeypatch, model, x, method=method, **options)
    assert fast.logit == slow.logit
    torch.testing.assert_close(fast.relevance, slow.relevance, rtol=1e-4, atol=1e-5 * float(slow.relevance.abs().max()))


def test_vision_mamba_with_both_scan_directions_matches_the_reference_path(monkeypatch, small_blocks, recompute):
    torch.manual_seed(0)
    model = VisionMamba(VisionMambaConfig(image_size=12, patch_size=3, in_channels=1, hidden_size=16, num_layers=2,
                                          state_size=4, num_classes=3, use_conv_bias=False)).eval()
    with torch.no_grad():
        model.head.bias.zero_()  # a head bias would absorb relevance
    image = torch.rand(1, 1, 12, 12, generator=torch.Generator().manual_seed(1))
    fast = explain(model, pixel_values=image, target=1)
    slow = _reference_relevance(monkeypatch, model, None, pixel_values=image, target=1)
    torch.testing.assert_close(fast.relevance, slow.relevance, rtol=1e-5, atol=1e-6 * float(slow.relevance.abs().max()))
    assert fast.total == pytest.approx(fast.logit, rel=1e-5, abs=1e-5)


def test_recomputation_changes_nothing_but_memory(monkeypatch):
    model, x = random_lm(layers=2), ids(30)
    monkeypatch.setattr(methods, "RECOMPUTE_ABOVE_BYTES", float("inf"))
    kept = {m: explain(model, x, method=m).relevance for m in ("mambalrp", "gradient_x_input")}
    monkeypatch.setattr(methods, "RECOMPUTE_ABOVE_BYTES", 0)
    for m, relevance in kept.items():
        assert torch.equal(explain(model, x, method=m).relevance, relevance), m


def test_recomputation_is_chosen_by_the_size_of_the_kept_activations():
    from core.lrp.adapters import adapter_for

    with torch.device("meta"):  # mamba-130m's shape, no weights
        model = MambaForCausalLM(MambaConfig(vocab_size=50280, hidden_size=768, state_size=16, num_hidden_layers=24))
    adapter = adapter_for(model)
    assert not methods.recompute_mixers(adapter, torch.zeros(1, 64, 768))
    assert methods.recompute_mixers(adapter, torch.zeros(1, 512, 768))


def test_a_gpu_with_room_keeps_every_activation(monkeypatch):
    """On a CUDA device the threshold is its free memory, not the CPU's 64 MB: an 80 GB card with 70 GB free keeps
    mamba-130m's activations even at 8,192 tokens (7.9 GiB), and recomputes only when they would not fit."""
    from core.lrp.adapters import adapter_for

    with torch.device("meta"):
        model = MambaForCausalLM(MambaConfig(vocab_size=50280, hidden_size=768, state_size=16, num_hidden_layers=24))
    adapter = adapter_for(model)
    free = {"bytes": 70 * 2**30}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free["bytes"], 80 * 2**30))
    cuda = torch.device("cuda", 0)
    assert methods.activation_budget(cuda) == 35 * 2**30  # RECOMPUTE_FREE_SHARE of what is free
    embeds = torch.empty(1, 8192, 768, device="meta")
    kept = methods.kept_activation_bytes(adapter, embeds)
    assert 7.5 * 2**30 < kept < 8.5 * 2**30  # 24 layers x 1,536 channels x 8,192 tokens x 28 bytes
    assert kept < methods.activation_budget(cuda) and kept > methods.RECOMPUTE_ABOVE_BYTES
    free["bytes"] = 4 * 2**30  # a small card, or one mostly taken
    assert kept > methods.activation_budget(cuda)
    assert methods.activation_budget(torch.device("cpu")) == methods.RECOMPUTE_ABOVE_BYTES


def test_parameters_are_frozen_inside_and_restored_after():
    model = random_lm(layers=2)
    model.backbone.layers[0].mixer.D.requires_grad_(False)  # one parameter the user froze stays frozen
    before = {n: p.requires_grad for n, p in model.named_parameters()}
    with lrp_rules(model, LRPRules.mambalrp()):
        assert not any(p.requires_grad for p in model.parameters())
    assert {n: p.requires_grad for n, p in model.named_parameters()} == before
    with lrp_rules(model, LRPRules.mambalrp(), freeze=False):
        assert {n: p.requires_grad for n, p in model.named_parameters()} == before
    with pytest.raises(RuntimeError):
        with lrp_rules(model, LRPRules.mambalrp()):
            raise RuntimeError("boom")
    assert {n: p.requires_grad for n, p in model.named_parameters()} == before
    explain(model, ids(20))
    assert {n: p.requires_grad for n, p in model.named_parameters()} == before
    assert all(p.grad is None for p in model.parameters())


# ---- memory: linear in L, no (B, D, L, N) factor ----
def _torch_memory(fn) -> tuple[int, int]:
    """(peak live bytes, largest net allocation of one operator) of torch's CPU allocations while ``fn()`` ran."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    live = peak = 0
    for e in events:
        live += e.self_cpu_memory_usage
        peak = max(peak, live)
    return peak, max(e.self_cpu_memory_usage for e in events)


def _growth(model, short, state, channels):
    """Peak growth from ``short`` to ``2 * short`` tokens in units of one ``(1, channels, short, state)`` float32
    tensor, and the largest allocation in units of one ``(1, channels, L, state)`` tensor of its own length."""
    peaks, largest = [], 0.0
    for length in (short, 2 * short):
        peak, big = _torch_memory(lambda: explain(model, ids(length)))
        peaks.append(peak)
        largest = max(largest, big / (channels * length * state * 4))
    return (peaks[1] - peaks[0]) / (channels * short * state * 4), largest


@pytest.mark.slow
def test_memory_grows_without_the_state_size_factor(monkeypatch, recompute):
    model = random_lm(hidden=32, layers=2, state=64)  # N = 64: a (B, D, L, N) tensor is 64 (B, D, L) ones
    monkeypatch.setattr(chunked, "CHUNK_ELEMENTS", 1 << 15)  # blocks of 4 steps
    growth, largest = _growth(model, 48, state=64, channels=64)
    assert growth < 0.5 and largest < 0.25
    with monkeypatch.context() as m:  # the check sees the reference's materialised tensors
        m.setattr(mixer, "selective_scan_lrp", scan.selective_scan_lrp_ref)
        growth_ref, largest_ref = _growth(model, 48, state=64, channels=64)
    assert growth_ref > 2 and largest_ref >= 1


@pytest.mark.slow
def test_memory_at_mamba_130m_width_does_not_scale_with_length_times_state():
    """Two layers of mamba-130m's shape (d_model 768, d_inner 1536, N 16) at 1024 and 2048 tokens, default blocks
    and the default recomputation rule: the peak grows by less than one (B, D, L, N) tensor of the shorter input,
    no operator allocates a quarter of one, and relevance is conserved at 2048 tokens."""
    model = random_lm(hidden=768, layers=2, state=16, vocab=64)
    growth, largest = _growth(model, 1024, state=16, channels=1536)
    assert growth < 1.0 and largest < 0.25
    e = explain(model, ids(2048))
    assert e.total == pytest.approx(e.logit, rel=1e-4, abs=1e-4)


# ---- progress ----
class _Stop(Exception):
    pass


@pytest.mark.parametrize("recompute_all", [False, True])
def test_progress_is_reported_per_layer_and_can_stop_the_explanation(monkeypatch, recompute_all):
    monkeypatch.setattr(methods, "RECOMPUTE_ABOVE_BYTES", 0 if recompute_all else float("inf"))
    model, x = random_lm(layers=3), ids(20)
    seen = []
    e = explain(model, x, progress=lambda fraction, message: seen.append((fraction, message)))
    fractions = [f for f, _ in seen]
    assert len(seen) == 6 and fractions == sorted(fractions) and fractions[-1] == pytest.approx(1.0)
    assert seen[0][1] == "forward pass: layer 1 of 3" and seen[-1][1] == "backward pass: layer 1 of 3"
    assert torch.equal(e.relevance, explain(model, x).relevance)  # reporting changes nothing

    def stop_in_backward(fraction, message):
        if message.startswith("backward"):
            raise _Stop(message)

    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    with pytest.raises(_Stop, match="backward pass: layer 3 of 3"):
        explain(model, x, progress=stop_in_backward)
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags
    assert not any("forward" in m.__dict__ for m in model.modules())
    assert torch.equal(explain(model, x).relevance, e.relevance)


@pytest.mark.parametrize("method", ["mamba_attr", "attention_rollout"])
def test_hidden_attention_methods_report_progress_per_channel_chunk_and_can_stop(monkeypatch, method):
    import core.lrp.attention as attention

    real = attention.channel_mean_attention
    monkeypatch.setattr(attention, "channel_mean_attention",  # 64 channels, 8 per chunk: 8 reports per scan
                        lambda *a, **k: real(*a, max_elements=8 * 20 * 20 * 8, **k))
    model, x = random_lm(layers=3), ids(20)
    seen = []
    e = explain(model, x, method=method, progress=lambda fraction, message: seen.append((fraction, message)))
    fractions = [f for f, _ in seen]
    attn = [m for _, m in seen if m.startswith("hidden attention")]
    assert fractions == sorted(fractions) and fractions[-1] == pytest.approx(1.0)
    assert len(seen) == 3 * (2 if method == "mamba_attr" else 1) + 3 * 8 and len(attn) == 24
    assert attn[0] == "hidden attention: scan 1 of 3" and attn[-1] == "hidden attention: scan 3 of 3"
    assert max(f for f, m in seen if not m.startswith("hidden")) <= 0.2 + 1e-9  # the passes: a fifth of the bar
    assert torch.equal(e.relevance, explain(model, x, method=method).relevance)

    def stop_in_attention(fraction, message):
        if message == "hidden attention: scan 2 of 3":
            raise _Stop(message)

    with pytest.raises(_Stop):
        explain(model, x, method=method, progress=stop_in_attention)


def test_recomputation_releases_freed_memory_after_each_mixer_pass(monkeypatch, recompute):
    import core.lrp.context as context

    real, calls = context.release_freed_memory, []
    monkeypatch.setattr(context, "release_freed_memory", lambda *_: calls.append(1))
    explain(random_lm(layers=3), ids(20))
    assert len(calls) == 6  # after each mixer's forward, before each mixer's backward
    assert real(torch.zeros(1)) is None  # glibc's malloc_trim, or nothing elsewhere; also usable as a grad hook


def test_no_malloc_trim_off_the_cpu(monkeypatch):
    """On a GPU the activations are not in the host heap: a recomputed mixer there never calls malloc_trim (the
    meta device stands in for it)."""
    import core.lrp.context as context

    calls = []
    monkeypatch.setattr(context, "release_freed_memory", lambda *_: calls.append(1))
    monkeypatch.setattr(methods, "RECOMPUTE_ABOVE_BYTES", 0)
    model = random_lm(layers=3).to("meta")
    x = torch.nn.Parameter(torch.empty(1, 20, model.config.hidden_size, device="meta"))
    with context.lrp_rules(model, None, recompute=True):
        out = model(inputs_embeds=x, use_cache=False).logits[0, -1, 0]
        torch.autograd.grad(out, x)
    assert calls == []


def test_the_cpu_budget_can_trade_memory_for_time(monkeypatch):
    """``LAYERWISE_LRP_ACTIVATION_MB`` sets the CPU's budget: SmolLM2-135M's shape at 512 tokens (about 700 MiB of
    attention activations) is recomputed under the default 64 MB and kept under 1,024 MB; a value that is not a
    positive number leaves the default."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from core.lrp.adapters import adapter_for
    from core.settings import lrp_activation_mib

    with torch.device("meta"):  # SmolLM2-135M's shape, no weights
        model = LlamaForCausalLM(LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                                             num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3))
    adapter = adapter_for(model)
    embeds = torch.empty(1, 512, 576, device="meta")
    kept = methods.kept_activation_bytes(adapter, embeds)
    assert 600 * 2**20 < kept < 800 * 2**20
    monkeypatch.delenv("LAYERWISE_LRP_ACTIVATION_MB", raising=False)
    assert methods.recompute_mixers(adapter, embeds)
    monkeypatch.setenv("LAYERWISE_LRP_ACTIVATION_MB", "1024")
    assert methods.activation_budget(torch.device("cpu")) == 1024 * 2**20
    assert not methods.recompute_mixers(adapter, embeds)
    for bad in ("", "lots", "-5", "0"):
        monkeypatch.setenv("LAYERWISE_LRP_ACTIVATION_MB", bad)
        assert lrp_activation_mib() is None
        assert methods.activation_budget(torch.device("cpu")) == methods.RECOMPUTE_ABOVE_BYTES
