"""NeuZip memory / perplexity trade-off: word-level perplexity against slow references, the Pareto front,
lossless k=7 = bf16, memory ordering and accounting, each point looked up in the results cache, and cancellation."""
import copy
import math
import random

import pytest
import torch
from torch import nn

from core import runner
from core.cache import ResultsCache
from core.errors import BadInputError, Cancelled
from core.neuzip import compress_model, memory_report
from core.neuzip.perplexity import eval_text, windowed_nll, word_perplexity
from core.neuzip.requests import TradeoffRequest
from core.neuzip.service import point_lookup
from core.neuzip.tradeoff import default_settings, pareto_front, tradeoff_for_model
from core.progress import cancellable

pytestmark = pytest.mark.usefixtures("single_thread")


class CharTokenizer:
    """One token per character; BOS = 1."""
    bos_token_id, eos_token_id = 1, 2

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [3 + ord(c) % 29 for c in text]}


class Bigram(nn.Module):
    """Logits depend on the current token only."""

    def __init__(self, vocab=32):
        super().__init__()
        self.table = nn.Parameter(torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(1)))

    def forward(self, ids):
        return self.table[ids]


class RunningMean(nn.Module):
    """Logits depend on every earlier token of the window (so the window boundaries matter)."""

    def __init__(self, vocab=32, dim=8):
        super().__init__()
        g = torch.Generator().manual_seed(2)
        self.emb = nn.Parameter(torch.randn(vocab, dim, generator=g))
        self.out = nn.Parameter(torch.randn(dim, vocab, generator=g))

    def forward(self, ids):
        h = self.emb[ids].cumsum(1) / torch.arange(1, ids.shape[1] + 1)[None, :, None]
        return h @ self.out


TEXT = "the cat sat on the mat. a dog ran far away, and then it came back home"


def test_uniform_model_word_perplexity_is_exact():
    class Uniform(nn.Module):
        def forward(self, ids):
            return torch.zeros(*ids.shape, 32)

    r = word_perplexity(Uniform(), CharTokenizer(), "ab cd e", window=3)
    # BOS + 7 characters: 7 predicted tokens, each with NLL ln 32, over 3 words
    assert r["tokens"] == 7 and r["words"] == 3
    assert r["perplexity"] == pytest.approx(32 ** (7 / 3), rel=1e-6)
    assert r["token_perplexity"] == pytest.approx(32.0, rel=1e-6)


def test_word_perplexity_equals_a_direct_computation():
    model, tok = Bigram(), CharTokenizer()
    ids = [1] + tok(TEXT)["input_ids"]
    logp = torch.log_softmax(model.table.detach().double(), -1)
    nll = -sum(float(logp[a, b]) for a, b in zip(ids[:-1], ids[1:]))
    expected = math.exp(nll / len(TEXT.split()))
    for window in (4, 7, 1000):  # a bigram model does not see the windows
        assert word_perplexity(model, tok, TEXT, window)["perplexity"] == pytest.approx(expected, rel=1e-5)


