#!/usr/bin/env python3
"""The shortest GPU check of the block-sparse attention's kernels (kernels/block_sparse_attention.cu), no zest build.

nvcc compiles the kernels' file alone, LibTorch's extension loader a small binding
(bench/block_sparse_attention_binding.cc). Then: the forward and the three gradients against float64 at
HY-Motion's mask, random tiled masks at every head dim 8-128, other lengths, a shared bias, an open mask and
rows closed whole (beside LibTorch's own 16-bit attention error for scale), and the release shape's timing
(32 x 488 positions, 20 heads of 64, bf16, HY-Motion's mask over bench-like valid lengths) beside LibTorch's
scaled_dot_product_attention over the same bias.

    python3 bench/block_sparse_attention_check.py [--timing-only]   (on the GPU machine, from the repository's root)

--timing-only skips the comparisons with float64 (tests/gpu/test_gpu_block_sparse_attention.cpp makes them too).
"""
import math
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.cpp_extension import load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOUNDS = {torch.bfloat16: (6e-3, 1e-2), torch.float16: (1e-3, 2e-3)}  # output, gradients (relative L2)


def build():
    work = "/tmp/bsa_check"
    os.makedirs(work, exist_ok=True)
    obj = os.path.join(work, "block_sparse_attention.o")
    t = time.time()
    subprocess.run(["/usr/local/cuda/bin/nvcc", "-std=c++20", "-arch=sm_90a", "-O3", "-Xcompiler", "-fPIC", "-I", ROOT,
                    "-c", os.path.join(ROOT, "kernels/block_sparse_attention.cu"), "-o", obj], check=True)
    module = load(name="zest_bsa_check", sources=[os.path.join(ROOT, "bench/block_sparse_attention_binding.cc")],
                  extra_include_paths=[ROOT, "/usr/local/cuda/include"], extra_ldflags=[obj], with_cuda=True, build_directory=work, verbose=False)
    print(f"built in {time.time() - t:.0f} s", flush=True)
    return module


def hy_bias(batch_lengths, motion, text, band, dtype):
    """HY-Motion's MMDiT bias (models/hymotion/attention_mask.cpp) [B, 1, S, S]."""
    s = motion + text
    i = torch.arange(s)[:, None]
    j = torch.arange(s)[None, :]
    rows = []
    for m_valid, t_valid in batch_lengths:
        allowed = torch.ones(s, s, dtype=torch.bool)
        allowed &= ~((i < motion) & (j < motion) & ((i - j).abs() > band))
        key_valid = ((j < motion) & (j < m_valid)) | ((j >= motion) & (j - motion < t_valid))
        allowed &= key_valid
        allowed &= ~((i >= motion) & (j < motion))
        rows.append(torch.zeros(s, s).masked_fill(~allowed, -math.inf))
    return torch.stack(rows)[:, None].to("cuda", dtype)


def tiled_bias(batch, sq, sk, gen, dtype):
    """Random 64 x 64 tiles: closed whole, all zero, or mixed (values in [-2, 2] and -inf); no row closed whole."""
    bias = torch.empty(batch, 1, sq, sk)
    for b in range(batch):
        for r0 in range(0, sq, 64):
            for c0 in range(0, sk, 64):
                kind = int(torch.randint(0, 3, (1,), generator=gen))
                tile = bias[b, 0, r0:r0 + 64, c0:c0 + 64]
                if kind == 0:
                    tile.fill_(-math.inf)
                elif kind == 1:
                    tile.zero_()
                else:
                    tile.uniform_(-2, 2, generator=gen)
                    tile.masked_fill_(torch.rand(tile.shape, generator=gen) < 0.3, -math.inf)
        rows = torch.arange(sq)
        bias[b, 0, rows, rows % sk] = 0.0
    return bias.to("cuda", dtype)


