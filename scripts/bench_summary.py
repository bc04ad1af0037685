#!/usr/bin/env python3
"""One line per `zest bench` JSON result (stdin or files): model, GPUs, stage, checkpointing, step time,
throughput, MFU, peak memory, exposed communication, model state against the formula, the pipelined step
time where the run has it; with --profile,
also the heaviest launching operators of a profiled run (`zest bench --profile`)."""
import json
import sys


def line(d):
    s = d["step_ms"]
    state = d["model_state_bytes"] / d["model_state_formula_bytes"] - 1
    return (f"{d['model']:12s} N={d['world_size']} stage={d['stage']} ac={d['activation_checkpointing']:5s} "
            f"{s['median']:8.1f} ms [{s['min']:.0f}-{s['max']:.0f}] {d['samples_per_s']:6.1f} samples/s/GPU "
            f"MFU {d['mfu'] * 100:4.1f}% alloc {d['peak_allocated_gib']:5.1f} GiB res {d['peak_reserved_gib']:5.1f} "
            f"exposed {d['comm_exposed_ms']:5.1f} ms state {state * 100:+.2f}%"
            + (f" pipelined {d['pipelined_step_ms']:.1f} ms" if "pipelined_step_ms" in d else "")
            + (f" graph pool {d['graph_pool_gib']:.2f} GiB (eager cache {d['eager_cache_gib']:.2f})"
               if d.get("graph_pool_gib") else ""))


def peer_line(d):
    """A line of the peer's benchmark (../shared/anchor, `peer: true` in bench/results)."""
    r = d["per_rank"][0]
    return (f"peer {d['model']:7s} bs={d['bs_per_gpu']:<3d} {d['mode']:6s} {d['step_ms']:8.1f} ms/step (wall, back to back) "
            f"alloc {r['peak_alloc_GiB']:5.1f} GiB res {r['peak_reserved_GiB']:5.1f}")


def profile_lines(d, top=12):
    p = d.get("profile") or {}
    if not p:
        return []
    head = (f"    kernels {p['kernel_ms_per_step']:.1f} ms/step, NCCL {p['nccl_kernel_ms_per_step']:.1f} ms, "
            f"{p['launches_per_step']:.0f} launches")
    return [head] + [f"    {o['ms']:7.2f} ms {o['launches']:6.0f}x  {o['operator'][:110]}"
                     for o in p.get("top_operators", [])[:top]]


def main():
    args = sys.argv[1:]
    with_profile = "--profile" in args
    streams = [open(p) for p in args if p != "--profile"] or [sys.stdin]
    for stream in streams:
        for text in stream:
            text = text.strip()
            if text.startswith("{"):
                d = json.loads(text)
                if d.get("peer") or "bs_per_gpu" in d:
                    print(peer_line(d))
                    continue
                print(line(d))
                for extra in profile_lines(d) if with_profile else []:
                    print(extra)


if __name__ == "__main__":
    main()
