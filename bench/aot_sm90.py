"""Compile the project's Triton kernels for a Hopper GPU (sm_90: H100, H200) on a machine WITHOUT one, and print what
the compiler made of them: registers, spills, shared memory, barriers, global loads and cp.async per kernel.

    python bench/aot_sm90.py                        # the defaults: the scan's tiles (forward and backward),
                                                    # the decode block (its four modes), the encoder's two passes
    python bench/aot_sm90.py scan 8x32,4x32 --stages 1,2
    python bench/aot_sm90.py rans 4,8,32
    python bench/aot_sm90.py encode 4,8
    python bench/aot_sm90.py --json                 # one JSON object per kernel

Triton's ahead-of-time path (``GPUTarget("cuda", 90, 32)``), its bundled ``ptxas`` and ``cuobjdump``: no device, no
device time. Run it under the device's Triton too (3.6 on the lent H100s: put its wheel, unzipped, first on
PYTHONPATH) to know the kernels compile there. Registers above 255 per thread, or any spill (``STACK`` > 0,
``LDL``/``STL`` in the SASS), rule a tile out: :data:`kernels.selective_scan.TILES` lists only tiles that compile
without spills on sm_90 (``bench/gpu.py`` times them; the dispatcher picks the fastest per device).
The kernels' argument types come from their parameter names (``*_ptr`` pointers, the rest integers), so a new
argument needs a line here only when its type is not the default.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TARGET = ("cuda", 90, 32)


def _tool(name: str) -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def _signature(jit, pointers: dict, ints: dict | None = None) -> dict:
    """Argument types by name: ``pointers`` for ``*_ptr`` (default ``*fp32``), ``ints`` for others (default i32)."""
    ints = ints or {}
    sig = {}
    for name in jit.arg_names:
        if name.endswith("_ptr"):
            sig[name] = pointers.get(name, "*fp32")
        else:
            sig[name] = ints.get(name, "i32")
    return sig


def compile_one(jit, signature: dict, constants: dict, label: str, num_warps: int = 4, num_stages: int = 3,
                sass_dir: str | None = None) -> dict:
    """Compile ``jit`` for sm_90 with ``constants`` (constexpr values) and describe the result."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = jit.arg_names
    sig = {n: ("constexpr" if n in constants else signature.get(n, "i32")) for n in names}
    constexprs = {(names.index(k),): v for k, v in constants.items()}
    t0 = time.time()
    info = {"label": label, "num_warps": num_warps, "num_stages": num_stages}
    try:
        compiled = triton.compile(ASTSource(fn=jit, signature=sig, constexprs=constexprs),
                                  target=GPUTarget(*TARGET), options={"num_warps": num_warps,
                                                                      "num_stages": num_stages})
    except Exception as exc:  # a kernel that does not compile for sm_90 is what this is for
        info.update(ok=False, error=f"{type(exc).__name__}: {str(exc)[:1500]}", s=round(time.time() - t0, 1))
        return info
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        with open(cubin, "wb") as f:
            f.write(compiled.asm["cubin"])
        res = subprocess.run([_tool("cuobjdump"), "-res-usage", cubin], capture_output=True, text=True).stdout
        sass = subprocess.run([_tool("cuobjdump"), "-sass", cubin], capture_output=True, text=True).stdout
    fields = dict(part.split(":", 1) for line in res.splitlines() if "REG:" in line for part in line.split()
                  if ":" in part)
    if sass_dir:
        with open(os.path.join(sass_dir, label.replace(" ", "_").replace("=", "") + ".sass"), "w") as f:
            f.write(sass)
    info.update(ok=True, s=round(time.time() - t0, 1), registers=int(fields.get("REG", -1)),
                stack=int(fields.get("STACK", -1)), shared=int(compiled.metadata.shared),
                spill_ops=sass.count("LDL") + sass.count("STL"), barriers=sass.count("BAR.SYNC"),
                global_loads=sass.count("LDG"), cp_async=sass.count("LDGSTS"), shuffles=sass.count("SHFL"),
                instructions=sum(1 for line in sass.splitlines() if line.lstrip().startswith("/*") and "*/" in line
                                 and line.split("*/", 1)[1].strip().rstrip(";").strip() not in ("", "}")))
    info["spills"] = bool(info["stack"] > 0 or info["spill_ops"] > 0)
    return info


def scan(tiles: list[tuple[int, int]], stages: list[int | None], sass_dir=None) -> list[dict]:
    """The MambaLRP scan, forward and relevance backward, float32 inputs, N = 16, per (BLOCK_D, CHUNK) tile and
    pipelining depth (None: the kernel's own :data:`kernels.selective_scan.STAGES`)."""
    from kernels.selective_scan import STAGES, WARPS, scan_kernel

    from triton.runtime.jit import JITFunction

    jit = scan_kernel()
    while not isinstance(jit, JITFunction):  # heuristics / autotune wrappers around the JITFunction
        jit = jit.fn
    sig = _signature(jit, {})
    rows = []
    for reverse in (False, True):
        for block_d, chunk in tiles:
            for depth in stages:
                depth = STAGES if depth is None else depth
                consts = dict(REVERSE=reverse, DELTA_SOFTPLUS=True, HAS_D=True, HAS_DELTA_BIAS=True, BLOCK_D=block_d,
                              BLOCK_N=16, CHUNK=chunk, PIPELINE=depth)
                consts = {k: v for k, v in consts.items() if k in jit.arg_names}
                rows.append(compile_one(jit, sig, consts, f"scan {'bwd' if reverse else 'fwd'} {block_d}x16x{chunk} "
                                        f"stages={depth}", num_warps=WARPS, num_stages=depth, sass_dir=sass_dir))
    return rows


