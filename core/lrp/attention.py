"""Hidden attention of Mamba (Ali, Zimerman and Wolf, 2024) and the two baselines built on it; in a hybrid, the
attention layers' softmax joins the rollout in layer order.

A selective scan is a data-controlled linear map ``y_t = sum_{s<=t} alpha[t, s] u_s + D u_t`` with

    alpha[d, t, s] = C_t . (prod_{k=s+1..t} A_bar_k[d]) . B_bar_s[d]     (one matrix per channel d)

where ``A_bar = exp(delta A)`` and ``B_bar = delta B``. The product telescopes to
``exp(A (cum_t - cum_s))`` with ``cum`` the running sum of ``delta``, which is computed chunk by chunk
over channels so only ``(L, L)`` matrices are kept.
"""
from __future__ import annotations

import torch

from core.lrp.mixer import ScanRecord
from core.progress import Progress, report, scaled


def hidden_attention(delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """Per-channel hidden attention matrices of one scan.

    Parameters
    ----------
    delta : (Bt, D, L) time steps after bias and softplus.
    A : (D, N); B, C : (Bt, N, L).

    Returns
    -------
    alpha : (Bt, D, L, L), zero above the diagonal (``alpha[..., t, s] = 0`` for ``s > t``).
    """
    delta, A, B, C = delta.float(), A.float(), B.float(), C.float()
    length = delta.shape[-1]
    cum = delta.cumsum(-1)  # (Bt, D, L)
    gap = cum[..., :, None] - cum[..., None, :]  # (Bt, D, t, s) = sum_{k=s+1..t} delta_k for s <= t
    causal = torch.ones(length, length, dtype=torch.bool, device=delta.device).tril()
    gap = torch.where(causal, gap, torch.zeros_like(gap))
    decay = torch.exp(gap[..., None] * A[None, :, None, None, :])  # (Bt, D, t, s, N)
    # C_t[n] * decay * delta_s * B_s[n], summed over n
    alpha = torch.einsum("btn,bdtsn,bsn->bdts", C.transpose(1, 2), decay, B.transpose(1, 2))
    alpha = alpha * delta[:, :, None, :]
    return torch.where(causal, alpha, torch.zeros_like(alpha))


def channel_mean_attention(record: ScanRecord, positive: bool = False, max_elements: int = 1 << 24,
                           progress: Progress | None = None, what: str = "hidden attention"
                           ) -> tuple[torch.Tensor, float]:
    """Hidden attention of one scan averaged over channels, for batch element 0.

    Parameters
    ----------
    record : the scan.
    positive : average ``alpha.clamp(min=0)`` (Mamba-Attribution) instead of ``|alpha|`` (rollout).
    progress : optional ``progress(fraction, what)``, called after each chunk of channels (the work is
        ``O(D N L^2)``).

    Returns
    -------
    mean : (L, L) in the original (unflipped) token order.
    peak : the largest single-channel entry (for min-max normalisation; the minimum is 0).
    """
    delta, B, C = record.delta[:1], record.B[:1], record.C[:1]
    channels, length = delta.shape[1], delta.shape[2]
    state = record.A.shape[-1]
    chunk = max(1, max_elements // max(1, length * length * state))
    total = torch.zeros(length, length, dtype=torch.float32, device=delta.device)
    peak = 0.0
    for start in range(0, channels, chunk):
        sl = slice(start, start + chunk)
        alpha = hidden_attention(delta[:, sl], record.A[sl], B, C)[0]  # (d, L, L)
        alpha = alpha.clamp(min=0) if positive else alpha.abs()
        peak = max(peak, float(alpha.max()))
        total += alpha.sum(0)
        report(progress, min(start + chunk, channels) / channels, what)
    total = total / channels
    if record.flipped:
        total = total.flip(0, 1)
    return total, peak


def gradient_weights(record: ScanRecord, grad_y: torch.Tensor) -> torch.Tensor:
    """Per-token weight ``max_d clamp(dlogit/dy[d, s], 0)`` of one scan, min-max normalised; (L,)."""
    s = grad_y[0].float().clamp(min=0).amax(0)
    if record.flipped:
        s = s.flip(0)
    return _minmax(s)


def _minmax(x: torch.Tensor) -> torch.Tensor:
    span = x.max() - x.min()
    return (x - x.min()) / span if span > 0 else torch.zeros_like(x)


def layer_attention(records: list[ScanRecord], grads: list[torch.Tensor] | None = None,
                    progress=None, attention: list | None = None,
                    attention_grads: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """One ``(L, L)`` matrix per mixer layer, in layer order; the branches of a bidirectional mixer are averaged.

    Without ``grads``: the channel mean of ``|alpha|`` (Attention Rollout input). With ``grads`` (the
    gradient of the explained logit w.r.t. each record's ``y``): Mamba-Attribution as in Ali et al.'s
    code, ``minmax(mean_d alpha^+)`` with each source-token column weighted by the min-max normalised
    clamped gradient. ``progress(fraction, message)``, if given, is called as the scans' channels are done (it may
    raise to stop the work).

    ``attention``: ``(layer, probs (B, h, L, L))`` of a hybrid's attention layers (:func:`core.lrp.blocks.
    attention_function`), ordered with the scans by layer: the head mean of the softmax (rollout), or with
    ``attention_grads`` (the gradient w.r.t. each ``probs``) the head mean of ``(grad * probs)^+`` (Chefer et al.,
    2021, the attention counterpart of Mamba-Attribution).
    """
    by_layer: dict[int, list[torch.Tensor]] = {}
    for i, rec in enumerate(records):
        step = {"progress": scaled(progress, i / len(records), (i + 1) / len(records)),
                "what": f"hidden attention: scan {i + 1} of {len(records)}"}
        if grads is None:
            mat, _ = channel_mean_attention(rec, **step)
        else:
            mean, peak = channel_mean_attention(rec, positive=True, **step)
            mat = (mean / peak if peak > 0 else mean) * gradient_weights(rec, grads[i])[None, :]
        by_layer.setdefault(rec.layer, []).append(mat)
    for i, (layer, probs) in enumerate(attention or []):
        p = probs.detach()[0].float()
        if attention_grads is None:
            mat = p.mean(0)
        else:
            mat = _minmax((attention_grads[i][0].float() * p).clamp(min=0).mean(0))
        by_layer.setdefault(layer, []).append(mat)
    return [torch.stack(mats).mean(0) for _, mats in sorted(by_layer.items())]


def rollout(mats: list[torch.Tensor]) -> torch.Tensor:
    """Attention Rollout (Abnar and Zuidema, 2020): ``prod_l rownorm(A_l + I)``, first layer first.

    ``mats`` are non-negative ``(L, L)`` layer matrices. Returns ``(L, L)``; every row sums to 1.
    """
    length = mats[0].shape[-1]
    eye = torch.eye(length, dtype=mats[0].dtype, device=mats[0].device)
    result = eye
    for a in mats:
        a = a + eye
        result = (a / a.sum(-1, keepdim=True)) @ result
    return result
