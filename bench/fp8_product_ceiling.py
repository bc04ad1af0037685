"""How fast fp8 products can be at HY-Motion 1B's release shapes, apart from any cast (issue 38's "fp8 where it
pays"): each Linear product of one training step timed in bf16 (torch.mm) and in fp8 (torch._scaled_mm, the
cuBLASLt product zest's kernels/fp8_product_cuda.cpp calls), operands already cast. Prints one JSON line per
product and the step's totals, weighted by how often each product runs (9 double blocks, 18 single blocks).

    python3 bench/fp8_product_ceiling.py [--dim 1280] [--layers 27] [--batch 32] [--frames 360] [--text 128]

--tunable: every product timed again after turning on LibTorch's TunableOp, which times the cuBLAS/cuBLASLt
algorithms of each shape on its first call (the warm-up): what TunableOp would buy zest's products that go
through ATen (mm/addmm), under keys "tuned_…" in the same lines.
"""
import argparse
import json

import torch


def timed_ms(fn, repeats=20):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats


def products_of(rows, k, n):
    """The three products of a Linear k → n over `rows` tokens, bf16 and fp8, in ms."""
    dev = torch.device("cuda")
    x = torch.randn(rows, k, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) / k**0.5
    dy = torch.randn(rows, n, device=dev, dtype=torch.bfloat16)
    one = torch.ones((), device=dev)
    e4, e5 = torch.float8_e4m3fn, torch.float8_e5m2
    x8, w8 = x.to(e4), w.to(e4)
    wt8 = w.t().contiguous().to(e4)  # [k, n]: dY·W reads W with its rows as the reduced dimension
    dy8 = dy.to(e5)
    dyt8, xt8 = dy.t().contiguous().to(e5), x.t().contiguous().to(e4)  # dWᵀ = dYᵀ·X, both K-major
    out = {}
    out["forward_bf16"] = timed_ms(lambda: torch.mm(x, w.t()))
    out["forward_fp8_fast"] = timed_ms(
        lambda: torch._scaled_mm(x8, w8.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True))
    out["forward_fp8"] = timed_ms(
        lambda: torch._scaled_mm(x8, w8.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=False))
    out["input_grad_bf16"] = timed_ms(lambda: torch.mm(dy, w))
    out["input_grad_fp8"] = timed_ms(
        lambda: torch._scaled_mm(dy8, wt8.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=False))
    out["input_grad_fp8_fast"] = timed_ms(
        lambda: torch._scaled_mm(dy8, wt8.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True))
    out["weight_grad_bf16"] = timed_ms(lambda: torch.mm(dy.t(), x))
    out["weight_grad_fp8"] = timed_ms(
        lambda: torch._scaled_mm(dyt8, xt8.t(), one, one, out_dtype=torch.float32, use_fast_accum=False))
    # What the casts zest runs cost per product input: a bf16 matrix's absolute maximum and its cast.
    out["cast_x_amax_bf16"] = timed_ms(lambda: x.abs().amax())
    out["cast_x_to_fp8"] = timed_ms(lambda: x.to(e4))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dim", type=int, default=1280)
    p.add_argument("--layers", type=int, default=27)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--frames", type=int, default=360)
    p.add_argument("--text", type=int, default=128)
    p.add_argument("--tunable", action="store_true")
    a = p.parse_args()
    d, hidden = a.dim, 4 * a.dim
    doubles, singles = a.layers // 3, a.layers - a.layers // 3
    motion, text = a.batch * a.frames, a.batch * a.text
    # (name, rows, in, out, how many per step)
    shapes = [
        ("double.qkv", motion, d, 3 * d, doubles), ("double.qkv.text", text, d, 3 * d, doubles),
        ("double.out", motion, d, d, doubles), ("double.out.text", text, d, d, doubles),
        ("double.fc1", motion, d, hidden, doubles), ("double.fc1.text", text, d, hidden, doubles),
        ("double.fc2", motion, hidden, d, doubles), ("double.fc2.text", text, hidden, d, doubles),
        ("single.linear1", motion + text, d, 3 * d + hidden, singles),
        ("single.linear2", motion + text, d + hidden, d, singles),
    ]
    totals = {}
    results = [products_of(rows, k, n) for _, rows, k, n, _ in shapes]
    if a.tunable:
        try:
            torch.cuda.tunable.set_filename("/tmp/tunableop_results.csv")
            torch.cuda.tunable.write_file_on_exit(False)
            torch.cuda.tunable.set_max_tuning_duration(10)
            torch.cuda.tunable.enable(True)
            torch.cuda.tunable.tuning_enable(True)
            for r, (_, rows, k, n, _) in zip(results, shapes):
                tuned = products_of(rows, k, n)
                r.update({"tuned_" + key: v for key, v in tuned.items() if not key.startswith("cast")})
        except Exception as e:  # the untuned figures still print
            print(json.dumps({"tunableop_error": repr(e)}), flush=True)
    for (name, rows, k, n, count), r in zip(shapes, results):
        print(json.dumps({"product": name, "rows": rows, "in": k, "out": n, "per_step": count,
                          **{key: round(v, 4) for key, v in r.items()}}), flush=True)
        for key, v in r.items():
            totals[key] = totals.get(key, 0.0) + v * count
    print(json.dumps({"device": torch.cuda.get_device_name(), "step_totals_ms": {k: round(v, 2) for k, v in totals.items()}}))


if __name__ == "__main__":
    main()
