#!/usr/bin/env python3
"""Rebuilds the golden vectors tests/data/{hymotion_tiny,unet_tiny}.{safetensors,json} from the reference
Python modules (HY-Motion's HunyuanMotionMMDiT, diffusers' UNet2DConditionModel).

Each file holds, in float32 on the CPU: param.<name> (every parameter under its state-dict name), input.<name>
(the forward inputs), output.sample and output.loss = mean(output**2), grad.<name> (d loss / d param) and
debug.<module> (intermediate activations, to localise a mismatch). The JSON beside it records the recipe.
How to run it (versions, command line): scripts/golden/README.md.
"""

import argparse
import copy
import json
import os
import platform
import sys
import tempfile

import torch

from golden_common import perturb_constant_tensors

HYMOTION_REF = "Tencent-Hunyuan/HY-Motion-1.0 @ 9993ccd8aeba1f2d34c1061cc2282d14d5193055"
DIFFUSERS_REF = "huggingface/diffusers @ 58eb52c0803ea9af3abec60841c2a093bdf1f951 (0.40.0.dev0)"

# The tiny configurations (docs/models.md 3): every block type and every option of the released models.
HYMOTION_CONFIG = {
    "input_dim": 12,
    "feat_dim": 32,
    "output_dim": 12,
    "ctxt_input_dim": 24,
    "vtxt_input_dim": 16,
    "text_refiner_module": "hymotion/network/token_refiner.SingleTokenRefiner",
    "text_refiner_cfg": {"num_layers": 2},
    "num_layers": 6,
    "num_heads": 4,
    "mlp_ratio": 4.0,
    "mlp_act_type": "gelu_tanh",
    "norm_type": "layer",
    "qk_norm_type": "rms",
    "qkv_bias": True,
    "dropout": 0.0,
    "final_layer_module": "hymotion/network/encoders.FinalLayer",
    "final_layer_cfg": {"act_type": "silu"},
    "mask_mode": "narrowband",
    "apply_rope_to_single_branch": False,
    "insert_start_token": False,
    "with_long_skip_connection": False,
    "time_factor": 1000.0,
    "narrowband_length": 0.1,
}

UNET_CONFIG = {
    "sample_size": 8,
    "in_channels": 4,
    "out_channels": 4,
    "center_input_sample": False,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D", "CrossAttnDownBlock2D"],
    "mid_block_type": "UNetMidBlock2DCrossAttn",
    "up_block_types": ["CrossAttnUpBlock2D", "UpBlock2D", "CrossAttnUpBlock2D"],
    "block_out_channels": [8, 16, 16],
    "layers_per_block": 2,
    "downsample_padding": 1,
    "mid_block_scale_factor": 1,
    "act_fn": "silu",
    "norm_num_groups": 4,
    "norm_eps": 1e-05,
    "cross_attention_dim": 12,
    "transformer_layers_per_block": [1, 1, 2],
    "attention_head_dim": [2, 2, 2],
    "use_linear_projection": False,
    "addition_embed_type": "text_time",
    "addition_time_embed_dim": 4,
    "projection_class_embeddings_input_dim": 32,
}

CONSTRUCTION_SEED = 0
PERTURB_SEED = 1000
INPUT_SEED = 100

CONSTRUCTION = (
    "torch.manual_seed(0); model = {cls}(**config).float(); then every floating state_dict tensor that was "
    "identically 0 was set to 0.1*N(0,1) and every one identically 1 was set to 1+0.1*N(0,1), drawing from "
    "torch.Generator().manual_seed(1000) in state_dict order; the saved param.* tensors are authoritative."
)
DEBUG_NOTE = "debug.* are intermediate activations captured with forward hooks, for localising mismatches"
CUDA_NOTE = "same saved params/inputs run on an H200 in float32 with TF32 disabled, compared with the CPU float32 result"
HYMOTION_FP64_NOTE = (
    "the reference HunyuanMotionMMDiT cannot run in float64: its forward casts the text inputs to float32 "
    "(vtxt_input.float(), ctxt_input.float()), so only the CUDA cross-check applies"
)
# Written by an independent float64 re-implementation of docs/models.md, not by this script: carried over
# from the JSON already in --out when there is one.
CARRIED_OVER = ("independent_fp64_reimplementation_output_max_abs_diff", "independent_fp64_reimplementation_note")


# ---------------------------------------------------------------------------------------------------------
# Construction

