"""Bounded inputs (issue 22): numbers in their ranges and finite, texts cut before they are tokenized, capped counts
said up front, class names read from the folder a model was loaded from, whatever its spelling."""
from __future__ import annotations

import math
import shutil

import pytest
import torch

import core.lrp as lrp
from core.errors import BadInputError, Cancelled
from core.paths import ASSETS_DIR
from core.zoo import registered_names

needs = pytest.mark.skipif(not {"mamba-sentiment", "mamba-lm"} <= set(registered_names()),
                           reason="embedded Mamba models not committed")
NOT_FINITE = [math.nan, math.inf, -math.inf]


@needs
@pytest.mark.parametrize("gamma", [1e300, 1e4, -0.5, *NOT_FINITE])
def test_gamma_outside_its_range_is_refused_before_any_work(gamma, fresh_cache):
    """gamma = 1e300 explained the wrong class with NaN relevances (the boosted sums overflow float32)."""
    with pytest.raises(BadInputError, match=f"gamma must be a number from 0 to {lrp.MAX_GAMMA:g}"):
        lrp.text_result("mamba-sentiment", "a witty film", ["mambalrp"], rules={"gamma": gamma})
    assert fresh_cache.entries() == []


@needs
def test_the_largest_gamma_explains_the_models_own_class_with_finite_relevances(fresh_cache):
    text = "a witty and tender film that drags a little"
    plain = lrp.text_result("mamba-sentiment", text, ["mambalrp"]).data
    top = lrp.text_result("mamba-sentiment", text, ["mambalrp"], rules={"gamma": lrp.MAX_GAMMA}).data
    assert top["target"] == plain["target"] == plain["predictions"][0]["id"]
    assert all(math.isfinite(r) for r in top["methods"]["mambalrp"]["relevance"])
    assert math.isfinite(top["methods"]["mambalrp"]["logit"])


@needs
@pytest.mark.parametrize("model, kept", [("mamba-sentiment", "first"), ("mamba-lm", "last")])
def test_a_huge_text_is_cut_to_characters_before_it_is_tokenized(model, kept, fresh_cache, monkeypatch):
    """A 56 MB text: only the part that can be explained is read (the first characters for a classifier, the last for
    a language model): the tokenizer never sees more than the cut, and the stored result holds the cut text, not
    56 MB."""
    from core.lrp import inputs

    head, tail = "a gorgeous opening, ", " and a dull ending."
    text = head + "a witty film. " * 4_000_000 + tail
    seen = []
    tokenize = inputs.tokenize
    monkeypatch.setattr(inputs, "tokenize", lambda loaded, t, *a, **k: seen.append(len(t)) or tokenize(loaded, t, *a, **k))
    data = lrp.text_result(model, text, ["gradient_x_input"]).data
    assert seen and max(seen) <= lrp.MAX_TEXT_CHARS, seen
    assert len(data["text"]) == lrp.MAX_TEXT_CHARS and f"only the {kept} {lrp.MAX_TEXT_CHARS:,}" in data["note"]
    assert f"{len(text):,} characters" in data["note"] and len(data["tokens"]) == lrp.MAX_TOKENS
    assert data["text"].startswith(head) if kept == "first" else data["text"].endswith(tail)


@needs
def test_a_folder_copy_of_a_classifier_names_its_classes(tmp_path, fresh_cache):
    """Class names come from the folder the model was loaded from (its card.json labels, else config.id2label), not
    from the registered name: a copy of mamba-sentiment said '<unk>' and '<|endoftext|>' (token ids 0 and 1)."""
    folder = tmp_path / "copy"
    shutil.copytree(ASSETS_DIR / "models" / "mamba-sentiment", folder)
    for ref in (str(folder), str(folder) + "/./."):
        assert [name for name, _ in lrp.target_choices(ref)] == ["0: negative", "1: positive"]
        data = lrp.text_result(ref, "a witty and tender film", ["gradient_x_input"]).data
        assert data["target_name"] in ("negative", "positive")
        assert {p["name"] for p in data["predictions"]} == {"negative", "positive"}


def test_a_config_id2label_names_the_classes_when_the_card_does_not(tmp_path):
    from transformers import MambaConfig

    from core.lrp import inputs
    from core.lrp.models import MambaSequenceClassifier
    from core.zoo import load_model

    config = MambaConfig(vocab_size=32, hidden_size=16, state_size=4, num_hidden_layers=1,
                         id2label={0: "sad", 1: "glad"}, label2id={"sad": 0, "glad": 1})
    MambaSequenceClassifier(config, 2).save_pretrained(tmp_path / "m")
    (tmp_path / "m" / "card.json").write_text('{"model_class": "core.lrp:MambaSequenceClassifier", '
                                              '"kind": "sequence-classifier"}')
    assert inputs.labels_of(load_model(str(tmp_path / "m"), use_cache=False)) == {0: "sad", 1: "glad"}
    MambaSequenceClassifier(MambaConfig(vocab_size=32, hidden_size=16, state_size=4, num_hidden_layers=1), 2) \
        .save_pretrained(tmp_path / "p")
    (tmp_path / "p" / "card.json").write_text((tmp_path / "m" / "card.json").read_text())
    assert inputs.labels_of(load_model(str(tmp_path / "p"), use_cache=False)) == {}  # LABEL_0/LABEL_1 name nothing


