"""MathNeuro evaluation functions and analysis data functions."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import core.mathneuro as mn
from core.data.records import MathProblem, MultipleChoice
from core.errors import BadInputError
from core.mathneuro import evaluation

pytestmark = pytest.mark.usefixtures("single_thread")


def tiny_llama(seed: int = 0, context: int = 96):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=258, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=context,
                      tie_word_embeddings=False, bos_token_id=256, eos_token_id=257, pad_token_id=257)
    return LlamaForCausalLM(cfg).eval()


def byte_tokenizer(with_bos: bool = True):
    """A byte-level tokenizer with no merges (one token per byte), BOS 256 (added Llama-style when
    ``with_bos``) and EOS 257; built offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab.update({"<s>": 256, "</s>": 257})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if with_bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 256)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


@pytest.fixture(scope="module")
def tokenizer():
    return byte_tokenizer()


class ScriptedLM(nn.Module):
    """Emits ``script`` token by token after the last ``Answer:`` in its input, then EOS (no cache)."""

    def __init__(self, tokenizer, script: str):
        super().__init__()
        self.marker = tokenizer.encode("Answer:", add_special_tokens=False)
        self.script = tokenizer.encode(script, add_special_tokens=False) + [tokenizer.eos_token_id]
        self.vocab = 258
        self.calls = 0
        self.dummy = nn.Linear(1, 1)

    def forward(self, ids):
        self.calls += 1
        seq = ids[0].tolist()
        m = len(self.marker)
        end = max(i + m for i in range(len(seq) - m + 1) if seq[i:i + m] == self.marker)
        logits = torch.zeros(1, len(seq), self.vocab)
        logits[0, -1, self.script[len(seq) - end]] = 10.0
        return logits


PROBLEM = MathProblem("Ana has 2 apples and gets 3 more. How many?", "5", "2 + 3 = 5\n#### 5")


# ----------------------------------------------------------------------------------------------
# Math accuracy
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,number", [("2 + 3 = 5\n#### 5", "5"), ("so 1,234 in total", "1234"),
                                         ("#### $18.00 dollars", "18.00"), ("-4 then 7", "7"), ("none", None)])
def test_extract_answer(text, number):
    assert evaluation.extract_answer(text) == number


def test_same_number():
    assert evaluation.same_number("18.00", "18") and evaluation.same_number("1234", "1,234")
    assert not evaluation.same_number("17", "18") and not evaluation.same_number(None, "1")


def test_math_accuracy_exact_match_and_stop_sequence(tokenizer):
    script = " 2 + 3 = 5\n#### 5\n\nQuestion: what is 9 + 9?\nAnswer: 18"
    model = ScriptedLM(tokenizer, script)
    wrong = MathProblem(PROBLEM.question, "6", PROBLEM.solution)
    out = mn.math_accuracy(model, tokenizer, [PROBLEM, wrong], shots=[PROBLEM], max_new_tokens=200)
    assert out["n"] == 2 and out["correct"] == 1 and out["accuracy"] == 0.5
    assert out["items"][0]["generated"] == " 2 + 3 = 5\n#### 5"  # cut before the stop sequence
    assert out["items"][0]["predicted"] == "5" and out["items"][1]["correct"] is False
    # generation stopped at the stop sequence: one pass per generated token up to "\n\n", per problem
    assert model.calls == 2 * len(tokenizer.encode(" 2 + 3 = 5\n#### 5\n\n", add_special_tokens=False))
    # the prompt is few-shot: shot blocks first, then the question
    assert evaluation.math_prompt("Q?", [PROBLEM]) == f"Question: {PROBLEM.question}\nAnswer: {PROBLEM.solution}" \
        "\n\nQuestion: Q?\nAnswer:"


def test_greedy_generation_matches_transformers_generate(tokenizer):
    model = tiny_llama()
    prompt = "Question: 2 + 2?\nAnswer:"
    text = evaluation.greedy_generate(model, tokenizer, prompt, max_new_tokens=12, stop=())
    ids = torch.tensor([[256] + tokenizer.encode(prompt, add_special_tokens=False)])
    ref = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=257, pad_token_id=257)
    ref_ids = [t for t in ref[0, ids.shape[1]:].tolist() if t != 257]
    assert text == tokenizer.decode(ref_ids)


# ----------------------------------------------------------------------------------------------
# Multiple choice and teacher-forced loss
# ----------------------------------------------------------------------------------------------
def slow_loglik(model, context, continuation):
    ids = torch.tensor([context + continuation])
    with torch.no_grad():
        logp = F.log_softmax(model(input_ids=ids).logits[0].double(), -1)
    return sum(float(logp[len(context) - 1 + i, t]) for i, t in enumerate(continuation))