def build(spec):
    torch.manual_seed(CONSTRUCTION_SEED)
    model = spec["cls"](**copy.deepcopy(spec["config"])).float()  # HY-Motion mutates its nested dicts
    perturbed = perturb_constant_tensors(model)
    model.train()  # every dropout probability is 0: train() and eval() give the same numbers
    return model, perturbed


# ---------------------------------------------------------------------------------------------------------
# HY-Motion

def hymotion_inputs():
    generator = torch.Generator().manual_seed(INPUT_SEED)
    x = torch.randn(2, 12, 12, generator=generator)
    ctxt_input = torch.randn(2, 6, 24, generator=generator)
    vtxt_input = torch.randn(2, 1, 16, generator=generator)
    # Valid lengths: motion (12, 9) of 12 frames, text (6, 4) of 6 tokens, so padding, the narrow band and
    # the text→motion block are all exercised. Padded frames keep their random values.
    x_mask_temporal = torch.arange(12)[None, :] < torch.tensor([12, 9])[:, None]
    ctxt_mask_temporal = torch.arange(6)[None, :] < torch.tensor([6, 4])[:, None]
    return {
        "x": x,
        "ctxt_input": ctxt_input,
        "vtxt_input": vtxt_input,
        "timesteps": torch.tensor([0.3, 0.85], dtype=torch.float32),
        "x_mask_temporal": x_mask_temporal,
        "ctxt_mask_temporal": ctxt_mask_temporal,
    }


def hymotion_forward(model, inputs):
    return model(**inputs)


class InstanceOverride:
    """Replaces a method on one module instance until remove() (the same interface as a hook handle)."""

    def __init__(self, module, method, replacement):
        self.module, self.method = module, method
        setattr(module, method, replacement)

    def remove(self):
        delattr(self.module, self.method)


def hymotion_debug_hooks(model, debug):
    """Forward hooks for debug.*; returns the handles. The attention masks are not module outputs: the two
    mask builders are wrapped on the instance to record what they return."""
    def keep(name):
        def hook(module, args, output):
            debug[name] = output.detach().clone()
        return hook

    handles = [getattr(model, name).register_forward_hook(keep(name))
               for name in ("input_encoder", "timestep_encoder", "vtxt_encoder", "ctxt_encoder", "text_refiner")]
    for i, block in enumerate(model.double_blocks):
        def keep_pair(module, args, output, i=i):
            debug[f"double_blocks.{i}.motion"] = output[0].detach().clone()
            debug[f"double_blocks.{i}.text"] = output[1].detach().clone()
        handles.append(block.register_forward_hook(keep_pair))
    for i, block in enumerate(model.single_blocks):
        handles.append(block.register_forward_hook(keep(f"single_blocks.{i}")))
    for method, name in (("_build_dmm_attn_mask_shared", "attn_mask_double"),
                         ("_build_smm_attn_mask_shared", "attn_mask_single")):
        def wrapped(*args, _original=getattr(model, method), _name=name, **kwargs):
            mask = _original(*args, **kwargs)
            debug[_name] = mask.detach().clone()
            return mask
        handles.append(InstanceOverride(model, method, wrapped))
    return handles


def hymotion_finish_debug(debug):
    # forward(): adapter = timestep_feat + vtxt_feat, the same addition of the two hooked outputs.
    debug["adapter"] = debug["timestep_encoder"] + debug["vtxt_encoder"]


def hymotion_fp64_check(spec, tensors):
    try:
        model, inputs = reload(spec, tensors, torch.device("cpu"), torch.float64)
        hymotion_forward(model, inputs)
        return {"cpu_fp64_error": "none: the float64 forward ran"}
    except Exception as error:  # noqa: BLE001 -- the reference's own error is the record
        return {"cpu_fp64_error": repr(error), "cpu_fp64_note": HYMOTION_FP64_NOTE}


def load_hymotion(repo):
    if not repo:
        sys.exit("make_golden: --hymotion-repo (a checkout of " + HYMOTION_REF + ") is needed for hymotion")
    # HY-Motion resolves text_refiner_module / final_layer_module by import path relative to its root.
    sys.path.insert(0, os.path.abspath(repo))
    from hymotion.network.hymotion_mmdit import HunyuanMotionMMDiT
    return HunyuanMotionMMDiT


# ---------------------------------------------------------------------------------------------------------
# UNet

