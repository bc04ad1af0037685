#!/usr/bin/env python3
"""Golden pixels for `zest sample`: diffusers' StableDiffusionPipeline / StableDiffusionXLPipeline (from the
reference source) with transformers' CLIP on the tiny pipeline folders tests/data/sd_tiny/{sd15,sdxl},
with the request tests/cli/test_sample.cpp makes (small_request): prompt "a watercolor lighthouse, 1920s",
the default negative prompt, 4 steps, guidance 7.5, 16x16 pixels, 2 pictures, seed 7 (a CPU
torch.Generator), each of zest's schedulers set from the folder's scheduler config as users do
(`DDIMScheduler.from_config(pipe.scheduler.config)`, EulerDiscreteScheduler, DPMSolverMultistepScheduler).

Writes OUT/golden_pixels.safetensors (default tests/data/sd_tiny): one uint8 tensor [2, 16, 16, 3] per
<pipeline>_<scheduler> (sd15_ddim, sd15_euler, sd15_dpmpp, sdxl_ddim, sdxl_euler, sdxl_dpmpp): output_type
"np" × 255, rounded, as the pipelines' image processor turns pictures into PIL images. Also
golden_pixels.json with the versions.

diffusers is imported from its source: --ref-src names ../shared/anchor/ref_src.tar.gz or a folder holding
src/diffusers; transformers, torch and safetensors must be installed.
Usage:
    python3 scripts/golden/make_sd_pipeline_golden.py --ref-src ../shared/anchor/ref_src.tar.gz [OUT_DIR]
"""

import argparse
import json
import os
import platform
import tempfile

import torch

from golden_common import import_diffusers

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TINY = os.path.join(REPO, "tests", "data", "sd_tiny")

PROMPT = "a watercolor lighthouse, 1920s"
REQUEST = dict(num_inference_steps=4, guidance_scale=7.5, height=16, width=16, num_images_per_prompt=2)
SEED = 7


def load_pipeline(diffusers, transformers, which):
    folder = os.path.join(TINY, which)
    parts = dict(
        unet=diffusers.UNet2DConditionModel.from_pretrained(folder, subfolder="unet"),
        vae=diffusers.AutoencoderKL.from_pretrained(folder, subfolder="vae"),
        text_encoder=transformers.CLIPTextModel.from_pretrained(folder, subfolder="text_encoder"),
        tokenizer=transformers.CLIPTokenizer.from_pretrained(folder, subfolder="tokenizer"),
    )
    config = diffusers.DDIMScheduler.load_config(folder, subfolder="scheduler")
    if which == "sdxl":
        parts["text_encoder_2"] = transformers.CLIPTextModelWithProjection.from_pretrained(folder, subfolder="text_encoder_2")
        parts["tokenizer_2"] = transformers.CLIPTokenizer.from_pretrained(folder, subfolder="tokenizer_2")
        pipe = diffusers.StableDiffusionXLPipeline(scheduler=diffusers.EulerDiscreteScheduler.from_config(config), **parts)
    else:
        pipe = diffusers.StableDiffusionPipeline(scheduler=diffusers.PNDMScheduler.from_config(config), safety_checker=None,
                                                 feature_extractor=None, requires_safety_checker=False, **parts)
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(torch.float32), config


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref-src", required=True, help="ref_src.tar.gz or a folder with src/diffusers")
    parser.add_argument("out", nargs="?", default=TINY)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    from safetensors.torch import save_file
    import transformers

    with tempfile.TemporaryDirectory() as tmp:
        diffusers = import_diffusers(args.ref_src, tmp)
        classes = dict(ddim=diffusers.DDIMScheduler, euler=diffusers.EulerDiscreteScheduler,
                       dpmpp=diffusers.DPMSolverMultistepScheduler)
        tensors = {}
        for which in ("sd15", "sdxl"):
            pipe, config = load_pipeline(diffusers, transformers, which)
            for name, cls in classes.items():
                pipe.scheduler = cls.from_config(config)
                with torch.no_grad():
                    images = pipe(PROMPT, generator=torch.Generator().manual_seed(SEED), output_type="np", **REQUEST).images
                pixels = (torch.from_numpy(images) * 255).round().to(torch.uint8).contiguous()
                tensors[f"{which}_{name}"] = pixels
                print(f"{which}_{name}: {tuple(pixels.shape)} mean {pixels.float().mean():.2f}")
        os.makedirs(args.out, exist_ok=True)
        save_file(tensors, os.path.join(args.out, "golden_pixels.safetensors"))
        record = dict(prompt=PROMPT, seed=SEED, request=REQUEST,
                      versions=dict(python=platform.python_version(), torch=torch.__version__,
                                    transformers=transformers.__version__, diffusers=diffusers.__version__))
        with open(os.path.join(args.out, "golden_pixels.json"), "w") as f:
            json.dump(record, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