def reference(q, k, v, bias, grad):
    """float64 attention and its gradients; a row the bias closes whole gives zeros."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q64, k64) / math.sqrt(q.shape[-1]) + bias.double()
    closed = torch.isneginf(s).all(-1, keepdim=True)
    p = torch.softmax(s.masked_fill(closed, 0.0), -1).masked_fill(closed, 0.0)
    out = torch.einsum("bhqk,bkhd->bqhd", p, v64)
    out.backward(grad.double())
    return out.detach(), q64.grad, k64.grad, v64.grad


def rel(a, b):
    return ((a.double() - b).norm() / b.norm().clamp_min(1e-30)).item()


def check_case(ext, name, q, k, v, bias, gen, failures):
    grad = torch.randn(q.shape[0], q.shape[1], q.shape[2], q.shape[3], generator=gen).to("cuda", q.dtype)
    out, lse, tile_map = ext.forward(q, k, v, bias)
    dq, dk, dv = ext.backward(q, k, v, bias, tile_map, out, grad, lse)
    torch.cuda.synchronize()
    ref = reference(q, k, v, bias, grad)
    errors = [rel(out, ref[0]), rel(dq, ref[1]), rel(dk, ref[2]), rel(dv, ref[3])]
    sdpa = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                          attn_mask=bias).transpose(1, 2).nan_to_num(0.0)
    out_bound, grad_bound = BOUNDS[q.dtype]
    ok = errors[0] <= out_bound and max(errors[1:]) <= grad_bound and all(math.isfinite(e) for e in errors)
    counts = [int((tile_map == c).sum()) for c in range(3)]
    print(f"{'ok  ' if ok else 'FAIL'} {name}: out {errors[0]:.2e} dq {errors[1]:.2e} dk {errors[2]:.2e} "
          f"dv {errors[3]:.2e} (LibTorch's out {rel(sdpa, ref[0]):.2e}; tiles closed/zero/mixed {counts})", flush=True)
    if not ok:
        failures.append(name)


def strided_qkv(batch, s, heads, d, dtype, gen):
    qkv = torch.randn(batch, s, 3, heads, d, generator=gen).to("cuda", dtype)
    return qkv.unbind(2)


def correctness(ext):
    gen = torch.Generator().manual_seed(0)
    failures = []
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v = strided_qkv(3, 220, 4, 64, dtype, gen)
        check_case(ext, f"HY-Motion mask 3x220 {dtype}", q, k, v,
                   hy_bias([(150, 70), (97, 12), (31, 40)], 150, 70, 30, dtype), gen, failures)
    for d in range(8, 129, 8):
        for dtype in ((torch.bfloat16, torch.float16) if d in (40, 64, 128) else (torch.bfloat16,)):
            q, k, v = strided_qkv(2, 200, 2, d, dtype, gen)
            check_case(ext, f"tiled d={d} {dtype}", q, k, v, tiled_bias(2, 200, 200, gen, dtype), gen, failures)
    for sq, sk in ((70, 77), (200, 136)):
        q = torch.randn(2, sq, 3, 64, generator=gen).to("cuda", torch.bfloat16)
        kv = torch.randn(2, sk, 2, 3, 64, generator=gen).to("cuda", torch.bfloat16)
        check_case(ext, f"lengths {sq}x{sk}", q, kv[:, :, 0], kv[:, :, 1], tiled_bias(2, sq, sk, gen, torch.bfloat16),
                   gen, failures)
    q, k, v = strided_qkv(3, 150, 2, 64, torch.bfloat16, gen)
    shared = tiled_bias(1, 150, 150, gen, torch.bfloat16)
    check_case(ext, "shared bias", q, k, v, shared, gen, failures)
    check_case(ext, "expanded bias", q, k, v, shared.expand(3, 1, 150, 150), gen, failures)
    check_case(ext, "open mask", q, k, v, torch.zeros(3, 1, 150, 150, device="cuda", dtype=torch.bfloat16), gen,
               failures)
    closed = tiled_bias(3, 150, 150, gen, torch.bfloat16)
    closed[:, :, 5:9] = -math.inf
    closed[1, :, 100:140] = -math.inf
    check_case(ext, "rows closed whole", q, k, v, closed, gen, failures)
    return failures


def timed(fn, iters=20):
    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def release_timing(ext):
    gen = torch.Generator().manual_seed(1)
    batch, motion, text, heads, d = 32, 360, 128, 20, 64
    lengths = [(int(torch.randint(60, motion + 1, (1,), generator=gen)), int(torch.randint(8, text + 1, (1,), generator=gen)))
               for _ in range(batch)]
    bias = hy_bias(lengths, motion, text, 60, torch.bfloat16)
    q, k, v = strided_qkv(batch, motion + text, heads, d, torch.bfloat16, gen)
    grad = torch.randn(batch, motion + text, heads, d, generator=gen).to("cuda", torch.bfloat16)
    out, lse, tile_map = ext.forward(q, k, v, bias)
    counts = [int((tile_map == c).sum()) for c in range(3)]
    print(f"release shape {batch} x {motion + text}, {heads} heads of {d}: tiles closed/zero/mixed {counts}")
    fwd = timed(lambda: ext.forward(q, k, v, bias))
    print(f"tile map alone {timed(lambda: ext.tile_map(q, k, v, bias)):.3f} ms")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            ext.backward(q, k, v, bias, tile_map, out, grad, lse)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=60))
    bwd = timed(lambda: ext.backward(q, k, v, bias, tile_map, out, grad, lse))
    print(f"block-sparse: forward (with its tile map) {fwd:.3f} ms, backward {bwd:.3f} ms, "
          f"both {fwd + bwd:.3f} ms a call; x27 a step {27 * (fwd + bwd):.1f} ms", flush=True)
    qt, kt, vt = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))
    for backend in ("default", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        try:
            ctx = torch.nn.attention.sdpa_kernel(getattr(torch.nn.attention.SDPBackend, backend)) \
                if backend != "default" else torch.enable_grad()
            with ctx:
                o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=bias)
                g = grad.transpose(1, 2)
                f_ms = timed(lambda: F.scaled_dot_product_attention(qt, kt, vt, attn_mask=bias))
                fb_ms = timed(lambda: torch.autograd.grad(F.scaled_dot_product_attention(qt, kt, vt, attn_mask=bias),
                                                          (qt, kt, vt), g))
            print(f"LibTorch SDPA {backend}: forward {f_ms:.3f} ms, forward+backward {fb_ms:.3f} ms a call; "
                  f"x27 a step {27 * fb_ms:.1f} ms", flush=True)
        except Exception as e:  # a backend that refuses the bias
            print(f"LibTorch SDPA {backend}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")


def main():
    print(torch.__version__, torch.cuda.get_device_name(), flush=True)
    ext = build()
    failures = [] if "--timing-only" in sys.argv[1:] else correctness(ext)
    release_timing(ext)
    print("FAILED: " + ", ".join(failures) if failures else "all cases within bounds")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