def unet_inputs():
    generator = torch.Generator().manual_seed(INPUT_SEED)
    sample = torch.randn(2, 4, 8, 8, generator=generator)
    encoder_hidden_states = torch.randn(2, 5, 12, generator=generator)
    text_embeds = torch.randn(2, 8, generator=generator)
    return {
        "sample": sample,
        "timestep": torch.tensor([10, 999], dtype=torch.int64),
        "encoder_hidden_states": encoder_hidden_states,
        "text_embeds": text_embeds,
        "time_ids": torch.tensor([[64, 64, 0, 0, 64, 64], [48, 56, 4, 2, 64, 64]], dtype=torch.float32),
    }


def unet_forward(model, inputs):
    added = {"text_embeds": inputs["text_embeds"], "time_ids": inputs["time_ids"]}
    return model(sample=inputs["sample"], timestep=inputs["timestep"],
                 encoder_hidden_states=inputs["encoder_hidden_states"], added_cond_kwargs=added,
                 return_dict=False)[0]


def unet_debug_hooks(model, debug):
    def keep(name, first=False):
        def hook(module, args, output):
            debug[name] = (output[0] if first else output).detach().clone()
        return hook

    handles = [getattr(model, name).register_forward_hook(keep(name))
               for name in ("time_proj", "time_embedding", "add_time_proj", "add_embedding", "conv_in", "mid_block")]
    # Down blocks return (hidden_states, skip states): keep the hidden states.
    handles += [block.register_forward_hook(keep(f"down_blocks.{i}", first=True))
                for i, block in enumerate(model.down_blocks)]
    handles += [block.register_forward_hook(keep(f"up_blocks.{i}")) for i, block in enumerate(model.up_blocks)]
    return handles


def unet_fp64_check(spec, tensors):
    model, inputs = reload(spec, tensors, torch.device("cpu"), torch.float64)
    with torch.no_grad():
        out = unet_forward(model, inputs)
    return {"cpu_fp64_output_max_abs_diff_vs_fp32": max_abs_diff(out, tensors["output.sample"])}


def load_unet(_repo):
    from diffusers import UNet2DConditionModel
    return UNet2DConditionModel


SPECS = {
    "hymotion": {
        "name": "hymotion_tiny", "class_name": "HunyuanMotionMMDiT", "reference": HYMOTION_REF,
        "config": HYMOTION_CONFIG, "load": load_hymotion, "inputs": hymotion_inputs, "forward": hymotion_forward,
        "hooks": hymotion_debug_hooks, "finish_debug": hymotion_finish_debug, "fp64_check": hymotion_fp64_check,
        "call_signature": "HunyuanMotionMMDiT.forward(x=input.x, ctxt_input=input.ctxt_input, "
                          "vtxt_input=input.vtxt_input, timesteps=input.timesteps, "
                          "x_mask_temporal=input.x_mask_temporal, ctxt_mask_temporal=input.ctxt_mask_temporal) "
                          "-> output.sample",
        # HY-Motion's forward casts text inputs to float32: double precision is refused there.
        "fp64_inputs": ("x", "ctxt_input", "vtxt_input", "timesteps"),
    },
    "unet": {
        "name": "unet_tiny", "class_name": "UNet2DConditionModel", "reference": DIFFUSERS_REF,
        "config": UNET_CONFIG, "load": load_unet, "inputs": unet_inputs, "forward": unet_forward,
        "hooks": unet_debug_hooks, "finish_debug": lambda debug: None, "fp64_check": unet_fp64_check,
        "call_signature": "UNet2DConditionModel.forward(sample=input.sample, timestep=input.timestep, "
                          "encoder_hidden_states=input.encoder_hidden_states, "
                          "added_cond_kwargs={'text_embeds': input.text_embeds, 'time_ids': input.time_ids}, "
                          "return_dict=False)[0] -> output.sample",
        "fp64_inputs": ("sample", "encoder_hidden_states", "text_embeds", "time_ids"),
    },
}


# ---------------------------------------------------------------------------------------------------------
# Running, cross-checks, files

def max_abs_diff(a, b):
    return float((a.detach().double().cpu() - b.detach().double().cpu()).abs().max())


def run(spec, model, inputs, debug=None):
    """Forward, loss = mean(out²), backward. Returns (output, loss)."""
    handles = spec["hooks"](model, debug) if debug is not None else []
    out = spec["forward"](model, inputs)
    for handle in handles:
        handle.remove()
    loss = out.pow(2).mean()
    loss.backward()
    return out, loss


