"""``bench/gpu.py``'s batch-1 generation row: greedy tokens/s of a compressed SmolLM2-135M-config model against bf16,
each eager (transformers' loop, dynamic KV cache) and as CUDA-graph replays (core.neuzip.capture.StaticGenerator:
a static KV cache, one replay per token), the compressed one also with the fused decode + GEMV captured; the target
(>= 0.8x) against the graph-captured bf16, the faster baseline."""
from __future__ import annotations

from gpu_common import RowContext, Timer, check_kernels, extras, forced, self_check_of
from gpu_neuzip import decode_path, graphed, llama_pair, settings_note


def neuzip_generate(ctx: RowContext, timer: Timer, device, sizes: dict) -> None:
    """Five contestants on the same prompt: bf16 and compressed, eager and graph-captured, and the compressed graph
    with the fused decode + GEMV (captured with LAYERWISE_KERNELS=triton: the kernel choice is made when the step is
    recorded). Tokens/s counts the new tokens; the prompt's forward is inside each timed call."""
    import torch

    from core.neuzip.capture import StaticGenerator

    checks = check_kernels(device, ["pair_rans_decode_bf16", "pair_rans_decode", "merge_bf16", "pair_rans_gemv"])
    config, label, chunk = sizes["llama"], sizes["llama_label"], sizes.get("chunk")
    pair = llama_pair(timer, device, config, chunk)
    dense, packed = pair["dense"], pair["packed"]
    prompt, new_tokens = sizes["prompt"], sizes["new_tokens"]
    ids = torch.randint(0, config["vocab_size"], (1, prompt), generator=torch.Generator().manual_seed(2)).to(device)

    def generate(model):
        def step():
            with torch.inference_mode():
                out = model(ids, use_cache=True)
                cache, token, tokens = out.past_key_values, out.logits[:, -1:].argmax(-1), []
                for _ in range(new_tokens):
                    tokens.append(token)
                    out = model(token, past_key_values=cache, use_cache=True)
                    cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
                return torch.cat(tokens, 1)
        return step

    failed = {}
    graphs = {"bf16_graph": graphed(lambda: StaticGenerator(dense, prompt, new_tokens), failed, "bf16_graph"),
              "compressed_graph": graphed(lambda: StaticGenerator(packed, prompt, new_tokens), failed,
                                          "compressed_graph"),
              "compressed_graph_fused_gemv": graphed(forced("triton", lambda: StaticGenerator(packed, prompt,
                                                                                              new_tokens)),
                                                     failed, "compressed_graph_fused_gemv")}
    contestants = {"bf16": generate(dense), "compressed": generate(packed)}
    contestants.update({name: (lambda g=g: g(ids)) for name, g in graphs.items() if g is not None})
    tokens = {name: fn() for name, fn in contestants.items()}
    want = tokens["bf16"]
    timer.repeats, timer.warmup = sizes["generate_repeats"], min(timer.warmup, 1)
    medians = timer.medians(contestants)
    tokens_per_s = {name: new_tokens / s for name, s in medians.items()}
    peer = "bf16_graph" if "bf16_graph" in tokens_per_s else "bf16"
    best_name = max((k for k in tokens_per_s if k.startswith("compressed")), key=tokens_per_s.get)
    ratio = tokens_per_s[best_name] / tokens_per_s[peer]
    differ = {name: int((got != want).sum()) for name, got in tokens.items()}
    exact = [v for k, v in differ.items() if "fused" not in k]  # the fused GEMV sums in another order

    def one_token(model):
        with torch.inference_mode():
            cache = model(ids, use_cache=True).past_key_values
        token = ids[:, -1:]

        def step():
            with torch.inference_mode():
                return model(token, past_key_values=cache, use_cache=True).logits
        return step

    result = {
        "what": f"{label}: batch-1 greedy generation, {new_tokens} new tokens after a {prompt}-token prompt, linear "
                "layers NeuZip-compressed (lossless) vs bf16, eager and CUDA-graph-captured",
        "settings": settings_note(chunk), "model": label, "shape": {"prompt": prompt, "new_tokens": new_tokens},
        "self_check": self_check_of(checks, "pair_rans_decode_bf16", "pair_rans_decode", "merge_bf16",
                                    "pair_rans_gemv"),
        "decode_path": decode_path(pair), "median_s": medians, "rounds": timer.rounds, "cut_by_deadline": timer.cut,
        "graph_failed": failed, "tokens_per_s": tokens_per_s, "peer": peer, "best_compressed": best_name,
        "ratio_best_compressed_over_bf16_tokens_per_s": ratio,
        "ratio_compressed_over_bf16_eager": tokens_per_s["compressed"] / tokens_per_s["bf16"],
        "ratio_bf16_graph_over_bf16_eager": tokens_per_s["bf16_graph"] / tokens_per_s["bf16"]
        if "bf16_graph" in tokens_per_s else None,
        "target_at_least_0_8": None if not timer.cuda else bool(ratio >= 0.8),
        "tokens_differing_from_bf16": differ, "same_tokens": all(v == 0 for v in exact),
        "fused_same_tokens": differ.get("compressed_graph_fused_gemv") == 0,
        "max_abs_err_vs_twin": float(max(exact)), "agrees_with_twin": all(v == 0 for v in exact),
        "notes": ["tokens_per_s counts the new tokens; each timed call includes the prompt's forward",
                  "peer: the graph-captured bf16 model (a static KV cache, one replay per token) when it captured, "
                  "else eager bf16; the target's ratio is the fastest compressed contestant over it",
                  "compressed: as dispatched (each weight decoded and merged by one kernel into the shared buffer, "
                  "then multiplied); *_fused_gemv: one-row calls multiply straight from the compressed arrays",
                  "max_abs_err_vs_twin: generated tokens differing from the bf16 model's, the fused GEMV aside "
                  "(lossless: 0); the fused GEMV sums in another order and may differ where two logits nearly tie "
                  "(fused_same_tokens)",
                  "profile_token: one generated token under the torch profiler (device time, kernel launches)"]}
    extras(ctx, "neuzip_generate", result, {  # the timed part saved first, the rest while the share allows
        "host_syncs_per_token": lambda: {"compressed": timer.host_syncs(one_token(packed)),
                                         "bf16": timer.host_syncs(one_token(dense))} if timer.cuda else None,
        "profile_token": lambda: {"compressed": timer.profile(one_token(packed), top=6),
                                  "bf16": timer.profile(one_token(dense), top=6)},
        "peak_bytes": lambda: {name: timer.peak_bytes(contestants[name]) for name in contestants}})