RANS_MODES = {  # mode: (the kernel's constexprs, its pointer types beyond the decode's)
    "decode": (dict(GEMV=False, MERGE=False), {}),
    "merge": (dict(GEMV=False, MERGE=True), {"out_ptr": "*i32", "fields_ptr": "*u8", "vec_ptr": "*i32"}),
    "merge flags": (dict(GEMV=False, MERGE=True, ESC_FLAGS=True),  # a weight re-encoded on the device (no marker)
                    {"out_ptr": "*i32", "fields_ptr": "*u8", "vec_ptr": "*i32"}),
    "gemv": (dict(GEMV=True, MERGE=False), {"out_ptr": "*fp32", "fields_ptr": "*u8", "vec_ptr": "*fp32"}),
}


def rans(blocks: list[int], sass_dir=None) -> list[dict]:
    """The NeuZip exponent decode, per segments-per-program ``block``, in its three modes: the exponents alone, fused
    with the bit merge (the app's lossless decode on CUDA), fused with a matrix-vector product."""
    import kernels.neuzip_rans as R

    jit = R.decode_kernel()
    pointers = {"states_ptr": "*i64", "offsets_ptr": "*i64", "words_ptr": "*i32", "slot_ptr": "*u8",
                "info_ptr": "*i64", "escapes_ptr": "*u8", "escape_offsets_ptr": "*i64", "out_ptr": "*i16",
                "err_ptr": "*i32", "fields_ptr": "*i16", "vec_ptr": "*i16"}
    rows = []
    for mode, (flags, types) in RANS_MODES.items():
        sig = _signature(jit, {**pointers, **types})
        for block in blocks:
            rows.append(compile_one(jit, sig, dict(PRECISION=15, LANES_=8, BLOCK=block, **flags),
                                    f"rans {mode} block={block}", num_warps=R.decode_warps(block), sass_dir=sass_dir))
    return rows


def encode(blocks: list[int], sass_dir=None) -> list[dict]:
    """The NeuZip encoder's rANS kernel (kernels.neuzip_encode), per chunks-per-program ``block``, its two passes:
    the final states and word counts, then the words written in decoding order."""
    import kernels.neuzip_encode as E

    jit = E.encode_kernel()
    pointers = {"e_ptr": "*u8", "words_ptr": "*i32", "allowed_ptr": "*i32",
                **{name: "*i64" for name in ("lookup_ptr", "freq_ptr", "cdf_ptr", "alpha_ptr", "pad_ptr", "states_ptr",
                                             "totals_ptr", "offsets_ptr")}}
    rows = []
    for write in (False, True):
        sig = _signature(jit, {**pointers, **({} if write else {"allowed_ptr": "*i64"})})
        for block in blocks:
            rows.append(compile_one(jit, sig, dict(PRECISION_=15, LANES_=8, BLOCK=block, WRITE=write),
                                    f"encode {'write' if write else 'count'} block={block}",
                                    num_warps=max(1, min(4, block * 8 // 32)), sass_dir=sass_dir))
    return rows


COLUMNS = ("label", "num_warps", "registers", "stack", "spill_ops", "shared", "barriers", "global_loads", "cp_async",
           "instructions")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("which", nargs="?", choices=("all", "scan", "rans", "encode"), default="all")
    ap.add_argument("values", nargs="?", default="",
                    help="scan: BLOCK_DxCHUNK tiles (default: kernels.selective_scan.TILES); rans: blocks (default: "
                         "kernels.neuzip_rans.DECODE_ROWS); encode: blocks (default: kernels.neuzip_encode.ENCODE_ROWS)")
    ap.add_argument("--stages", default="", help="scan: pipelining depths to compile (default: the kernel's)")
    ap.add_argument("--json", action="store_true", help="one JSON object per kernel instead of the table")
    ap.add_argument("--sass-dir", default=os.environ.get("SASS_DIR"), help="also write each kernel's SASS there")
    args = ap.parse_args(argv)
    try:
        import triton  # noqa: F401
    except Exception as exc:
        print(f"bench/aot_sm90.py: triton does not import ({exc}); pip install -r requirements.txt", file=sys.stderr)
        return 2
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when unset; 3.6 fuses by default
    os.environ["LAYERWISE_TRITON_AOT"] = "1"  # the kernels define their Triton functions without a GPU here
    from kernels.selective_scan import TILES
    from kernels.neuzip_rans import DECODE_ROWS

    rows = []
    if args.which in ("all", "scan"):
        tiles = [tuple(map(int, t.split("x"))) for t in args.values.split(",")] if args.which == "scan" and \
            args.values else list(TILES)
        stages = [int(s) for s in args.stages.split(",")] if args.stages else [None]
        rows += scan(tiles, stages, args.sass_dir)
    if args.which in ("all", "rans"):
        blocks = [int(b) for b in args.values.split(",")] if args.which == "rans" and args.values else [DECODE_ROWS]
        rows += rans(blocks, args.sass_dir)
    if args.which in ("all", "encode"):
        from kernels.neuzip_encode import ENCODE_ROWS

        blocks = [int(b) for b in args.values.split(",")] if args.which == "encode" and args.values else [ENCODE_ROWS]
        rows += encode(blocks, args.sass_dir)
    import triton

    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        print(f"Triton {triton.__version__}, sm_90 (ahead of time, no device)")
        print(" | ".join(COLUMNS + ("spills",)))
        for row in rows:
            if not row["ok"]:
                print(f"{row['label']} | DOES NOT COMPILE: {row['error'][:300]}")
                continue
            print(" | ".join(str(row[c]) for c in COLUMNS) + f" | {'YES' if row['spills'] else 'no'}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
