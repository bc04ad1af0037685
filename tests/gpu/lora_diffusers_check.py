#!/usr/bin/env python3
"""Checks that diffusers loads zest's LoRA file as it stands and computes zest's UNet output with it.

Inputs (one folder, written by the CPU test LoraDiffusersArtifacts.WritesTheGpuChecksFiles when
ZEST_LORA_ARTIFACTS names it): base/ (a diffusers UNet folder: unet_tiny's config.json and zest's seeded
weights), lora/pytorch_lora_weights.safetensors (`zest merge --format lora` of a trained LoRA run: attention
projections, a feed-forward Linear and a 3x3 convolution, rank 4, alpha 8), inputs.safetensors and
zest_output.safetensors (zest's fp32 UNet output with the adapters).

What it checks, with diffusers' own loader (the path pipe.load_lora_weights(DIR) takes for the UNet:
StableDiffusionLoraLoaderMixin.lora_state_dict, then load_lora_into_unet -> UNet2DConditionModel.load_lora_adapter):
  1. the file's keys are exactly the adapters peft creates in the UNet (no missing, no unexpected key), each
     value loaded as stored, and the LoraConfig diffusers builds from the file's metadata has zest's rank/alpha;
  2. the UNet's output on the inputs equals zest's: fp32 to 1e-5 relative, and bf16 on the GPU within bf16
     tolerance (2e-2 relative to the output's scale);
  3. pipe.load_lora_weights(DIR) on an object with the pipeline's loader mixin loads the same adapters.

Run on the GPU machine from the checkout root (diffusers as source on PYTHONPATH, as bench anchors do):
  mkdir -p /tmp/anchor-src && tar xzf /work/shared/anchor/ref_src.tar.gz -C /tmp/anchor-src   # or the copy you carry
  ZEST_LORA_ARTIFACTS=$PWD/lora_check build/tests/zest_tests --area=lora --gtest_filter='LoraDiffusersArtifacts.*'
  PYTHONPATH=/tmp/anchor-src/src python3 tests/gpu/lora_diffusers_check.py lora_check
Exit status 0 and "lora_diffusers_check: PASS" when every check holds.
"""
import json
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file


def fail(message):
    print(f"lora_diffusers_check: FAIL: {message}")
    sys.exit(1)


def load_unet(folder, device, dtype):
    from diffusers import UNet2DConditionModel

    unet = UNet2DConditionModel.from_pretrained(os.path.join(folder, "base"))
    return unet.to(device=device, dtype=dtype).eval()


def unet_output(unet, inputs, device, dtype):
    cast = {k: v.to(device=device, dtype=dtype) for k, v in inputs.items()}
    with torch.no_grad():
        return unet(
            cast["sample"],
            cast["timestep"],
            encoder_hidden_states=cast["encoder_hidden_states"],
            added_cond_kwargs={"text_embeds": cast["text_embeds"], "time_ids": cast["time_ids"]},
        ).sample.float().cpu()


def load_with_diffusers_loader(unet, lora_dir):
    from diffusers.loaders.lora_pipeline import StableDiffusionLoraLoaderMixin

    state_dict, network_alphas, metadata = StableDiffusionLoraLoaderMixin.lora_state_dict(
        lora_dir, return_lora_metadata=True
    )
    StableDiffusionLoraLoaderMixin.load_lora_into_unet(
        state_dict, network_alphas=network_alphas, unet=unet, metadata=metadata, adapter_name="zest"
    )
    return metadata


def check_keys(unet, file_tensors):
    """peft's adapters in the UNet vs the file's (names as saved: without the adapter name)."""
    in_model = {}
    for name, value in unet.state_dict().items():
        if ".lora_A." in name or ".lora_B." in name:
            in_model["unet." + name.replace(".zest.", ".")] = value
    missing = sorted(set(in_model) - set(file_tensors))
    unexpected = sorted(set(file_tensors) - set(in_model))
    if missing or unexpected:
        fail(f"{len(missing)} missing {missing[:5]}, {len(unexpected)} unexpected {unexpected[:5]}")
    for name, value in file_tensors.items():
        if not torch.equal(in_model[name].float().cpu(), value.float()):
            fail(f"{name} was not loaded as stored")
    print(f"keys: the {len(file_tensors)} tensors of the file are exactly the UNet's LoRA parameters")