def test_multiple_choice_matches_unbatched_loglikelihood(tokenizer):
    model = tiny_llama()
    recs = [MultipleChoice("Which colour is the sky?", ("blue", "a deep red", "green"), 0),
            MultipleChoice("Pick one.", ("yes", "no"), 1, passage="Read this first.")]
    out = mn.multiple_choice_accuracy(model, tokenizer, recs)
    truth = []
    for r, item in zip(recs, out["items"]):
        context = [256] + tokenizer.encode(evaluation.choice_prompt(r), add_special_tokens=False)
        slow = [slow_loglik(model, context, tokenizer.encode(" " + c, add_special_tokens=False)) for c in r.choices]
        assert item["loglik"] == pytest.approx(slow, abs=1e-4)
        truth.append(max(range(len(slow)), key=slow.__getitem__))
        assert item["chosen"] == truth[-1]
    assert out["accuracy"] == sum(t == r.answer for t, r in zip(truth, recs)) / 2
    right = [MultipleChoice(r.question, r.choices, t, passage=r.passage) for r, t in zip(recs, truth)]
    assert mn.multiple_choice_accuracy(model, tokenizer, right)["accuracy"] == 1.0


def test_teacher_forced_loss_equals_transformers_loss(tokenizer):
    model = tiny_llama()
    out = mn.teacher_forced_loss(model, tokenizer, [PROBLEM])
    context = [256] + tokenizer.encode(f"Question: {PROBLEM.question}\nAnswer:", add_special_tokens=False)
    target = tokenizer.encode(" " + PROBLEM.solution, add_special_tokens=False)
    ids = torch.tensor([context + target])
    labels = ids.clone()
    labels[0, :len(context)] = -100
    with torch.no_grad():
        ref = float(model(input_ids=ids, labels=labels).loss)
    assert out["loss"] == pytest.approx(ref, rel=1e-5) and out["tokens"] == len(target)
    assert out["perplexity"] == pytest.approx(math.exp(ref), rel=1e-5)
    mixed = mn.teacher_forced_loss(model, tokenizer, [PROBLEM, "plain text here",
                                                      MultipleChoice("Q?", ("a", "bb"), 1)])
    assert mixed["n"] == 3
    assert mixed["loss"] == pytest.approx(sum(i["loss"] * i["tokens"] for i in mixed["items"]) / mixed["tokens"])


def test_evaluation_bad_input(tokenizer):
    model = tiny_llama(context=40)
    long_mc = MultipleChoice("Q?", ("a", "b"), 0, passage="x" * 60)
    with pytest.raises(BadInputError, match="context"):
        mn.multiple_choice_accuracy(model, tokenizer, [long_mc])
    with pytest.raises(BadInputError, match="context"):
        mn.math_accuracy(model, tokenizer, [PROBLEM], shots=[PROBLEM] * 3)
    with pytest.raises(BadInputError, match="context"):
        mn.teacher_forced_loss(model, tokenizer, ["y" * 80])
    for fn in (mn.math_accuracy, mn.multiple_choice_accuracy, mn.teacher_forced_loss):
        with pytest.raises(BadInputError, match="empty"):
            fn(model, tokenizer, [])


# ----------------------------------------------------------------------------------------------
# Analyses
# ----------------------------------------------------------------------------------------------
def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (1, 8), generator=g) for _ in range(n)]


def test_layer_distribution_counts():
    model = tiny_llama()
    masks = mn.identify(model, data(3, 0), data(3, 1), 0.2)
    rows = mn.layer_distribution(masks)
    assert sum(r["selected"] for r in rows) == sum(int(m.sum()) for m in masks.values())
    assert sum(r["total"] for r in rows) == sum(m.numel() for m in masks.values())
    assert sum(r["share_of_selected"] for r in rows) == pytest.approx(1.0)
    by = {(r["layer"], r["module"]): r for r in rows}
    assert by[(1, "down_proj")]["selected"] == int(masks["model.layers.1.mlp.down_proj.weight"].sum())
    assert by[(0, "q_proj")]["group"] == "attention" and by[(0, "up_proj")]["group"] == "mlp"
    assert by[(None, "lm_head")]["group"] == "head"
    assert [r["module"] for r in rows[:7]] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                               "down_proj"]


def test_proportion_sweep_runs_forward_once_and_matches_identify():
    model = tiny_llama()
    a, b = data(3, 0), data(3, 1)
    passes = []
    h = model.register_forward_pre_hook(lambda m, x: passes.append(1))
    rows = mn.proportion_sweep(model, a, b, [0.05, 0.5],
                               evaluate=lambda m: {"w0": float(m.lm_head.weight[0, 0].detach())})
    h.remove()
    assert len(passes) == 6
    for row in rows:
        masks = mn.identify(model, a, b, row["proportion"])
        assert row["selected"] == sum(int(m.sum()) for m in masks.values())
        w0 = model.lm_head.weight[0, 0]
        assert row["w0"] == (0.0 if masks["lm_head.weight"][0, 0] else float(w0.detach()))
    with pytest.raises(BadInputError):
        mn.proportion_sweep(model, a, b, [0.1, 2.0])


