"""Each MambaLRP rule against its explicit formula (the slow way), and the hidden attention."""
import pytest
import torch
import torch.nn.functional as F

from core.lrp import LRPRules
from core.lrp.attention import hidden_attention
from core.lrp import rules as R
from core.lrp.attention import rollout
from core.lrp.mixer import causal_conv
from kernels.selective_scan import selective_scan_lrp_ref

pytestmark = pytest.mark.usefixtures("single_thread")

ON, OFF = LRPRules.mambalrp(), LRPRules.none()


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_silu_identity_rule_keeps_values_and_uses_sigmoid_as_gradient():
    x = _randn(5, 7).requires_grad_(True)
    y = R.silu(x, ON)
    assert torch.equal(y, F.silu(x))
    (g,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(g, torch.sigmoid(x).detach())
    torch.testing.assert_close((g * x).sum(), y.sum())  # relevance passes through unchanged
    (g_off,) = torch.autograd.grad(R.silu(x, OFF).sum(), x)
    assert not torch.allclose(g_off, g)


def test_gate_half_rule_gives_each_factor_half():
    y = _randn(4, 6, seed=1).requires_grad_(True)
    z = _randn(4, 6, seed=2).requires_grad_(True)
    s = R.gate(y, z, ON)
    assert torch.equal(s, y * z)
    gy, gz = torch.autograd.grad(s.sum(), [y, gz_ := z])
    torch.testing.assert_close(gy, z.detach() / 2)
    torch.testing.assert_close(gz, y.detach() / 2)
    torch.testing.assert_close(y * gy, (y * z).detach() / 2)  # s/2 to y
    torch.testing.assert_close(gz_ * gz, (y * z).detach() / 2)  # s/2 to the gate


def test_rms_norm_ln_rule_is_the_explicit_linear_map():
    x = _randn(3, 8, seed=3).requires_grad_(True)
    w, eps = _randn(8, seed=4), 1e-5
    out = R.rms_norm(x, w, eps, ON)
    expected = w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    torch.testing.assert_close(out, expected)
    v = _randn(3, 8, seed=5)
    (g,) = torch.autograd.grad((out * v).sum(), x)
    scale = torch.rsqrt(x.detach().pow(2).mean(-1, keepdim=True) + eps)
    torch.testing.assert_close(g, v * w * scale)  # normaliser constant: J = diag(w * scale)
    torch.testing.assert_close((g * x).sum(), (out * v).sum())


def test_layer_norm_ln_rule_is_the_explicit_linear_map():
    ln = torch.nn.LayerNorm(8)
    with torch.no_grad():
        ln.weight.copy_(_randn(8, seed=6))
        ln.bias.zero_()
    x = _randn(3, 8, seed=7).requires_grad_(True)
    out = R.layer_norm(x, ln, ON)
    assert torch.equal(out, ln(x))
    v = _randn(3, 8, seed=8)
    (g,) = torch.autograd.grad((out * v).sum(), x)
    xd = x.detach()
    std = torch.sqrt(xd.var(-1, unbiased=False, keepdim=True) + ln.eps)
    centre = torch.eye(8) - torch.full((8, 8), 1 / 8)  # x -> x - mean(x)
    explicit = torch.einsum("bj,ji->bi", v * ln.weight.detach() / std, centre)
    torch.testing.assert_close(g, explicit)
    torch.testing.assert_close((g * x).sum(), (out * v).sum(), rtol=1e-5, atol=1e-5)


def _gamma_explicit(x, w, b, gamma, grad_out):
    """Generalised LRP-gamma, loop by loop: R_i = sum_j c_ij / sum_i' c_i'j * z_j g_j (bias keeps b_j / ...)."""
    n_in, n_out = w.shape[1], w.shape[0]
    z = w @ x + (b if b is not None else 0)
    R_in = torch.zeros(n_in, dtype=torch.float64)
    for j in range(n_out):
        contrib = [x[i] * w[j, i] for i in range(n_in)]
        if z[j] > 0:
            mod = [c + gamma * max(c, 0.0) for c in contrib]
        else:
            mod = [c + gamma * min(c, 0.0) for c in contrib]
        denom = sum(mod) + (b[j] if b is not None else 0.0)
        for i in range(n_in):
            R_in[i] += mod[i] / denom * z[j] * grad_out[j]
    return R_in


def test_linear_gamma_rule_matches_the_explicit_formula():
    lin = torch.nn.Linear(6, 5).double()
    x = _randn(6, seed=9).double().requires_grad_(True)
    g_out = _randn(5, seed=10).double()
    for gamma in (0.0, 0.25, 1.0):
        out = R.linear(x, lin, gamma)
        assert torch.equal(out, lin(x))
        (g,) = torch.autograd.grad((out * g_out).sum(), x)
        explicit = _gamma_explicit(x.detach(), lin.weight.detach(), lin.bias.detach(), gamma, g_out)
        torch.testing.assert_close(x.detach() * g, explicit)


def test_conv_gamma_rule_matches_the_explicit_formula():
    conv = torch.nn.Conv1d(3, 3, 3, groups=3, padding=2, bias=False).double()
    x = _randn(1, 3, 5, seed=11).double().requires_grad_(True)
    g_out = _randn(1, 3, 5, seed=12).double()
    out = causal_conv(x, conv, 0.25)
    assert torch.equal(out, causal_conv(x, conv))
    (g,) = torch.autograd.grad((out * g_out).sum(), x)
    # explicit: each channel is a causal Toeplitz linear map
    for d in range(3):
        w = torch.zeros(5, 5, dtype=torch.float64)
        for t in range(5):
            for k in range(3):
                s = t - 2 + k
                if s >= 0:
                    w[t, s] = conv.weight[d, 0, k]
        explicit = _gamma_explicit(x[0, d].detach(), w, None, 0.25, g_out[0, d])
        torch.testing.assert_close(x[0, d].detach() * g[0, d], explicit)


def test_hidden_attention_reproduces_the_scan_and_its_gradient():
    g = torch.Generator().manual_seed(13)
    batch, channels, length, state = 2, 4, 7, 3
    u = torch.randn(batch, channels, length, generator=g).requires_grad_(True)
    delta = F.softplus(torch.randn(batch, channels, length, generator=g))
    A = -(torch.rand(channels, state, generator=g) + 0.5)
    B = torch.randn(batch, state, length, generator=g)
    C = torch.randn(batch, state, length, generator=g)
    D = torch.randn(channels, generator=g)
    y = selective_scan_lrp_ref(u, delta, A, B, C, D)
    alpha = hidden_attention(delta, A, B, C)  # (B, D, L, L)
    assert torch.all(alpha.triu(1) == 0)
    y_alpha = torch.einsum("bdts,bds->bdt", alpha, u.detach()) + D[None, :, None] * u.detach()
    torch.testing.assert_close(y.detach(), y_alpha, rtol=1e-4, atol=1e-5)
    w = torch.randn(batch, channels, length, generator=g)
    (gu,) = torch.autograd.grad((y * w).sum(), u)
    torch.testing.assert_close(gu, torch.einsum("bdts,bdt->bds", alpha, w) + D[None, :, None] * w,
                               rtol=1e-4, atol=1e-5)


def test_rule_presets():
    assert LRPRules.mambalrp(0.25).gamma_conv == 0.25 and LRPRules.mambalrp().gamma_in_proj == 0.0
    ln = LRPRules.ln_only()
    assert ln.norm and not (ln.silu or ln.ssm or ln.gate)
    assert not any([OFF.silu, OFF.ssm, OFF.gate, OFF.norm])
    assert ON.with_options(gate=False).gate is False


def test_rollout_is_the_product_of_row_normalised_layers_with_identity():
    a1 = torch.tensor([[1.0, 0.0], [2.0, 1.0]])
    a2 = torch.tensor([[0.0, 0.0], [1.0, 3.0]])
    eye = torch.eye(2)
    n1 = (a1 + eye) / (a1 + eye).sum(-1, keepdim=True)
    n2 = (a2 + eye) / (a2 + eye).sum(-1, keepdim=True)
    torch.testing.assert_close(rollout([a1, a2]), n2 @ n1)
    torch.testing.assert_close(rollout([a1, a2]).sum(-1), torch.ones(2))


def test_mixer_relevance_equals_explicit_lrp0_propagation():
    """One MambaMixer, all rules, LRP-0: gradient x input == the z-rule applied layer by layer by hand."""
    from transformers import MambaConfig
    from transformers.models.mamba.modeling_mamba import MambaMixer

    from core.lrp.mixer import mamba_mixer_forward

    torch.manual_seed(0)
    cfg = MambaConfig(hidden_size=4, state_size=3, expand=2, conv_kernel=3, use_conv_bias=False, time_step_rank=2)
    mixer = MambaMixer(cfg, layer_idx=0).eval()
    with torch.no_grad():
        mixer.conv1d.weight.normal_(0, 0.5)
    length, inner = 5, 8
    h = _randn(1, length, 4, seed=20).requires_grad_(True)
    v = _randn(1, length, 4, seed=21)  # explained output: sum(out * v)
    record = []
    out = mamba_mixer_forward(mixer, h, ON, record)
    (g,) = torch.autograd.grad((out * v).sum(), h)
    fast = (h * g).detach()[0]  # (L, H)

    # --- the slow way, on the values of the forward pass ---
    with torch.no_grad():
        hd = h[0]
        xz = hd @ mixer.in_proj.weight.T  # (L, 2*inner)
        x, z = xz[:, :inner], xz[:, inner:]
        w = mixer.conv1d.weight[:, 0]  # (inner, K)
        conv = torch.zeros(length, inner)
        for t in range(length):
            for k in range(3):
                s = t - 2 + k
                if s >= 0:
                    conv[t] += w[:, k] * x[s]
        u = F.silu(conv)
        rec = record[0]
        alpha = hidden_attention(rec.delta, rec.A, rec.B, rec.C)[0]  # (inner, L, L)
        y = torch.einsum("dts,sd->td", alpha, u) + rec.D * u
        gz = F.silu(z)
        s_gate = y * gz
        o = s_gate @ mixer.out_proj.weight.T
        R_o = o * v[0]
        # out_proj, z-rule: R_s[t, d] = sum_j s[t, d] W[j, d] / o[t, j] * R_o[t, j]
        R_s = torch.einsum("td,jd,tj->td", s_gate, mixer.out_proj.weight, R_o / o)
        R_y, R_gz = R_s / 2, R_s / 2  # gate: half rule
        R_z = R_gz  # SiLU: identity rule
        # scan (A_bar, B_bar, C constant): y_t = sum_s (alpha[t, s] + D [t == s]) u_s
        M = alpha + torch.diag_embed(rec.D[:, None].expand(inner, length))  # (d, t, s)
        R_u = torch.einsum("dts,sd,td->sd", M, u, R_y / y)
        R_conv = R_u  # SiLU: identity rule
        R_x = torch.zeros(length, inner)
        for t in range(length):
            for k in range(3):
                s = t - 2 + k
                if s >= 0:
                    R_x[s] += w[:, k] * x[s] / conv[t] * R_conv[t]
        R_xz = torch.cat([R_x, R_z], dim=1)
        slow = torch.einsum("ti,ji,tj->ti", hd, mixer.in_proj.weight, R_xz / xz)
    torch.testing.assert_close(fast, slow, rtol=1e-3, atol=1e-5)
    torch.testing.assert_close(fast.sum(), (out * v).sum().detach(), rtol=1e-5, atol=1e-6)