def collect(spec, model):
    inputs = spec["inputs"]()
    debug = {}
    out, loss = run(spec, model, inputs, debug)
    spec["finish_debug"](debug)
    tensors = {}
    for name, param in model.named_parameters():
        tensors["param." + name] = param.detach().clone()
    for name, value in inputs.items():
        tensors["input." + name] = value
    tensors["output.sample"] = out.detach().clone()
    tensors["output.loss"] = loss.detach().reshape(1).clone()
    without_grad = [name for name, p in model.named_parameters() if p.grad is None]
    for name, param in model.named_parameters():
        if param.grad is not None:
            tensors["grad." + name] = param.grad.detach().clone()
    for name, value in debug.items():
        tensors["debug." + name] = value
    return tensors, without_grad, float(loss)


def reload(spec, tensors, device, dtype):
    """The reference model rebuilt from the config with param.* loaded strictly, and the inputs, on `device`
    with floating parameters/inputs in `dtype` (masks and integer timesteps unchanged)."""
    model = spec["cls"](**copy.deepcopy(spec["config"]))
    params = {k[len("param."):]: v for k, v in tensors.items() if k.startswith("param.")}
    model.load_state_dict(params, strict=True)
    model = model.to(device=device, dtype=dtype).train()
    inputs = {}
    for k, v in tensors.items():
        if k.startswith("input."):
            name = k[len("input."):]
            inputs[name] = v.to(device=device, dtype=dtype) if name in spec["fp64_inputs"] else v.to(device)
    return model, inputs


def cross_checks(spec, tensors, json_path):
    """The same vectors recomputed elsewhere: on a CUDA device in float32 (when there is one), on the CPU
    in float64, plus the independent re-implementation's figures carried over from the previous JSON."""
    checks = {}
    if torch.cuda.is_available():
        model, inputs = reload(spec, tensors, torch.device("cuda"), torch.float32)
        out, _ = run(spec, model, inputs)
        checks["cuda_fp32_output_max_abs_diff"] = max_abs_diff(out, tensors["output.sample"])
        checks["cuda_fp32_grad_max_abs_diff"] = max(
            max_abs_diff(p.grad, tensors["grad." + n]) for n, p in model.named_parameters())
    checks.update(spec["fp64_check"](spec, tensors))
    checks["cuda_note"] = CUDA_NOTE if torch.cuda.is_available() else "no CUDA device: cross-check skipped"
    checks.update(carried_over(json_path))
    return checks


def verify_bitwise(spec, path):
    """Reloads the written file in this process, rebuilds the reference model, reruns it on the CPU in
    float32 and returns the largest output and gradient differences (0 for a faithful file)."""
    from safetensors.torch import load_file
    tensors = load_file(path)
    model, inputs = reload(spec, tensors, torch.device("cpu"), torch.float32)
    out, _ = run(spec, model, inputs)
    grad_diff = max(max_abs_diff(p.grad, tensors["grad." + n]) for n, p in model.named_parameters())
    return max_abs_diff(out, tensors["output.sample"]), grad_diff


def versions():
    import safetensors
    return {"torch": torch.__version__, "python": platform.python_version(), "safetensors": safetensors.__version__,
            "diffusers_ref": DIFFUSERS_REF, "hymotion_ref": HYMOTION_REF, "stubbed_unrelated_imports": []}


