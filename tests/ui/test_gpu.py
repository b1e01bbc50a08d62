"""A GPU Space: the heavy handlers (those taking gr.Progress) are wrapped with spaces.GPU, models go to the GPU of a GPU
Space; on a laptop and a CPU Space nothing changes. No GPU is needed: spaces is stood in, and the move is recorded."""
import types

import gradio as gr
import pytest

from core.zoo import device
from ui.gpu import heavy, on_gpu


def _app():
    with gr.Blocks() as demo:
        box, out = gr.Textbox(), gr.Textbox()

        def cheap(text):
            return text

        def long_work(text, progress=gr.Progress()):
            return text * 2

        def streaming(text, progress=gr.Progress()):
            yield text

        box.change(cheap, box, out, api_name="cheap")
        box.submit(long_work, box, out, api_name="long_work")
        box.blur(streaming, box, out, api_name="streaming")
    return demo


class FakeSpaces(types.SimpleNamespace):
    """``spaces`` as on ZeroGPU: ``GPU(duration=...)(fn)`` returns a wrapper marked ``zerogpu``."""

    def __init__(self):
        super().__init__(calls=[])

    def GPU(self, duration=None):
        def wrap(fn):
            def on_the_gpu(*args, **kwargs):
                self.calls.append(fn.__name__)
                return fn(*args, **kwargs)
            on_the_gpu.zerogpu = None
            on_the_gpu.duration = duration
            on_the_gpu.__wrapped__ = fn
            return on_the_gpu
        return wrap


def test_only_the_heavy_handlers_get_the_gpu_and_they_still_answer():
    demo, spaces = _app(), FakeSpaces()
    assert sorted(on_gpu(demo, spaces)) == ["long_work", "streaming"]
    fns = {f.api_name: f.fn for f in demo.fns.values()}
    assert not hasattr(fns["cheap"], "zerogpu") and fns["long_work"].duration == 120
    assert fns["long_work"]("ab") == "abab" and spaces.calls == ["long_work"]
    assert heavy(fns["long_work"])  # the wrapper keeps the signature, so Gradio still hands it a Progress
    assert on_gpu(demo, spaces) == []  # wrapped once


def test_without_spaces_nothing_is_wrapped_and_real_spaces_is_a_no_op_off_zerogpu(monkeypatch):
    demo = _app()
    before = {f.api_name: f.fn for f in demo.fns.values()}
    assert on_gpu(demo, None) == []  # a laptop: the spaces package is not loaded
    import spaces  # the real package, off ZeroGPU (SPACES_ZERO_GPU unset): GPU(fn) is fn
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    on_gpu(demo, spaces)
    assert {f.api_name: f.fn for f in demo.fns.values()} == before


def test_the_apps_heavy_handlers_are_the_long_work():
    from ui import build_app

    spaces = FakeSpaces()
    names = on_gpu(build_app(), spaces)
    for expected in ("lrp_explain_text", "lrp_evaluate", "mathneuro_effect", "mixln_live_train", "neuzip_tradeoff",
                     "open_link_computed"):
        assert expected in names, names
    for cheap in ("lrp_example", "neuzip_example", "open_link", "model_card", "dataset_sample"):
        assert cheap not in names


class Recorded:
    """A model whose moves are recorded."""

    def __init__(self):
        import torch
        self.param = torch.nn.Parameter(torch.zeros(1))
        self.moves = []

    def parameters(self):
        return iter([self.param])

    def to(self, where):
        self.moves.append(where)
        return self


@pytest.mark.parametrize("env,cuda,expected", [
    ({}, True, "cpu"),  # locally: the CPU even with a GPU (nothing changes)
    ({"SPACE_ID": "u/layerwise"}, False, "cpu"),  # a CPU Space
    ({"SPACE_ID": "u/layerwise"}, True, "cuda"),  # a GPU Space
    ({"SPACE_ID": "u/layerwise", "SPACES_ZERO_GPU": "true"}, False, "cuda"),  # ZeroGPU (the GPU comes per call)
    ({"SPACE_ID": "u/layerwise", "LAYERWISE_DEVICE": "cpu"}, True, "cpu"),
    ({"LAYERWISE_DEVICE": "cuda:1"}, False, "cuda:1"),
])
def test_models_run_on_the_gpu_of_a_gpu_space_only(monkeypatch, env, cuda, expected):
    import torch

    for var in ("SPACE_ID", "SPACES_ZERO_GPU", "LAYERWISE_DEVICE"):
        monkeypatch.delenv(var, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert device.model_device() == expected
    model = Recorded()
    loaded = types.SimpleNamespace(model=model)
    assert device.on_model_device(loaded) is loaded
    assert model.moves == ([] if expected == "cpu" else [expected])


def test_a_bad_device_setting_is_one_clear_message(monkeypatch):
    from core.errors import BadInputError

    monkeypatch.setenv("LAYERWISE_DEVICE", "tpu")
    with pytest.raises(BadInputError, match="LAYERWISE_DEVICE='tpu' is not a device"):
        device.model_device()