def test_scale_sweep_and_effects_restore_model():
    model = tiny_llama().requires_grad_(False)
    masks = mn.identify(model, data(2, 0), data(2, 1), 0.3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    sel = masks["lm_head.weight"]
    i, j = [int(v[0]) for v in torch.nonzero(sel)[:1].T]
    w = float(model.lm_head.weight[i, j])
    rows = mn.scale_factor_sweep(model, masks, [1.0, 1.1, 0.0], lambda m: {"w": float(m.lm_head.weight[i, j])})
    assert [r["factor"] for r in rows] == [1.0, 1.1, 0.0]
    assert rows[0]["w"] == w and rows[1]["w"] == pytest.approx(w * 1.1) and rows[2]["w"] == 0.0
    effects = mn.intervention_effects(model, {"mathneuro": masks}, lambda m: {"w": float(m.lm_head.weight[i, j])})
    assert effects == [{"method": "mathneuro", "metric": "w", "before": w, "after": 0.0, "change": -w,
                        "selected": sum(int(m.sum()) for m in masks.values())}]
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    with pytest.raises(BadInputError):
        mn.scale_factor_sweep(model, masks, [float("inf")], lambda m: {})


@pytest.mark.slow
def test_consistency_full_sample_overlap_is_one():
    model = tiny_llama()
    rows = mn.consistency(model, data(4, 0), data(4, 1), sample_counts=[1, 4], proportions=[0.1, 0.3], repeats=2)
    assert [(r["samples"], r["proportion"]) for r in rows] == [(1, 0.1), (1, 0.3), (4, 0.1), (4, 0.3)]
    for r in rows:
        assert 0.0 <= r["overlap_with_full"] <= 1.0 and 0.0 <= r["pairwise_jaccard"] <= 1.0
        if r["samples"] == 4:  # every subset is the full data set
            assert r["overlap_with_full"] == 1.0 and r["jaccard_with_full"] == 1.0 and r["pairwise_jaccard"] == 1.0
    stats = mn.collect(model, data(4, 0), data(4, 1))
    for r in rows[:2]:
        full = mn.select(model, stats, r["proportion"])
        assert r["selected_full"] == sum(int(m.sum()) for m in full.values())
    with pytest.raises(BadInputError):
        mn.consistency(model, data(2, 0), data(2, 1), sample_counts=[3])


def test_drill_down_grid():
    mask = torch.zeros(8, 12, dtype=torch.bool)
    mask[:4, :3] = True
    out = mn.drill_down({"w": mask}, "w", max_cells=4)
    assert out["shape"] == [8, 12] and out["selected"] == 12 and out["share"] == pytest.approx(12 / 96)
    assert out["grid"] == [[1.0, 0, 0, 0], [1.0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert out["row_edges"] == [0, 2, 4, 6, 8] and out["col_edges"] == [0, 3, 6, 9, 12]
    small = mn.drill_down({"w": mask}, "w", max_cells=64)
    assert torch.equal(torch.tensor(small["grid"]).bool(), mask)
    with pytest.raises(BadInputError):
        mn.drill_down({"w": mask}, "v")


def test_token_inputs_from_records(tokenizer):
    recs = [PROBLEM, MultipleChoice("Q?", ("a", "bb"), 1, passage="P."), "plain"]
    inputs = mn.token_inputs(tokenizer, recs)
    assert [t.shape[0] for t in inputs] == [1, 1, 1] and all(t.dtype == torch.long for t in inputs)
    assert tokenizer.decode(inputs[0][0, 1:].tolist()) == f"Question: {PROBLEM.question}\nAnswer: {PROBLEM.solution}"
    assert tokenizer.decode(inputs[1][0, 1:].tolist()) == "P.\nQuestion: Q?\nAnswer: bb"
    assert inputs[2][0, 0] == 256 and mn.token_inputs(tokenizer, recs, max_length=3)[0].shape == (1, 3)


def test_no_bos_tokenizer_scores_text_from_its_second_token():
    tok = byte_tokenizer(with_bos=False)
    assert not evaluation.adds_bos(tok) and evaluation.adds_bos(byte_tokenizer())
    assert mn.token_inputs(tok, ["ab"])[0].tolist() == [tok.encode("ab", add_special_tokens=False)]
    out = mn.teacher_forced_loss(tiny_llama(), tok, ["abcd"])
    assert out["tokens"] == 3