def record_for(spec, tensors, perturbed, without_grad, loss_value, cross_checks, verification):
    def prefixed(prefix):
        return sorted(k for k in tensors if k.startswith(prefix + "."))

    inputs = {k[len("input."):]: {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")}
              for k, v in tensors.items() if k.startswith("input.")}
    out = tensors["output.sample"]
    return {
        "name": spec["name"],
        "model_class": spec["class_name"],
        "reference": spec["reference"],
        "config": spec["config"],
        "construction": CONSTRUCTION.format(cls=spec["class_name"]),
        "perturbed_tensors": perturbed,
        "inputs": inputs,
        "inputs_generated_with": f"torch.Generator().manual_seed({INPUT_SEED})",
        "call_signature": spec["call_signature"],
        "module_mode": "train() (all dropout probabilities are 0, so identical to eval())",
        "compute": "CPU, float32, torch.backends TF32 disabled",
        "output": {"key": "output.sample", "shape": list(out.shape), "dtype": "float32"},
        "loss": {"definition": "loss = (output**2).mean() over all elements (padded frames included)",
                 "value": loss_value, "key": "output.loss (shape [1])"},
        "grads": "grad.<name> = d loss / d param for every named parameter, float32",
        "params_without_grad": without_grad,
        "debug_tensors": prefixed("debug"),
        "debug_note": DEBUG_NOTE,
        "num_parameters": sum(v.numel() for k, v in tensors.items() if k.startswith("param.")),
        "key_counts": {p: len(prefixed(p)) for p in ("param", "input", "output", "grad", "debug")},
        "cross_checks": cross_checks,
        "versions": versions(),
        "verification": verification,
    }


def carried_over(json_path):
    if not os.path.exists(json_path):
        return {}
    with open(json_path) as f:
        previous = json.load(f).get("cross_checks", {})
    return {k: previous[k] for k in CARRIED_OVER if k in previous}


def generate(family, out_dir, hymotion_repo, carry_from=None):
    """Builds, runs and writes one golden pair into out_dir; returns the safetensors path. The independent
    re-implementation's cross-check figures are carried over from the JSON in `carry_from` (default out_dir)."""
    spec = SPECS[family]
    spec["cls"] = spec["load"](hymotion_repo)
    model, perturbed = build(spec)
    tensors, without_grad, loss_value = collect(spec, model)

    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    st_path = os.path.join(out_dir, spec["name"] + ".safetensors")
    json_path = os.path.join(out_dir, spec["name"] + ".json")
    save_file({k: v.contiguous() for k, v in tensors.items()}, st_path)

    out_diff, grad_diff = verify_bitwise(spec, st_path)
    verification = (
        "reloaded from this safetensors file in a fresh process, reference model rebuilt from config, "
        "load_state_dict(strict=True), forward+backward re-run on CPU float32: "
        f"max|output-output.sample| = {out_diff:g} and max|grad-grad.*| = {grad_diff:g}"
        + (" (bitwise)." if out_diff == 0 and grad_diff == 0 else ".")
    )
    checks = cross_checks(spec, tensors, os.path.join(carry_from or out_dir, spec["name"] + ".json"))
    record = record_for(spec, tensors, perturbed, without_grad, loss_value, checks, verification)
    with open(json_path, "w") as f:
        f.write(json.dumps(record, indent=2))
    print(f"{spec['name']}: {record['num_parameters']} parameters, keys {record['key_counts']}, "
          f"loss {loss_value:.10g}, reload check {out_diff:g}/{grad_diff:g} -> {st_path}")
    return st_path


# JSON fields that describe the run (machine, versions, timings of other devices), not the vectors.
RUN_DEPENDENT = ("cross_checks", "versions", "verification")


def compare_files(new_path, old_path):
    """Bitwise comparison of two golden files, tensor by tensor, and of their JSON records (except the
    run-dependent fields); returns what differs."""
    from safetensors.torch import load_file
    new, old = load_file(new_path), load_file(old_path)
    differ = sorted(set(new) ^ set(old))
    differ += sorted(k for k in set(new) & set(old) if new[k].dtype != old[k].dtype or not torch.equal(new[k], old[k]))
    with open(new_path[: -len(".safetensors")] + ".json") as f:
        new_record = json.load(f)
    with open(old_path[: -len(".safetensors")] + ".json") as f:
        old_record = json.load(f)
    differ += [f"json:{k}" for k in sorted(set(new_record) | set(old_record))
               if k not in RUN_DEPENDENT and new_record.get(k) != old_record.get(k)]
    return differ


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["hymotion", "unet", "all"], default="all")
    parser.add_argument("--hymotion-repo", help="checkout of " + HYMOTION_REF)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data"),
                        help="folder to write NAME.safetensors and NAME.json to (default: tests/data)")
    parser.add_argument("--compare", action="store_true",
                        help="write into a temporary folder and compare bitwise with the files in --out instead")
    args = parser.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out_dir = os.path.abspath(args.out)
    families = ["hymotion", "unet"] if args.model == "all" else [args.model]
    failed = False
    for family in families:
        if not args.compare:
            generate(family, out_dir, args.hymotion_repo)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            new_path = generate(family, tmp, args.hymotion_repo, carry_from=out_dir)
            differ = compare_files(new_path, os.path.join(out_dir, os.path.basename(new_path)))
            print(f"{os.path.basename(new_path)}: " + ("identical" if not differ else f"{len(differ)} tensors differ: "
                                                          + ", ".join(differ[:10])))
            failed |= bool(differ)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
