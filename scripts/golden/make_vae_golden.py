#!/usr/bin/env python3
"""Golden vectors for models/vae/autoencoder_kl: diffusers' AutoencoderKL in a tiny configuration, and the
state-dict names and shapes of the SD1.5 / SDXL VAE.

diffusers is imported from its source: --ref-src names ../shared/anchor/ref_src.tar.gz (unpacked into a
temporary folder) or a folder holding src/diffusers (diffusers' own dependencies, e.g. huggingface_hub,
must be importable, as they are where the anchor benchmark runs). Writes into OUT (default $OUT, else
tests/data/vae):
  vae_tiny.safetensors: param.<state-dict name>, input.images, output.mean, output.logvar, output.std,
      output.sample (latent_dist.sample(torch.Generator().manual_seed(7))), output.decoded (decode(mean)),
      output.decoded_sample (decode(sample)); float32 on the CPU.
  vae_tiny.json: configuration, construction, versions, cross-checks.
  vae_tiny/: the model written by save_pretrained (config.json + diffusion_pytorch_model.safetensors).
  vae_sd_state_dict.txt: "name<TAB>[shape]" of the SD1.5 / SDXL VAE (the same architecture).
Usage:
    python3 scripts/golden/make_vae_golden.py --ref-src ../shared/anchor/ref_src.tar.gz [OUT_DIR]
"""

import argparse
import json
import os
import platform
import tempfile

import torch

from golden_common import import_diffusers, perturb_constant_tensors

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

TINY = {
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"],
    "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"],
    "block_out_channels": [8, 16],
    "layers_per_block": 1,
    "act_fn": "silu",
    "latent_channels": 4,
    "norm_num_groups": 4,
    "sample_size": 16,
    "scaling_factor": 0.13025,
    "force_upcast": True,
}
FULL = {
    "in_channels": 3, "out_channels": 3, "latent_channels": 4, "layers_per_block": 2, "norm_num_groups": 32,
    "block_out_channels": [128, 256, 512, 512], "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4, "act_fn": "silu", "sample_size": 512,
}
CONSTRUCTION_SEED, PERTURB_SEED, INPUT_SEED, SAMPLE_SEED = 0, 1000, 100, 7


def run(model, images):
    with torch.no_grad():
        dist = model.encode(images).latent_dist
        sample = dist.sample(generator=torch.Generator().manual_seed(SAMPLE_SEED))
        return {"mean": dist.mean, "logvar": dist.logvar, "std": dist.std, "sample": sample,
                "decoded": model.decode(dist.mean).sample, "decoded_sample": model.decode(sample).sample}


def max_abs_diff(a, b):
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ref-src", required=True, help="ref_src.tar.gz or a folder with src/diffusers")
    parser.add_argument("out", nargs="?", default=os.environ.get("OUT") or os.path.join(REPO, "tests", "data", "vae"))
    args = parser.parse_args()
    from safetensors.torch import save_file

    os.makedirs(args.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with tempfile.TemporaryDirectory() as tmp:
        AutoencoderKL = import_diffusers(args.ref_src, tmp).AutoencoderKL
        import diffusers
        print(f"torch {torch.__version__}, diffusers {diffusers.__version__} from {os.path.dirname(diffusers.__file__)}")

        torch.manual_seed(CONSTRUCTION_SEED)
        model = AutoencoderKL(**TINY).float().eval()
        perturbed = perturb_constant_tensors(model)
        images = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(INPUT_SEED)) * 2 - 1
        outputs = run(model, images)
        tensors = {f"param.{k}": v.detach().clone().contiguous() for k, v in model.state_dict().items()}
        tensors["input.images"] = images
        tensors.update({f"output.{k}": v.contiguous() for k, v in outputs.items()})
        save_file(tensors, os.path.join(args.out, "vae_tiny.safetensors"))
        folder = os.path.join(args.out, "vae_tiny")
        model.save_pretrained(folder, safe_serialization=True)

        checks = {"save_pretrained_reload_max_abs_diff": max_abs_diff(outputs, run(AutoencoderKL.from_pretrained(folder).float().eval(), images))}
        checks["float64_max_abs_diff"] = max_abs_diff(outputs, run(AutoencoderKL.from_pretrained(folder).double().eval(), images.double()))
        if torch.cuda.is_available():
            cuda = AutoencoderKL.from_pretrained(folder).float().eval().cuda()
            got = run(cuda, images.cuda())
            checks["cuda_float32_max_abs_diff"] = max_abs_diff(outputs, {k: v.cpu() for k, v in got.items()})
        with torch.device("meta"):
            full = AutoencoderKL(**FULL)
        lines = [f"{k}\t{list(v.shape)}" for k, v in full.state_dict().items()]
        with open(os.path.join(args.out, "vae_sd_state_dict.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        record = {"what": "scripts/golden/make_vae_golden.py", "config": TINY, "perturbed_tensors": perturbed,
                  "construction": (f"torch.manual_seed({CONSTRUCTION_SEED}); AutoencoderKL(**config).float().eval(); "
                                   f"identically-0/1 floating tensors perturbed from torch.Generator().manual_seed({PERTURB_SEED})"),
                  "inputs": f"images = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed({INPUT_SEED})) * 2 - 1",
                  "sample": f"latent_dist.sample(generator=torch.Generator().manual_seed({SAMPLE_SEED}))",
                  "checks": checks, "full_state_dict_entries": len(lines),
                  "versions": {"torch": torch.__version__, "diffusers": diffusers.__version__,
                               "python": platform.python_version()}}
        with open(os.path.join(args.out, "vae_tiny.json"), "w") as f:
            json.dump(record, f, indent=2)
            f.write("\n")
        print(f"wrote {args.out}: {len(tensors)} tensors, checks {json.dumps(checks)}, full VAE {len(lines)} entries")


if __name__ == "__main__":
    main()
