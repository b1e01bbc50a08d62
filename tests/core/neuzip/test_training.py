"""Training with compressed weights (core.neuzip.training, lomo, memtrack): LOMO + NeuZip trains bit for bit as LOMO,
the fused update is LOMO's, the compressed layer's backward is autograd's, the memory tracker gives known answers on
hand-made cases, and the committed example renders."""
import pytest
import torch
import torch.nn.functional as F

from core.errors import BadInputError
from core.neuzip import training
from core.neuzip.lomo import ZipLinear, ZipState, fused_sgd_, weights_digest, zip_linears
from core.neuzip.memtrack import MemoryTracker

pytestmark = pytest.mark.usefixtures("single_thread")
TINY = "tiny-llama"  # 2 layers of width 64, vocabulary 4,096: 1.2 MB of weights (transformers' Llama)
MIXLN = "mixln:pre-ln"  # the project's own Mix-LN run (12 layers of width 64): no transformers import, quick


def _batches(steps=3, batch=2, seq=16, seed=0):
    return torch.randint(0, 4096, (steps, batch, seq), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("threads", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_lomo_and_lomo_neuzip_train_bit_identically(threads):
    """Lossless means the same training: the losses of every step and the final weights, bit for bit (the background
    compression thread changes nothing either)."""
    settings = training.TrainSettings(steps=3, batch=2, seq=16, track_steps=0, compress_threads=threads, fresh=False)
    run = training.train_modes(MIXLN, ["lomo", "lomo+neuzip"], settings, batches=_batches())
    lomo, nz = run["modes"]
    assert lomo["losses"] == nz["losses"] and len(nz["losses"]) == 3
    assert lomo["weights_digest"] == nz["weights_digest"]
    assert run["identical"] == {"lomo+neuzip vs lomo": {"losses": True, "weights": True}}
    assert nz["losses"][-1] != nz["losses"][0]  # it trained


def test_fused_update_is_lomos_fp32_update_rounded_once():
    """LOMO's update (its fuse_update: float32 copies of the weight and the gradient, ``add_(g, alpha=-lr)``, copied
    back), done here in slices: the same bits as on the whole tensor at once."""
    torch.manual_seed(0)
    w = torch.randn(700, 600).bfloat16()
    g = torch.randn(700, 600).bfloat16() * 0.01
    want = w.float().add_(g.float(), alpha=-0.3).bfloat16()
    fused_sgd_(w, g, 0.3)  # in slices of UPDATE_SLICE weights
    assert torch.equal(w.view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("bias", [False, True])
def test_compressed_layer_backward_is_autograds_and_updates_in_place(bias):
    """ZipLinear's forward, input gradient and weight update equal nn.Linear + autograd + the same update, bit for
    bit, and its stored weight is the updated one."""
    torch.manual_seed(1)
    lin = torch.nn.Linear(48, 80, bias=bias).bfloat16()
    x = torch.randn(3, 5, 48, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(3, 5, 80, dtype=torch.bfloat16)
    z = ZipLinear(lin.weight.detach(), lin.bias, ZipState(lr=0.1))
    x2 = x.detach().clone().requires_grad_(True)
    y_ref = lin(x)
    y_ref.backward(g)
    want = lin.weight.detach().clone()
    fused_sgd_(want, lin.weight.grad, 0.1)
    y = z(x2)
    y.backward(g)
    assert torch.equal(y, y_ref) and torch.equal(x2.grad, x.grad)
    assert torch.equal(z.decoded(), want)
    if bias:
        assert torch.equal(z.bias.grad, lin.bias.grad)


def test_zip_linears_keeps_embeddings_and_head_and_compresses_the_rest():
    model = training.build_model(MIXLN)
    n_linear = sum(1 for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and "lm_head" not in n)
    digest = weights_digest(model)
    zip_linears(model, lr=0.1)
    assert sum(isinstance(m, ZipLinear) for m in model.modules()) == n_linear
    assert isinstance(model.lm_head, torch.nn.Linear)
    assert weights_digest(model) == digest  # lossless: the same weights, read back from the compressed layers


def test_fused_loss_matches_autograd_cross_entropy_in_float64():
    torch.manual_seed(0)
    h = torch.randn(37, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    b = torch.randn(50, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 50, (37,))
    from core.neuzip.train_step import LinearCrossEntropy

    got = LinearCrossEntropy.apply(h, w, b, t, 8) / 37
    got.backward()
    grads = [p.grad.clone() for p in (h, w, b)]
    for p in (h, w, b):
        p.grad = None
    want = F.cross_entropy(F.linear(h, w, b), t)
    want.backward()
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    for a, p in zip(grads, (h, w, b)):
        assert torch.allclose(a, p.grad, rtol=1e-10, atol=1e-12)


def test_the_heads_weight_gradient_is_summed_in_row_blocks_on_the_cpu(monkeypatch):
    """The fused loss sums the head's weight gradient a block of rows at a time on the CPU: the same sums as one
    product (float64, blocks of 3 rows with a ragged last one), and in bf16 the process's peak stays well under the
    float32 copy of the whole output that one bf16 product writes through on this CPU path (Llama-3.2-1B's head: 1 GB)."""
    from core.neuzip import train_step
    from core.neuzip.memtrack import reset_peak_rss, rss

    torch.manual_seed(3)
    g, h = torch.randn(5, 50, dtype=torch.float64), torch.randn(5, 7, dtype=torch.float64)
    want = torch.randn(50, 7, dtype=torch.float64)
    got = want.clone()
    want.addmm_(g.t(), h)
    monkeypatch.setattr(train_step, "WEIGHT_GRAD_BLOCK_BYTES", 3 * 4 * 7)
    train_step._add_weight_gradient(got, g, h)
    assert torch.allclose(got, want, rtol=1e-13, atol=1e-13)
    monkeypatch.undo()
    if not reset_peak_rss():
        pytest.skip("no /proc/self/clear_refs here: the peak RSS cannot be reset")
    grad = torch.zeros(32768, 512, dtype=torch.bfloat16)  # 32 MiB; its float32 copy would be 64 MiB
    g, h = torch.randn(4, 32768).bfloat16(), torch.randn(4, 512).bfloat16()
    reset_peak_rss()
    before = rss()["rss"]
    train_step._add_weight_gradient(grad, g, h)
    assert rss()["peak"] - before < 0.75 * grad.numel() * 4, "the whole float32 copy was made"
    assert float(grad.float().abs().sum()) > 0


@pytest.mark.parametrize("pad", [None, 7])
def test_a_tied_embeddings_gradient_is_added_into_the_heads_in_place_with_autograds_bits(monkeypatch, pad):
    """A tied input embedding (transformers' Llama, bf16, tokens repeated, the padding token among them): its lookup's
    gradient summed into the head's in place gives autograd's weight gradient bit for bit, and the backward never
    holds a second gradient of the table's size (the tensor ledger: one table of gradient bytes, against two when
    autograd adds the two partial gradients)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from core.neuzip import train_step

    torch.manual_seed(4)
    config = LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=48, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True, pad_token_id=pad)
    model = LlamaForCausalLM(config).bfloat16()
    table = model.get_input_embeddings().weight
    assert model.lm_head.weight is table
    for p in model.parameters():
        p.requires_grad_(p is table)
    ids = torch.randint(0, 24, (2, 40), generator=torch.Generator().manual_seed(1))
    ids[0, ::5] = 7

    def gradient():
        table.grad = None
        tracker = MemoryTracker()
        with tracker:
            tracker.begin()
            loss = train_step.lm_loss(model, ids, 4)
            training.tag_parameter_gradients(loss, tracker, [table])
            loss.backward()
            tracker.end()
        return table.grad.view(torch.int16).clone(), tracker.peak_split["gradients"]

    got, got_bytes = gradient()
    assert "forward" not in vars(model.get_input_embeddings())  # the lookup is the module's own again
    monkeypatch.setattr(train_step, "_tied_embedding", lambda model, head: None)
    want, want_bytes = gradient()
    assert torch.equal(got, want)
    if pad is not None:
        assert int(got[pad].abs().sum()) != 0  # the head's part of the padding row stays
    size = table.numel() * table.element_size()
    assert got_bytes == size and want_bytes == 2 * size


def test_tracker_on_a_hand_made_case():
    """Known answer: 4,000 bytes at rest, then 8,000 of activations, 2,000 of optimizer state and 1,000 of gradient
    alive together; a later 400-byte block comes after the first is freed, so the peak is 15,000 bytes."""
    tracker = MemoryTracker()
    with tracker:
        w = torch.empty(1000)
        tracker.begin()
        a = torch.empty(2000)
        with tracker.category("optimizer"):
            s = torch.empty(500)
        g = torch.empty(250)
        tracker.mark_gradient(g)
        del a
        b = torch.empty(100)
        tracker.account(600)  # 600 bytes outside the allocator, counted as weights from now on
        tracker.end()
    assert tracker.at_rest["weights"] == 4000
    assert tracker.peak_bytes == 15000
    assert tracker.peak_split == {"weights": 4000, "gradients": 1000, "optimizer": 2000, "activations": 8000}
    del w, s, g, b


def test_tracker_sees_vanilla_hold_every_gradient_and_lomo_one_at_a_time():
    """A stack of bias-free linear layers with a tiny input: vanilla SGD's peak holds every gradient (as many bytes as
    the weights); LOMO's holds the largest layer's alone, plus LOMO's float32 update slices (two float32 copies of
    the largest weight, smaller than UPDATE_SLICE)."""
    sizes = [(256, 64), (32, 256), (16, 32)]  # (out, in); the first layer, whose gradient comes last, the largest

    def measure(lomo: bool):
        torch.manual_seed(0)
        tracker = MemoryTracker()
        with tracker:
            layers = torch.nn.Sequential(*[torch.nn.Linear(i, o, bias=False) for o, i in sizes]).bfloat16()
            params = list(layers.parameters())
            opt = None
            if lomo:
                training.attach_lomo(params, 0.1, tracker)
            else:
                opt = torch.optim.SGD(params, lr=0.1)
                for p in params:
                    p.register_post_accumulate_grad_hook(lambda p: tracker.mark_gradient(p.grad))
            tracker.begin()
            loss = layers(torch.randn(1, 64, dtype=torch.bfloat16)).float().sum()
            training.tag_parameter_gradients(loss, tracker, params)
            loss.backward()
            if opt:
                with tracker.category("optimizer"):
                    opt.step()
            tracker.end()
        return tracker, sum(2 * o * i for o, i in sizes), max(2 * o * i for o, i in sizes)

    vanilla, total, largest = measure(False)
    assert vanilla.at_rest["weights"] == total and vanilla.peak_split["weights"] == total
    assert vanilla.peak_split["gradients"] == total
    lomo, total, largest = measure(True)
    assert lomo.peak_split["weights"] == total
    assert lomo.peak_split["gradients"] == largest
    assert lomo.peak_split["optimizer"] == 2 * 2 * largest  # the float32 weight and gradient of the largest layer


def test_requests_are_checked_before_anything_loads():
    from core.neuzip.requests import TrainingRequest

    with pytest.raises(BadInputError, match="unknown training mode"):
        TrainingRequest.parse(TINY, ["lomo", "adam"])
    with pytest.raises(BadInputError, match="steps"):
        TrainingRequest.parse(TINY, ["lomo"], steps=0)
    with pytest.raises(BadInputError, match="learning rate"):
        TrainingRequest.parse(TINY, ["lomo"], lr=float("nan"))
    r = TrainingRequest.parse(TINY, ["lomo", "lomo"], steps="3", lr="0.01")
    assert r.modes == ("lomo",) and r.steps == 3 and r.settings().lr == {"lomo": 0.01}


def test_a_public_server_builds_no_large_random_model(monkeypatch):
    from core.neuzip.requests import TrainingRequest

    monkeypatch.setenv("LAYERWISE_PUBLIC", "1")
    with pytest.raises(BadInputError, match="not trained on a public server"):
        TrainingRequest.parse("llama3-8b", ["lomo"])
    assert TrainingRequest.parse("tiny-llama", ["lomo"]).ref == "tiny-llama"
    monkeypatch.setenv("LAYERWISE_PUBLIC", "0")
    assert TrainingRequest.parse("llama3-8b", ["lomo"]).ref == "llama3-8b"


def test_the_mode_registry_carries_label_colour_and_defaults():
    assert {"vanilla", "vanilla-adamw", "lomo", "lomo+neuzip", "qlora-int8", "qlora-nf4", "qlora-fp4"} <= \
        set(training.MODES)
    for name, m in training.MODES.items():
        assert m.name == name and m.label and m.colour.startswith("#") and m.defaults["lr"] > 0
    assert training.MODES["lomo+neuzip"].same_training_as == "lomo"


def test_the_committed_example_renders_with_the_paper_table():
    from core.neuzip import training_example_result
    from core.neuzip.training_views import example_runs

    runs = example_runs()
    assert {"smollm2-135m", "llama-1b"} <= set(runs)
    for model, run in runs.items():
        res = training_example_result(model)
        assert res.source == "precomputed" and {"memory", "loss"} <= set(res.figures)
        assert res.figures["memory"].layout.title.text and len(res.figures["loss"].data) == len(run["modes"])
        assert any(r["mode"] == "LOMO + NeuZip" for r in res.tables["training"])
        assert any(r["peak_GiB"] == 15.25 for r in res.tables["paper"])
        by = {m["mode"]: m for m in run["modes"]}
        assert by["lomo"]["losses"] == by["lomo+neuzip"]["losses"]  # recorded bit for bit
        curves = {t.name: t for t in res.figures["loss"].data}
        assert list(curves["LOMO"].y) == list(curves["LOMO + NeuZip"].y)
        assert list(curves["LOMO"].customdata) == by["lomo"]["losses"]  # each step's own loss in the hover
        for m in run["modes"]:
            assert m["peak_bytes"] == sum(m["peak_split"].values())
    with pytest.raises(BadInputError):
        training_example_result("no-such-run")


def test_the_papers_tables_are_whole_and_read_as_printed():
    """Tables 1 and 2 of the NeuZip paper (core.neuzip.published): every model and mode, the cells as the paper
    prints them, OOM where a run did not fit, and the ratios the tab shows computed from them."""
    from core.neuzip import published as pub
    from core.neuzip.training_views import paper_rows, paper_table2_rows

    t1 = {(r["model"], r["mode"]): r for r in pub.TABLE1}
    assert len(t1) == 9 and t1[("Llama-2 13B", "vanilla")]["oom"]
    assert [t1[("GPT-Neo-XL 2.7B", m)]["memory_GiB"] for m in ("vanilla", "lomo", "lomo+neuzip")] == [11.22, 6.97, 5.54]
    assert (t1[("Llama-3 8B", "lomo+neuzip")]["score"], t1[("Llama-2 13B", "lomo+neuzip")]["it_per_s"]) == (8.61, 0.28)
    t2 = {(r["model"], r["mode"]): r for r in pub.TABLE2}
    assert len(t2) == 24 and set(m for _, m in t2) <= set(training.MODES)
    assert (t2[("T5 1B", "lomo+neuzip")]["memory_GiB"], t2[("T5 11B", "qlora-nf4")]["score"]) == (2.39, 57.9)
    assert t2[("T5 3B", "qlora-nf4")]["memory_GiB"] == 7.07 and t2[("T5 3B", "qlora-nf4-single")]["memory_GiB"] == 7.35
    rows = {(r["model"], r["paper_row"]): r for r in paper_rows()}
    assert rows[("Llama-3 8B", "+NeuZip Lossless")]["memory_vs_vanilla"] == pytest.approx(15.25 / 30.97, abs=1e-3)
    oom = rows[("Llama-2 13B", "Vanilla")]
    assert oom["peak_GiB"] is None and "OOM" in oom["note"]
    assert rows[("Llama-2 13B", "LOMO")]["memory_vs_vanilla"] is None  # nothing to divide by
    assert len(paper_table2_rows()) == 24
    md = pub.markdown(pub.table1_rows(), "loss")
    assert "| Vanilla | 8.81 | 11.22 | 0.96 | 8.61 | 30.97 | 0.77 | - | OOM | - |" in md
    # the docs print both tables as the code holds them
    from pathlib import Path
    docs = (Path(__file__).resolve().parents[3] / "docs" / "neuzip-training.md").read_text()
    assert md in docs and pub.markdown(pub.table2_rows(), "BLEU") in docs


def test_loss_curves_are_trailing_means_on_a_hand_made_case():
    from core.neuzip.training_views import trailing_mean

    assert trailing_mean([4.0, 2.0, 6.0, 0.0], window=2) == [4.0, 3.0, 4.0, 3.0]
    assert trailing_mean([1.0, 2.0, 3.0], window=8) == [1.0, 1.5, 2.0]
    assert trailing_mean([]) == []


def test_qlora_modes_are_skipped_with_the_reason_where_bitsandbytes_does_not_run(monkeypatch):
    from core.neuzip import qlora

    monkeypatch.setattr(qlora, "bnb_status", lambda device="cpu": "bitsandbytes does not import (a test says so)")
    settings = training.TrainSettings(steps=1, batch=1, seq=16, track_steps=0, fresh=False)
    run = training.train_modes(MIXLN, ["lomo", "qlora-nf4", "qlora-int8"], settings, batches=_batches(1, 1, 16))
    assert [m["mode"] for m in run["modes"]] == ["lomo"]
    assert run["skipped"] == {"qlora-nf4": "bitsandbytes does not import (a test says so)",
                              "qlora-int8": "bitsandbytes does not import (a test says so)"}


@pytest.mark.slow
def test_qlora_trains_only_its_adapters_over_frozen_quantized_weights():
    from core.neuzip import qlora

    if qlora.bnb_status():
        pytest.skip(qlora.bnb_status())
    model = training.build_model(MIXLN)
    adapters = qlora.quantize_linears(model, "nf4", rank=4, alpha=8.0)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    assert {id(p) for p in adapters} == {id(p) for p in model.parameters() if p.requires_grad}
    opt = torch.optim.AdamW(adapters, lr=1e-2)
    training.lm_loss(model, _batches(1, 2, 16)[0], 0).backward()
    opt.step()
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if not p.requires_grad)
    assert any(float(m.lora_B.abs().max()) > 0 for m in model.modules() if isinstance(m, qlora.LoRALinear))


def test_the_fused_update_through_reused_slices_is_bit_for_bit_the_plain_one():
    """LOMO's update with its two float32 slices reused (UpdateScratch) against the same update allocating them: the
    same bits, for a weight larger than a slice and for a small one after it (the slices are not shrunk)."""
    from core.neuzip.lomo import UPDATE_SLICE, UpdateScratch

    torch.manual_seed(2)
    scratch = UpdateScratch()
    for shape in ((UPDATE_SLICE // 300 + 7, 300), (17, 5)):
        w = torch.randn(shape).bfloat16()
        g = torch.randn(shape).bfloat16() * 0.01
        want = w.clone()
        fused_sgd_(want, g, 0.3)
        fused_sgd_(w, g, 0.3, scratch=scratch)
        assert torch.equal(w.view(torch.int16), want.view(torch.int16))
    assert scratch.get(torch.device("cpu")).shape == (2, UPDATE_SLICE)


def test_a_layer_is_re_encoded_into_storage_reserved_once():
    """A compressed layer's weight, updated and re-encoded step after step, is written into the same arrays (its
    sign/mantissa bytes, its stream's words, states and offsets: the same addresses), decodes to the updated weight
    bit for bit, and its storage does not grow while the stream stays within its headroom."""
    torch.manual_seed(3)
    state = ZipState(lr=0.01)
    w = (torch.randn(300, 700) * 0.02).bfloat16()
    layer = ZipLinear(w, None, state)
    store = layer.stream_store
    where = (layer.fields.data_ptr(), store.words.ctypes.data, store.states.ctypes.data, store.offsets.ctypes.data)
    for step in range(4):
        w = (w.float() + torch.randn_like(w.float()) * 1e-4).bfloat16()
        layer.store(w)
        assert torch.equal(layer.decoded().view(torch.int16), w.view(torch.int16)), step
        assert layer.compressed.exponents.words.ctypes.data == store.words.ctypes.data
    assert (layer.fields.data_ptr(), store.words.ctypes.data, store.states.ctypes.data,
            store.offsets.ctypes.data) == where
    assert store.grown == 0 and store.words.size >= layer.compressed.exponents.words.size


@pytest.mark.slow
def test_each_mode_in_fresh_processes_measures_what_this_process_trains():
    """Two fresh processes per mode: the same losses and final weights as a run in this process (LOMO + NeuZip = LOMO,
    bit for bit), the tensor ledger's peak to the byte, and the process's own figures: its whole peak RSS, its RSS
    after each step, the CPU model and capability it ran on."""
    settings = dict(steps=3, batch=1, seq=16)
    here = training.train_modes(TINY, ["lomo", "lomo+neuzip"], training.TrainSettings(**settings, fresh=False))
    fresh = training.train_modes(TINY, ["lomo", "lomo+neuzip"], training.TrainSettings(**settings, fresh=True))
    assert fresh["identical"] == {"lomo+neuzip vs lomo": {"losses": True, "weights": True}}
    for a, b in zip(here["modes"], fresh["modes"]):
        assert a["losses"] == b["losses"] and a["weights_digest"] == b["weights_digest"]
        assert a["peak_bytes"] == b["peak_bytes"] and a["peak_split"] == b["peak_split"]
        assert b["fresh_process"] and not a["fresh_process"]
        assert b["peak_rss_bytes"] >= max(b["rss_after_step_bytes"]) > 0 and len(b["rss_after_step_bytes"]) == 3
        assert b["tracked_run"]["losses"] == b["losses"][:2]
    assert fresh["machine"]["cpu_model"] and fresh["machine"]["cpu_capability"]


@pytest.mark.slow
def test_double_quantization_quantizes_the_block_scales():
    """The -single modes keep float32 block scales; the others (the paper's NF4² / FP4²) quantize them to 8 bits with
    a second level of scales: fewer bytes at real sizes, the same 4-bit codes."""
    from core.neuzip import qlora

    if qlora.bnb_status():
        pytest.skip(qlora.bnb_status())
    assert training.MODES["qlora-nf4"].defaults["double_quant"] and not \
        training.MODES["qlora-nf4-single"].defaults["double_quant"]
    for dq in (False, True):  # the Mix-LN model's layers: the scales as asked
        model = training.build_model(MIXLN)
        qlora.quantize_linears(model, "nf4", rank=4, alpha=8.0, double_quant=dq)
        states = [m.base.weight.quant_state for m in model.modules() if isinstance(m, qlora.LoRALinear)]
        assert states and all(s.nested == dq for s in states)
        assert all(s.absmax.dtype == (torch.uint8 if dq else torch.float32) for s in states)
    # one 512 x 512 layer: 4,096 blocks of 64, their scales 16 KiB in float32, 4 KiB + a second level when quantized
    lin = torch.nn.Linear(512, 512, bias=False)
    single, double = (qlora._quantized(lin, "nf4", torch.device("cpu"), double_quant=dq) for dq in (False, True))
    assert torch.equal(single.weight.data, double.weight.data)  # the same 4-bit codes
    nbytes = lambda s: sum(t.numel() * t.element_size() for t in (s.absmax, *((s.state2.absmax, s.state2.code)
                                                                               if s.nested else ())))  # noqa: E731
    assert nbytes(single.weight.quant_state) == 4096 * 4
    assert nbytes(double.weight.quant_state) == 4096 + 16 * 4 + 256 * 4  # 8-bit scales, 16 blocks of 256, a code