def test_windows_do_not_overlap_and_match_a_token_by_token_reference():
    model = RunningMean()
    ids = torch.tensor([1] + CharTokenizer()(TEXT)["input_ids"])
    window = 6
    total, count = windowed_nll(model, ids, window)
    slow = 0.0
    for j in range(1, len(ids)):  # predict token j from the start of its window up to j - 1
        start = ((j - 1) // window) * window
        logits = model(ids[None, start:j])[0, -1].detach()
        slow -= float(torch.log_softmax(logits, -1)[ids[j]])
    assert count == len(ids) - 1
    assert total == pytest.approx(slow, rel=1e-5)
    assert windowed_nll(model, ids, len(ids))[0] != pytest.approx(slow, rel=1e-3)  # the windows matter here


def test_pareto_front_on_hand_made_points():
    pts = [(10, 5.0), (8, 5.5), (8, 6.0), (6, 7.0), (12, 5.0), (4, 9.0), (9, 5.2), (7, float("nan"))]
    assert pareto_front(pts) == [5, 3, 1, 6, 0]
    assert pareto_front([(1, 2), (1, 2)]) == [0, 1]  # equal points do not dominate each other
    rng = random.Random(0)
    pts = [(rng.randint(1, 30), rng.randint(1, 30)) for _ in range(60)]
    front = set(pareto_front(pts))

    def dominates(a, b):
        return a[0] <= b[0] and a[1] <= b[1] and a != b

    for i, p in enumerate(pts):
        beaten = any(dominates(q, p) for q in pts)
        assert (i in front) == (not beaten)


def test_settings_are_checked():
    assert [s.get("k") for s in default_settings((7, 3), 64, baselines=False)] == [None, 7, 3, 3]
    request = TradeoffRequest.parse("m", ["7", 3], "64", "2000", baselines=False)
    assert (request.ks, request.block_size, request.words) == ((7, 3), 64, 2000)
    assert list(request.settings) == default_settings((7, 3), 64, baselines=False)
    with pytest.raises(BadInputError, match="mantissa_bits"):
        TradeoffRequest.parse("m", (7, 5))
    with pytest.raises(BadInputError, match="power of two"):
        TradeoffRequest.parse("m", (3,), 100)
    with pytest.raises(BadInputError, match="no mantissa bits"):
        TradeoffRequest.parse("m", ())
    with pytest.raises(BadInputError):
        tradeoff_for_model(nn.Sequential(nn.Embedding(4, 4)), CharTokenizer(), TEXT, default_settings((7,), None, False))


class TinyLM(nn.Module):
    """Embedding, a causal running-mean mixer with two linear layers, and an LM head tied to the embedding."""

    def __init__(self, vocab=32, dim=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim, bias=False)
        self.mix = nn.Linear(dim, dim, bias=False)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.embed.weight
        self.register_buffer("scale", torch.ones(dim))
        for p in self.parameters():
            nn.init.normal_(p, std=0.05)

    def forward(self, ids):
        h = self.embed(ids)
        h = self.mix(h.cumsum(1) / torch.arange(1, ids.shape[1] + 1)[None, :, None])
        h = h + self.down(torch.relu(self.up(h)))
        return self.lm_head(h * self.scale)


def tiny_llama():
    torch.manual_seed(0)
    return TinyLM().eval()


@pytest.fixture(scope="module")
def tiny_result(tmp_path_factory):
    model = tiny_llama()
    cache = ResultsCache(tmp_path_factory.mktemp("cache"))
    settings = default_settings((7, 3, 1, 0), 32, baselines=False)
    with pytest.MonkeyPatch.context() as mp:  # each point is looked up in this cache
        mp.setattr(runner, "results_cache", lambda: cache)
        r = tradeoff_for_model(model, CharTokenizer(), TEXT, settings, window=16,
                               point=point_lookup("tiny", "tiny", "text"))
    return model, cache, settings, r


def _quantized(messages: list[str]) -> set[str]:
    """The settings whose weights were quantized (a point computed, not found) in these progress messages."""
    return {m.split(": ")[0] for m in messages if ": quantizing" in m}


def test_lossless_point_has_exactly_the_bf16_perplexity(tiny_result):
    _, _, _, r = tiny_result
    by = {p["label"]: p for p in r["points"]}
    assert by["NeuZip k=7 (lossless)"]["perplexity"] == by["bf16"]["perplexity"]
    assert by["NeuZip k=0"]["perplexity"] != by["bf16"]["perplexity"]  # lossy settings really change the weights


def test_memory_ordering_and_accounting(tiny_result):
    model, _, _, r = tiny_result
    mem = {(p["method"], p["k"], p["block_size"]): p["memory_bytes"] for p in r["points"]}
    order = [mem[("neuzip", 0, None)], mem[("neuzip", 1, None)], mem[("neuzip", 3, None)],
             mem[("neuzip", 7, None)], mem[("bf16", None, None)]]
    assert order == sorted(order) and len(set(order)) == 5
    for k in (1, 3):  # a normaliser costs one byte per block
        assert mem[("neuzip", k, 32)] > mem[("neuzip", k, None)]
    # the same bytes memory_report counts for a compressed bf16 copy of the model
    for k, b in ((3, None), (0, 32)):
        ref = memory_report(compress_model(copy.deepcopy(model).to(torch.bfloat16), k, b))
        assert mem[("neuzip", k, b)] == ref["resident_bytes"]
    bf16 = 2 * sum(p.numel() for p in model.parameters()) + 2 * sum(b.numel() for b in model.buffers())
    assert mem[("bf16", None, None)] == bf16
    front = [p["label"] for p in r["points"] if p["pareto"]]
    assert set(front) == set(r["pareto"]) and "NeuZip k=0" in front


def test_second_request_comes_from_the_cache(tiny_result, monkeypatch):
    model, cache, settings, first = tiny_result
    monkeypatch.setattr(runner, "results_cache", lambda: cache)
    seen = []
    again = tradeoff_for_model(model, CharTokenizer(), TEXT, settings, window=16,
                               point=point_lookup("tiny", "tiny", "text"), progress=lambda f, m: seen.append(m))
    assert seen and not _quantized(seen)  # every point came from the cache
    assert again == first and "cached" not in again["points"][0]  # provenance is the lookup's, not the data's


def test_cancel_keeps_finished_points(fresh_cache):
    model = tiny_llama()
    settings = default_settings((7, 0), None, baselines=False)
    point = point_lookup("t", "t", "text")
    calls = {"n": 0}

    def should_stop():
        calls["n"] += 1
        return calls["n"] > 10  # after the bf16 point (start + 3 layers + 5 windows + done)

    seen = []
    with pytest.raises(Cancelled):
        tradeoff_for_model(model, CharTokenizer(), TEXT, settings, window=16, point=point,
                           progress=cancellable(lambda f, m: seen.append(f), should_stop))
    assert seen == sorted(seen) and all(0 <= f <= 1 for f in seen)
    messages = []
    tradeoff_for_model(model, CharTokenizer(), TEXT, settings, window=16, point=point,
                       progress=lambda f, m: messages.append(m))
    assert _quantized(messages) == {"NeuZip k=7 (lossless)", "NeuZip k=0"}  # the bf16 point was kept


def test_eval_text_takes_the_first_words():
    from core.data import status
    if not status("wikipedia-paragraphs").ready:
        pytest.skip("python -m core data prepare")
    text, name = eval_text(250)
    assert name == "wikipedia-paragraphs" and len(text.split()) == 250
    with pytest.raises(BadInputError):
        eval_text(0)


@pytest.mark.slow
def test_bitsandbytes_baselines_and_entropy_coded_nf4():
    pytest.importorskip("bitsandbytes")  # importing it takes ~20 s (torch.compile set-up)
    from core.neuzip import rans
    from core.neuzip.formats import METHODS, _bnb_4bit, nibbles

    w = (torch.randn(256, 512, generator=torch.Generator().manual_seed(3)) * 0.02).to(torch.bfloat16)
    n = w.numel()
    bits = {m: 8 * METHODS[m].quantize(w)[1] / n for m in ("bnb-int8", "bnb-nf4", "bnb-fp4", "nf4-rans")}
    assert 8.0 < bits["bnb-int8"] < 8.2                     # int8 codes + one float32 scale per row
    assert 4.1 < bits["bnb-nf4"] < 4.25 and bits["bnb-fp4"] == bits["bnb-nf4"]  # 4 bits + double-quantized scales
    assert bits["nf4-rans"] < bits["bnb-nf4"]                # NF4 codes are not uniform: entropy coding helps
    packed, state, w_hat = _bnb_4bit(w, "nf4")
    codes = nibbles(packed)
    assert codes.max() < 16 and len(codes) == n
    assert (rans.decode(rans.encode(codes)) == codes).all()  # lossless on the codes: NF4's perplexity
    assert torch.equal(METHODS["nf4-rans"].quantize(w)[0], w_hat)
    assert float((w_hat - w.float()).abs().max()) < 0.2 * float(w.float().abs().max())
