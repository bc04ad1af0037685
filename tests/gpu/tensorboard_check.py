#!/usr/bin/env python3
"""Reads a zest run folder with TensorBoard's own loader and checks it against the run's metrics.jsonl.

What it checks (exit status 0 only when everything holds):
  * scalars: every record of metrics.jsonl (the last one of a step, as a resumed run appends) appears under
    every tag zest writes, at its step, with its value (float32); no tag holds a step metrics.jsonl lacks;
  * pictures: every validation grid (SD) or skeleton GIF (HY-Motion) listed in metrics.jsonl
    ("validation_samples") is the image under "samples/<prompt>" (several of a prompt: "samples/<prompt>/k") at
    its step, byte for byte, with the file's width and height;
  * text: the last "config" text is RUN_DIR/config.toml (as a Markdown code block);
  * traces: every *.pt.trace.json in RUN_DIR/tensorboard (and in --trace-dir folders, e.g. a
    `zest bench --profile DIR`) is valid JSON whose complete events have name/cat/ts/dur/pid/tid and nest
    on each (pid, tid) lane; on a GPU trace the kernels fall inside the traced steps; when the
    torch-tb-profiler package is installed, its own parser loads each trace, and when Perfetto's Python
    trace processor is installed it loads each trace too.

Usage (the tensorboard package installed):
  python3 tests/gpu/tensorboard_check.py RUN_DIR [--trace-dir DIR ...]
"""
import argparse
import json
import math
import os
import struct
import sys
import tempfile

from tensorboard.backend.event_processing import event_accumulator

FAILURES = []


def fail(message):
    FAILURES.append(message)
    print("FAIL:", message)


def f32(value):
    return struct.unpack("f", struct.pack("f", value))[0]


def metrics_records(run_dir):
    steps, samples = {}, {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            if "loss" in record:
                steps[record["step"]] = record  # a resumed run's record replaces a crashed tail's
            elif "validation_samples" in record:
                samples[record["step"]] = record["validation_samples"]
    return steps, samples


def expected_scalars(record, world_size, items_tag):
    gib = float(1 << 30)
    s = {
        "train/loss": record["loss"],
        "train/lr": record["lr"],
        "train/loss_scale": record["loss_scale"],
        "train/skipped_steps": record["skipped_total"],
        "throughput/samples_per_s_per_gpu": record["samples_per_s"] / world_size,
        items_tag: record["items_per_s"] / world_size,
        "time/step_ms": record["step_ms"],
        "time/data_wait_ms": record["data_wait_ms"],
        "memory/host_rss_gib": record["host_rss_bytes"] / gib,
        "memory/host_peak_rss_gib": record["host_peak_rss_bytes"] / gib,
    }
    if record.get("grad_norm") is not None:
        s["train/grad_norm"] = record["grad_norm"]
    if "checkpoint_stall_ms" in record:
        s["time/checkpoint_stall_ms"] = record["checkpoint_stall_ms"]
    if "gpu_peak_allocated_bytes" in record:
        s["memory/gpu_peak_allocated_gib"] = record["gpu_peak_allocated_bytes"] / gib
        s["memory/gpu_peak_reserved_gib"] = record["gpu_peak_reserved_bytes"] / gib
    return s


def check_scalars(acc, steps):
    tags = set(acc.Tags()["scalars"])
    items_tag = next((t for t in tags if t.startswith("throughput/") and t != "throughput/samples_per_s_per_gpu"), None)
    if items_tag is None:
        fail("no per-GPU frames/latent-pixel throughput tag among %s" % sorted(tags))
        return
    # The world size: metrics.jsonl has global rates, TensorBoard per GPU.
    by_step = {e.step: e.value for e in acc.Scalars("throughput/samples_per_s_per_gpu")}
    first = min(by_step)
    world_size = round(steps[first]["samples_per_s"] / by_step[first])
    print("world size from the per-GPU throughput: %d" % world_size)
    logged = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in tags}
    compared = 0
    for step, record in sorted(steps.items()):
        for tag, value in expected_scalars(record, world_size, items_tag).items():
            got = logged.get(tag, {}).get(step)
            if got is None:
                fail("%s has no value at step %d" % (tag, step))
            elif not math.isclose(got, f32(value), rel_tol=1e-6, abs_tol=1e-30):
                fail("%s at step %d: %r in TensorBoard, %r in metrics.jsonl" % (tag, step, got, value))
            else:
                compared += 1
    for tag, values in logged.items():
        for step in values:
            if step not in steps:
                fail("%s holds step %d, which metrics.jsonl lacks" % (tag, step))
    print("scalars: %d values under %d tags equal metrics.jsonl" % (compared, len(tags)))


def prompt_tags(prompts):
    seen, tags = {}, []
    for p in prompts:
        seen[p] = seen.get(p, 0) + 1
        tags.append("samples/" + p + (" (%d)" % seen[p] if seen[p] > 1 else ""))
    return tags


def picture_size(data):
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return struct.unpack(">II", data[16:24])
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return struct.unpack("<HH", data[6:10])
    return None


def pictures_of(entry):
    """An SD entry's grid, or a HY-Motion entry's skeleton GIFs (its "file" is the .npy of the motions)."""
    return entry["animations"] if "animations" in entry else [entry["file"]]


