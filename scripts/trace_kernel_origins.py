#!/usr/bin/env python3
"""Which operators launched the kernels of a Chrome trace (zest bench --profile, CUDA graphs off): for every GPU
kernel whose name contains PATTERN, the chain of CPU operators (with their input shapes) around its launch,
summed over the trace and printed busiest first. Usage: trace_kernel_origins.py TRACE.json PATTERN [--top N]"""
import argparse
import bisect
import collections
import json


def load_events(path):
    with open(path) as f:
        return json.load(f)["traceEvents"]


def operator_chain(ops_by_thread, starts_by_thread, launch):
    """The CPU operators on the launch's thread whose span holds the launch, outermost first."""
    ops = ops_by_thread.get((launch["pid"], launch["tid"]), [])
    starts = starts_by_thread.get((launch["pid"], launch["tid"]), [])
    chain = []
    for op in ops[: bisect.bisect_right(starts, launch["ts"])]:
        if op["ts"] <= launch["ts"] <= op["ts"] + op.get("dur", 0):
            dims = op.get("args", {}).get("Input Dims")
            chain.append(f"{op['name']}{dims if dims else ''}")
    return " > ".join(chain[-4:]) or "(no operator: inside a CUDA graph or autograd's engine)"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("pattern")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    events = load_events(args.trace)
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops_by_thread = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op":
            ops_by_thread[(e["pid"], e["tid"])].append(e)
    starts_by_thread = {}
    for key, ops in ops_by_thread.items():
        ops.sort(key=lambda e: e["ts"])
        starts_by_thread[key] = [e["ts"] for e in ops]
    total = collections.Counter()
    count = collections.Counter()
    for e in events:
        if e.get("cat") != "kernel" or args.pattern not in e.get("name", ""):
            continue
        launch = launches.get(e.get("args", {}).get("correlation"))
        origin = operator_chain(ops_by_thread, starts_by_thread, launch) if launch else "(launch not traced)"
        total[origin] += e.get("dur", 0)
        count[origin] += 1
    print(f"kernels matching {args.pattern!r}: {sum(count.values())}, {sum(total.values()) / 1000:.3f} ms in all")
    for origin, us in total.most_common(args.top):
        print(f"{us / 1000:8.3f} ms {count[origin]:5d}x  {origin}")


if __name__ == "__main__":
    main()
