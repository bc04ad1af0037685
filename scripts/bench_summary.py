#!/usr/bin/env python3
"""One line per `zest bench` JSON result (stdin or files): model, GPUs, stage, checkpointing, step time,
throughput, MFU, peak memory, exposed communication, model state against the formula."""
import json
import sys


def line(d):
    s = d["step_ms"]
    state = d["model_state_bytes"] / d["model_state_formula_bytes"] - 1
    return (f"{d['model']:12s} N={d['world_size']} stage={d['stage']} ac={d['activation_checkpointing']:5s} "
            f"{s['median']:8.1f} ms [{s['min']:.0f}-{s['max']:.0f}] {d['samples_per_s']:6.1f} samples/s/GPU "
            f"MFU {d['mfu'] * 100:4.1f}% alloc {d['peak_allocated_gib']:5.1f} GiB res {d['peak_reserved_gib']:5.1f} "
            f"exposed {d['comm_exposed_ms']:5.1f} ms state {state * 100:+.2f}%")


def main():
    streams = [open(p) for p in sys.argv[1:]] or [sys.stdin]
    for stream in streams:
        for text in stream:
            text = text.strip()
            if text.startswith("{"):
                print(line(json.loads(text)))


if __name__ == "__main__":
    main()