def check_images(acc, run_dir, samples):
    tags = set(acc.Tags()["images"])
    compared = 0
    for step, listed in sorted(samples.items()):
        for prompt_tag, entry in zip(prompt_tags([e["prompt"] for e in listed]), listed):
            files = pictures_of(entry)
            for k, name in enumerate(files):
                tag = prompt_tag if len(files) == 1 else "%s/%d" % (prompt_tag, k + 1)
                events = [e for e in acc.Images(tag)] if tag in tags else []
                at_step = [e for e in events if e.step == step]
                if not at_step:
                    fail("no picture under %r at step %d" % (tag, step))
                    continue
                with open(os.path.join(run_dir, name), "rb") as f:
                    data = f.read()
                width, height = picture_size(data)
                image = at_step[-1]
                if image.encoded_image_string != data:
                    fail("the picture under %r at step %d is not %s" % (tag, step, name))
                elif (image.width, image.height) != (width, height):
                    fail("%r at step %d: %dx%d, the file is %dx%d" % (tag, step, image.width, image.height, width, height))
                else:
                    compared += 1
    print("pictures: %d equal their PNG/GIF files (%d image tags)" % (compared, len(tags)))


def check_config(acc, run_dir):
    if "config" not in acc.Tags()["tensors"]:
        fail("no 'config' text")
        return
    text = acc.Tensors("config")[-1].tensor_proto.string_val[0].decode("utf-8")
    with open(os.path.join(run_dir, "config.toml")) as f:
        expected = "".join(("    " + line if line.strip("\n") else line) for line in f)
    if text != expected:
        fail("the config text differs from config.toml")
    else:
        print("config: the text equals config.toml")


def kernels_in(trace):
    return any(e.get("cat") == "kernel" for e in trace["traceEvents"])


def check_trace(path):
    with open(path) as f:
        trace = json.load(f)
    lanes, steps, kernels = {}, [], []
    for e in trace["traceEvents"]:
        if "name" not in e:
            fail("%s: an event without a name: %s" % (path, e))
        if e.get("ph") != "X":
            continue
        for key in ("cat", "ts", "dur", "pid", "tid"):
            if key not in e:
                fail("%s: %r has no %s" % (path, e.get("name"), key))
        span = (e["ts"], e["ts"] + e["dur"], e["name"])
        # CUPTI's own buffer hand-over, recorded on whatever host thread it interrupted: no operator or phase,
        # it may straddle one (seen on one H200 across a checkpoint save); left out of the nesting check.
        if e["name"] == "Activity Buffer Request":
            continue
        lanes.setdefault((e["pid"], e["tid"]), []).append(span)
        if e["name"].startswith("ProfilerStep#"):
            steps.append(span)
        if e["cat"] == "kernel":
            kernels.append(span)
    # zest's host phases (system clock) share their thread's lane with LibTorch's operators (the profiler's
    # clock, converted to the epoch): on a GPU trace an operator at a phase's edge may stick out by a few
    # microseconds. Up to 50 us is counted and reported; more is a failure.
    edge_overlaps = 0
    for lane, spans in lanes.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_spans = []
        for s in spans:
            while open_spans and open_spans[-1][1] <= s[0] + 1e-3:
                open_spans.pop()
            if open_spans and s[1] > open_spans[-1][1] + 1e-3:
                if s[1] - open_spans[-1][1] <= 50.0 and kernels_in(trace):
                    edge_overlaps += 1
                else:
                    fail("%s: %r overlaps the end of %r on lane %s" % (path, s[2], open_spans[-1][2], lane))
            open_spans.append(s)
    if edge_overlaps:
        print("  %d operator(s) stick out of a host phase by at most 50 us (two clocks)" % edge_overlaps)
    if not steps:
        fail("%s: no ProfilerStep# span" % path)
    if kernels and steps:
        begin, end = min(s[0] for s in steps), max(s[1] for s in steps)
        outside = [k for k in kernels if k[0] < begin - 1e6 or k[1] > end + 10e6]
        if outside:
            fail("%s: %d of %d kernels lie more than 1 s before or 10 s after the traced steps (clocks differ?)"
                 % (path, len(outside), len(kernels)))
    print("trace %s: %d events, %d steps, %d kernels, nested" % (os.path.basename(path), sum(map(len, lanes.values())),
                                                               len(steps), len(kernels)))
    try:
        from torch_tb_profiler.profiler.data import RunProfileData
    except ImportError:
        RunProfileData = None
    if RunProfileData is not None:
        try:
            worker = os.path.basename(path).split(".")[0]
            try:
                RunProfileData.parse(worker, None, path)
            except TypeError:  # older plugin versions take a cache folder too
                RunProfileData.parse(worker, None, path, tempfile.gettempdir())
            print("  torch-tb-profiler parses it")
        except Exception as error:  # noqa: BLE001 - any failure of the plugin's parser is the finding
            fail("%s: torch-tb-profiler cannot parse it: %r" % (path, error))
    try:
        from perfetto.trace_processor import TraceProcessor
    except ImportError:
        TraceProcessor = None
    if TraceProcessor is not None:
        try:
            tp = TraceProcessor(trace=path)
            count = next(iter(tp.query("select count(*) as n from slice"))).n
            tp.close()
            print("  Perfetto's trace processor reads %d slices" % count)
        except Exception as error:  # noqa: BLE001
            fail("%s: Perfetto's trace processor cannot load it: %r" % (path, error))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("--trace-dir", action="append", default=[], help="another folder of *.pt.trace.json")
    args = parser.parse_args()
    tb_dir = os.path.join(args.run_dir, "tensorboard")
    acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    acc.Reload()
    steps, samples = metrics_records(args.run_dir)
    if not steps:
        fail("metrics.jsonl has no step records")
    else:
        check_scalars(acc, steps)
    check_images(acc, args.run_dir, samples)
    check_config(acc, args.run_dir)
    traces = []
    for folder in [tb_dir] + args.trace_dir:
        traces += [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".pt.trace.json")]
    for path in traces:
        check_trace(path)
    print("%d trace file(s)" % len(traces))
    if FAILURES:
        print("tensorboard_check: %d failure(s)" % len(FAILURES))
        return 1
    print("tensorboard_check: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
