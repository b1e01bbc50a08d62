"""Triton kernels, each beside its plain-PyTorch ``*_ref`` twin. Never imports ``core``.

Every public op dispatches through :func:`kernels.dispatch.use_triton`: the Triton kernel on CUDA
tensors once it has passed its self-check against the twin on that device, the reference elsewhere.
Tests run the kernels on CPU under ``TRITON_INTERPRET=1``.
"""
