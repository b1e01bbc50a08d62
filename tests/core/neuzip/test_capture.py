"""The capturable compressed forward and batch-1 generation (core.neuzip.capture): on the CPU (no graph: the same step
functions run eagerly) they compute the bf16 model's logits and greedy tokens; on the meta device (the stand-in for a
GPU) the step a CUDA graph would record reads nothing back, copies nothing from the host and has the same ops and
shapes at every call, down the Triton path (launches stubbed: the host code around the kernels is what a graph
records), the fused GEMV too. (The twins' forward and generation step make no host sync either:
tests/core/test_host_syncs.py; here they would take minutes on meta.)"""
import pytest
import torch
import transformers
from torch import nn

from core.neuzip import apply_compressed
from core.neuzip.capture import StaticForward, StaticGenerator, checks_deferred
from core.neuzip.codec import compress
from tests.syncs import CaptureCheck, HostSyncs
from tests.core.test_host_syncs import LLAMA, _llama

pytestmark = pytest.mark.usefixtures("single_thread")


def _pair(layers=2):
    torch.manual_seed(0)
    dense = transformers.LlamaForCausalLM(transformers.LlamaConfig(num_hidden_layers=layers, **LLAMA))
    dense = dense.to(torch.bfloat16).eval()
    torch.manual_seed(0)
    packed = transformers.LlamaForCausalLM(transformers.LlamaConfig(num_hidden_layers=layers, **LLAMA))
    packed = packed.to(torch.bfloat16).eval()
    linears = [(n, m) for n, m in packed.named_modules() if isinstance(m, nn.Linear) and "lm_head" not in n]
    return dense, apply_compressed(packed, {n: compress(m.weight.detach(), chunk_size=64) for n, m in linears})


def _greedy(model, ids, new_tokens):
    """transformers' own loop: the dynamic KV cache, one token at a time."""
    with torch.inference_mode():
        out = model(ids, use_cache=True)
        token, tokens = out.logits[:, -1:].argmax(-1), []
        for _ in range(new_tokens):
            tokens.append(token)
            out = model(token, past_key_values=out.past_key_values, use_cache=True)
            token = out.logits[:, -1:].argmax(-1)
    return torch.cat(tokens, 1)


@pytest.mark.slow  # transformers' StaticCache imports torch._dynamo (20 s on a loaded 2-core machine)
def test_the_static_steps_compute_the_bf16_models_logits_and_tokens():
    dense, packed = _pair()
    ids = torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(1))
    want = _greedy(dense, ids, 7)
    for model in (dense, packed):
        generate = StaticGenerator(model, 5, 7)
        assert torch.equal(generate(ids), want)
        assert torch.equal(generate(ids), want)  # again: the cache and the position start over
    with torch.inference_mode():
        logits = dense(ids).logits
    forward = StaticForward(packed, ids)
    assert torch.equal(forward(ids), logits)
    with pytest.raises(ValueError, match="shape"):
        forward(ids[:, :4])
    with pytest.raises(ValueError, match="prompt"):
        generate(ids[:, :4])


def test_the_corruption_check_waits_for_the_end_of_the_block():
    _, packed = _pair(1)
    flag = packed._neuzip_buffer.errors(torch.device("cpu"))
    with pytest.raises(ValueError, match="corrupt"):
        with checks_deferred(packed):
            with torch.inference_mode():
                packed(torch.zeros(1, 3, dtype=torch.long))  # no check here
            flag.fill_(1)  # as a decode on a device would set it
    assert int(flag) == 0


def _captured(step, model):
    """``step`` twice as a graph would record it: the checks deferred, under CaptureCheck; the two checks."""
    checks = []
    with HostSyncs(answer=True), torch.inference_mode():  # the deferred check after the block: answered
        with checks_deferred(model):
            for _ in range(2):
                with CaptureCheck() as check:
                    step()
                checks.append(check)
    return checks


@pytest.mark.slow
@pytest.mark.parametrize("path", ["triton"], indirect=True)
@pytest.mark.parametrize("fused", [False, True])
def test_the_generation_step_is_capturable(path, fused, monkeypatch):
    """One step of StaticGenerator (one token's forward, its argmax, the token and the position written in place) on
    a compressed Llama of 1 and 2 layers: no host sync, nothing copied from the host, the same ops and shapes at the
    next position (fixed shapes); on the Triton path one launch per compressed linear (decode + merge, or the fused
    decode + GEMV)."""
    mode, launched = path
    if not fused:  # the decode into the shared buffer, then the GEMM (LAYERWISE_KERNELS=triton would take the GEMV)
        import kernels.neuzip_gemv as gemv

        monkeypatch.setattr(gemv, "gemv_eligible", lambda *args: False)
    for layers in (1, 2):
        model = _llama(layers)
        with HostSyncs(answer=True):
            generate = StaticGenerator(model, 5, 4, warmup=1)
        launched.clear()
        first, second = _captured(generate.step, model)
        for check in (first, second):
            assert check.count == 0 and not check.from_host, (check.report(), check.from_host)
        assert first.trace == second.trace
        assert launched["rans"] == 2 * 7 * layers  # two steps, one launch per compressed linear


@pytest.mark.slow
@pytest.mark.parametrize("path", ["triton"], indirect=True)
def test_the_forward_is_capturable(path):
    mode, launched = path
    model = _llama(1)
    with HostSyncs(answer=True):
        forward = StaticForward(model, torch.zeros(1, 6, dtype=torch.long, device="meta"), warmup=1)
    first, second = _captured(forward.step, model)
    for check in (first, second):
        assert check.count == 0 and not check.from_host, (check.report(), check.from_host)
    assert first.trace == second.trace and any(shapes for _, shapes in first.trace)
