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
    assert not hasattr(fns["cheap"], "zerogpu") and callable(fns["long_work"].duration)
    assert fns["long_work"].duration("ab") == 120  # nothing in its inputs to size it by: the most a call asks for
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


@pytest.fixture(scope="module")
def app_on_gpu():
    from ui import build_app

    demo = build_app()
    return demo, on_gpu(demo, FakeSpaces())


@pytest.mark.slow  # over 5 s on the 2-core machine with the app it builds (docs/testing.md)
def test_each_call_asks_for_a_gpu_time_sized_from_its_inputs(app_on_gpu, monkeypatch):
    """ZeroGPU's duration callable gets the handler's own arguments: more methods, samples or steps ask for more
    seconds, a bigger model for more, nothing past the cap, and a call with nothing to size it by for the cap."""
    import ui.gpu as gpu

    demo, _ = app_on_gpu
    fns = {f.api_name: f.fn for f in demo.fns.values()}
    text = fns["lrp_explain_text"].duration
    rules = (True, True, True, True, None, ["ssm"])
    one, four = (text("mamba-sentiment", "A gorgeous film.", m, "top", *rules)
                 for m in (["mambalrp"], ["mambalrp", "gradient_x_input", "smoothgrad", "integrated_gradients"]))
    assert gpu.FLOOR_SECONDS < one < four < gpu.DEFAULT_SECONDS
    live = fns["mixln_live_train"].duration
    assert live("pre-ln", 0.25, 4, 20) < live("pre-ln", 0.25, 4, 150) <= gpu.DEFAULT_SECONDS
    small = fns["mixln_model_angular"].duration("mamba-lm", 4)
    big = fns["mixln_model_angular"].duration("smollm2-135m", 4)
    assert small < big  # SmolLM2's 135 M parameters against mamba-lm's few
    assert fns["open_link_computed"].duration("?tab=neuzip&example=bits&k=3") == gpu.DEFAULT_SECONDS
    assert fns["lrp_evaluate"].duration("mamba-sentiment", 150, 20, ["mambalrp"] * 8) == gpu.DEFAULT_SECONDS
    capped = gpu.gpu_seconds(lambda model, steps, progress=None: None, 30)
    assert capped("mamba-lm", 10_000) == 30 and capped("mamba-lm", 1) == gpu.FLOOR_SECONDS + 1


@pytest.mark.slow  # over 5 s on the 2-core machine with the app it builds (docs/testing.md)
def test_the_apps_heavy_handlers_are_the_long_work(app_on_gpu):
    demo, names = app_on_gpu
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