@needs
def test_a_sample_count_past_the_split_is_said_up_front(fresh_cache):
    """``lrp faithfulness -n 1000000`` ran the 1,057 test sentences for minutes without a word; now the first thing
    reported is a note with the count that will run (the run is stopped right after it here)."""
    messages = []

    def progress(fraction, message):
        messages.append(message)
        if not message.startswith("note: "):
            raise Cancelled("Stopped.")

    res = lrp.evaluation_result("vision-mamba-mnist", 10**6, 2, ["random"], progress)
    assert messages[0] == "note: N = 1,000,000 asked, but mnist-5k (test) has 500 usable samples; explaining those 500"
    assert res.data["n"] == 500 and res.data["n_done"] == 0


@pytest.mark.parametrize("call, match", [
    (lambda: __import__("core.mixln", fromlist=["x"]).angular_distance_result("mathneuro-tiny", math.nan), "samples"),
    (lambda: __import__("core.mixln", fromlist=["x"]).layer_removal_result(["mathneuro-tiny"], math.inf), "samples"),
    (lambda: __import__("core.mixln", fromlist=["x"]).model_gradnorms_result("mathneuro-tiny", 4, -math.inf),
     "seq_len"),
    (lambda: next(__import__("core.mixln", fromlist=["x"]).live_run("mix", 0.25, math.nan, 10)), "layers"),
    (lambda: next(__import__("core.mixln", fromlist=["x"]).live_run("mix", math.nan, 4, 10)), "alpha"),
    (lambda: __import__("core.neuzip", fromlist=["x"]).table_result("mathneuro-tiny", math.nan), "mantissa_bits"),
    (lambda: __import__("core.neuzip", fromlist=["x"]).tradeoff_result("mathneuro-tiny", words=math.inf), "words"),
    (lambda: __import__("core.mathneuro", fromlist=["x"]).layer_distribution_result(
        "mathneuro-tiny", "arithmetic-words", ["review-sentiment"], math.nan, 0.05), "N"),
    (lambda: __import__("core.mathneuro", fromlist=["x"]).layer_distribution_result(
        "mathneuro-tiny", "arithmetic-words", ["review-sentiment"], 10, math.inf), "K"),
])
def test_nan_and_infinity_get_one_clear_message_in_every_service(call, match):
    """A NaN or infinite number reaching a service is one BadInputError naming the parameter, never a ValueError
    (`cannot convert float NaN to integer`, as /mixln_model_angular answered) or a computation on NaN."""
    with pytest.raises(BadInputError, match=match):
        call()


def test_number_fields_refuse_nan_infinity_and_out_of_range_with_the_apps_message():
    """gradio's own Number said "Could not preprocess" for a raw NaN (6 endpoints); the app's fields say what is wrong
    and what to type, as every other message of the app does."""
    import gradio as gr

    from ui.widgets import finite_number, finite_slider

    n = finite_number(value=5, precision=0, minimum=1, maximum=1000, label="N")
    s = finite_slider(1, 32, value=4, step=1, label="held-out sequences")
    k = finite_number(value=0.05, label="K")
    assert (n.preprocess(7.0), s.preprocess(3), k.preprocess(-2.5), n.preprocess(None)) == (7, 3, -2.5, None)
    for field, bad, fix in [(n, math.nan, "from 1 to 1000"), (n, math.inf, "from 1 to 1000"), (n, 1001, "from 1 to 1000"),
                            (s, -math.inf, "from 1 to 32"), (s, 0, "from 1 to 32"), (k, math.nan, "that is finite")]:
        with pytest.raises(gr.Error) as err:
            field.preprocess(bad)
        assert f"{field.label} = {bad!r} is not allowed" in err.value.message and fix in err.value.message


def test_an_oversized_request_is_refused_before_it_is_read():
    """The app's ASGI guard answers 413 with one message to a body over the cap (by its Content-Length, or as it
    streams in without one) and passes everything else, uploads included, untouched."""
    import asyncio

    from ui.limits import RequestSizeLimit

    seen = []

    async def app(scope, receive, send):
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                seen.append("disconnect")
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen.append(len(body))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    def call(path, chunks, length=True):
        sent = []
        messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
        headers = [(b"content-length", str(sum(map(len, chunks))).encode())] if length else []

        async def receive():
            return messages.pop(0)

        async def send(message):
            sent.append(message)

        asyncio.run(RequestSizeLimit(app, max_bytes=1000)({"type": "http", "path": path, "headers": headers},
                                                          receive, send))
        return sent[0]["status"] if sent else None, sent

    status, sent = call("/gradio_api/queue/join", [b"x" * 1001])
    assert status == 413 and b"at most 1,000" in sent[1]["body"] and seen == []
    assert call("/gradio_api/queue/join", [b"x" * 1000])[0] == 200 and seen == [1000]
    # streamed past the cap without a length: the app reads a disconnect, the client one 413 (it was an HTTP 500)
    status, sent = call("/gradio_api/queue/join", [b"x" * 600, b"x" * 600], length=False)
    assert status == 413 and b"over 1,000" in sent[1]["body"] and len(sent) == 2
    assert seen[-1] == "disconnect"
    assert call("/gradio_api/upload", [b"x" * 5000])[0] == 200 and seen[-1] == 5000
