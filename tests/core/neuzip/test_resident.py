"""LOMO + NeuZip with the weights kept compressed on their device (core.neuzip.resident; the kernels' PyTorch twins
stand in for a GPU): the resident stream is the CPU encoder's, an update is re-encoded in place and decodes to the
updated weight, a stream that outgrows its buffers keeps the old weight and is reported at the step's check (which
grows the buffers), the compressed layer's backward and update are autograd's and LOMO's, training is LOMO's bit for
bit, and neither the forward nor the backward with its re-encodes reads anything back from the device."""
import numpy as np
import pytest
import torch

import core.neuzip.lomo as lomo
import core.neuzip.resident as resident
from core.neuzip import training
from core.neuzip.codec import compress
from core.neuzip.lomo import ZipLinear, ZipState, fused_sgd_, zip_linears
from core.neuzip.resident import ResidentStream, check_streams
from tests.syncs import HostSyncs

pytestmark = pytest.mark.usefixtures("single_thread")


def _weight(rows=48, cols=80, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (0.05 * torch.randn(rows, cols, generator=g)).to(torch.bfloat16)


def _same_arrays(a, b):
    x, y = a.arrays(), b.arrays()
    assert set(x) == set(y)
    for key in x:
        assert np.array_equal(x[key], y[key]), key


def test_a_resident_weight_is_the_cpu_encoders_stream_and_decodes_to_it():
    w = _weight()
    w[3, 4] = float("inf")  # an escape
    stream = ResidentStream(w, chunk_size=64)
    _same_arrays(stream.to_compressed(), compress(w, chunk_size=64))
    assert torch.equal(stream.decode().view(torch.int16), w.view(torch.int16))
    out = torch.empty_like(w)
    assert stream.decode(out=out).data_ptr() == out.data_ptr() and torch.equal(out.view(torch.int16),
                                                                              w.view(torch.int16))
    assert stream.words.numel() - 1 > int(stream.offsets[-1])  # the headroom


def test_an_update_is_reencoded_in_place_and_one_that_does_not_fit_keeps_the_old_weight():
    w = _weight(seed=1)
    stream = ResidentStream(w, chunk_size=64)
    words = stream.words
    new = (w.float() * 1.01).to(torch.bfloat16)
    stream.reencode(new)
    assert stream.words is words  # the same buffer, written on the device
    _same_arrays(stream.to_compressed(), compress(new, chunk_size=64))
    assert torch.equal(stream.decode().view(torch.int16), new.view(torch.int16))
    assert check_streams([stream])["grown"] == []
    bits = torch.randint(-2**15, 2**15, (48, 80), generator=torch.Generator().manual_seed(2), dtype=torch.int32)
    wild = bits.to(torch.int16).view(torch.bfloat16)  # exponents all over: ~94 % escapes, far beyond the room kept
    stream.reencode(wild)
    assert torch.equal(stream.decode().view(torch.int16), new.view(torch.int16))  # unchanged
    with pytest.raises(RuntimeError, match="outgrew"):
        check_streams([stream], ["layer 0"])
    stream.reencode(wild)  # grown at the check to what it needed: it fits now
    assert check_streams([stream])["grown"] == [] and stream.fails == 1
    assert torch.equal(stream.decode().view(torch.int16), wild.view(torch.int16))


def test_a_corrupt_decode_on_the_device_is_raised_at_the_check():
    stream = ResidentStream(_weight(seed=3), chunk_size=64)
    flag = torch.zeros(1, dtype=torch.int32)
    stream.states[3, 2] += 1  # a chunk that starts from the wrong state
    stream.decode(errors=flag)
    with pytest.raises(ValueError, match="corrupt"):
        check_streams([stream], errors=flag)
    assert int(flag) == 0


@pytest.mark.parametrize("bias", [False, True])
def test_the_resident_layer_is_autograd_and_lomos_update(bias, monkeypatch):
    monkeypatch.setattr(resident, "CPU_CHUNK", 64)
    torch.manual_seed(1)
    lin = torch.nn.Linear(48, 80, bias=bias).bfloat16()
    x = torch.randn(3, 5, 48, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(3, 5, 80, dtype=torch.bfloat16)
    state = ZipState(lr=0.1, on_device=True)
    z = ZipLinear(lin.weight.detach(), lin.bias, state)
    assert z.resident is not None and z.compressed is None and state.resident == [z]
    x2 = x.detach().clone().requires_grad_(True)
    y_ref = lin(x)
    y_ref.backward(g)
    want = lin.weight.detach().clone()
    fused_sgd_(want, lin.weight.grad, 0.1)
    y = z(x2)
    y.backward(g)
    state.wait()  # the step's check
    assert torch.equal(y, y_ref) and torch.equal(x2.grad, x.grad)
    assert torch.equal(z.decoded(), want)
    _same_arrays(z.resident.to_compressed(), compress(want, chunk_size=64))


@pytest.mark.slow
def test_lomo_neuzip_on_the_device_path_trains_as_lomo_bit_for_bit(monkeypatch):
    monkeypatch.setattr(lomo, "RESIDENT", True)
    monkeypatch.setattr(resident, "CPU_CHUNK", 64)
    settings = training.TrainSettings(steps=2, batch=2, seq=16, track_steps=0)
    batches = torch.randint(0, 4096, (2, 2, 16), generator=torch.Generator().manual_seed(0))
    run = training.train_modes("tiny-llama", ["lomo", "lomo+neuzip"], settings, batches=batches)
    assert run["identical"] == {"lomo+neuzip vs lomo": {"losses": True, "weights": True}}


class _Stack(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(32, 32, bias=False) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.mark.slow
def test_a_resident_step_reads_nothing_back_per_layer(monkeypatch):
    """The meta device stands in for a GPU: the forward and the backward of two layers, with every layer's decode,
    fused update and re-encode, make no host sync; the step's check is the one read (counted separately)."""
    monkeypatch.setattr(resident, "CPU_CHUNK", 64)
    counts = {}
    for layers in (2,):
        with HostSyncs(answer=True):  # the streams' creation sizes their buffers: one read each, at setup
            net = _Stack(layers).to(torch.bfloat16).to("meta")
            state = zip_linears(net, lr=0.1, on_device=True)
        x = torch.empty(4, 32, dtype=torch.bfloat16, device="meta")
        with HostSyncs(answer=True) as syncs:
            net(x).float().pow(2).sum().backward()
        counts[layers] = syncs.count
        with HostSyncs(answer=True) as check:
            try:
                state.wait()
            except RuntimeError:  # the placeholders read back are zeros: "did not fit"
                pass
        assert check.count == 1, check.report()
    assert counts == {2: 0}