def main():
    if len(sys.argv) != 2:
        fail("usage: lora_diffusers_check.py ARTIFACTS_DIR")
    folder = sys.argv[1]
    lora_dir = os.path.join(folder, "lora")
    lora_file = os.path.join(lora_dir, "pytorch_lora_weights.safetensors")
    file_tensors = load_file(lora_file)
    with safe_open(lora_file, "pt") as f:
        zest_config = json.loads(f.metadata()["lora_adapter_metadata"])
    inputs = load_file(os.path.join(folder, "inputs.safetensors"))
    expected = load_file(os.path.join(folder, "zest_output.safetensors"))["output"]
    scale = expected.abs().max().item()

    # 1 and 2 (fp32, CPU): diffusers' loader path, keys and values, config, output.
    unet = load_unet(folder, "cpu", torch.float32)
    base = unet_output(unet, inputs, "cpu", torch.float32)
    load_with_diffusers_loader(unet, lora_dir)
    check_keys(unet, file_tensors)
    config = unet.peft_config["zest"]
    if config.r != zest_config["unet.r"] or config.lora_alpha != zest_config["unet.lora_alpha"]:
        fail(f"LoraConfig r={config.r} alpha={config.lora_alpha}, the file says {zest_config}")
    print(f"config: r={config.r}, lora_alpha={config.lora_alpha}, {len(config.target_modules)} target modules")
    out = unet_output(unet, inputs, "cpu", torch.float32)
    if (out - base).abs().max().item() < 1e-3 * scale:
        fail("the adapters do not change the output: not loaded")
    fp32_error = (out - expected).abs().max().item() / scale
    print(f"fp32 (CPU): max |diffusers - zest| / max |zest| = {fp32_error:.3e}")
    if fp32_error > 1e-5:
        fail("fp32 output differs from zest's")

    # 2 (bf16, GPU).
    if torch.cuda.is_available():
        unet16 = load_unet(folder, "cuda", torch.bfloat16)
        load_with_diffusers_loader(unet16, lora_dir)
        bf16_error = (unet_output(unet16, inputs, "cuda", torch.bfloat16) - expected).abs().max().item() / scale
        print(f"bf16 (GPU): max |diffusers - zest| / max |zest| = {bf16_error:.3e}")
        if bf16_error > 2e-2:
            fail("bf16 output differs from zest's beyond bf16 tolerance")
    else:
        print("bf16 (GPU): skipped, no GPU")

    # 3: the pipeline's own entry point on an object with the loader mixin (the UNet part of a pipeline).
    from diffusers.loaders.lora_pipeline import StableDiffusionLoraLoaderMixin

    class UNetOnlyPipeline(StableDiffusionLoraLoaderMixin):
        def __init__(self, unet):
            self.unet = unet
            self.text_encoder = None
            # DiffusionPipeline's attribute: None = no accelerate device map (the loader asks before it
            # checks for CPU offloading).
            self.hf_device_map = None

        @property
        def components(self):
            return {"unet": self.unet}

    pipe = UNetOnlyPipeline(load_unet(folder, "cpu", torch.float32))
    try:
        pipe.load_lora_weights(lora_dir)
    except Exception as error:  # noqa: BLE001 - report what diffusers said
        fail(f"pipe.load_lora_weights(DIR) raised {type(error).__name__}: {error}")
    via_pipe = unet_output(pipe.unet, inputs, "cpu", torch.float32)
    if (via_pipe - expected).abs().max().item() / scale > 1e-5:
        fail("pipe.load_lora_weights(DIR) gives another output")
    print("pipe.load_lora_weights(DIR): same adapters, same output")
    print("lora_diffusers_check: PASS")


if __name__ == "__main__":
    main()
