#!/usr/bin/env python3
"""An SD1.5-size pipeline folder with random weights, written by the references' own save_pretrained, for
timing `zest data prepare images` and `zest sample` at the real sizes where no released weights can be
fetched (the GPU machine reaches nothing outside): diffusers' UNet2DConditionModel and AutoencoderKL in
SD1.5's configuration (from the anchor's diffusers source), transformers' CLIPTextModel of ViT-L/14's text
tower, the CLIP tokenizer with OpenAI's full merges (tests/data/clip/merges.txt) and the vocabulary derived
from them as the released one is (49,408 tokens), the tiny SD1.5 folder's scheduler and model_index.json.
Also writes N random pictures with captions (metadata.jsonl) to --images.
Usage (checkout root, on the GPU machine): python3 bench/make_sd15_pipeline.py --ref-src .anchor/ref_src.tar.gz
       OUT_DIR [--images DIR --count N]
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(REPO, "tests", "data", "sd_tiny", "sd15")
sys.path.insert(0, os.path.join(REPO, "scripts", "golden"))
from golden_common import import_diffusers  # noqa: E402
from make_prepare_golden import byte_symbols  # noqa: E402

UNET = dict(sample_size=64, in_channels=4, out_channels=4, layers_per_block=2,
            block_out_channels=[320, 640, 1280, 1280], cross_attention_dim=768, attention_head_dim=8,
            down_block_types=["CrossAttnDownBlock2D"] * 3 + ["DownBlock2D"],
            up_block_types=["UpBlock2D"] + ["CrossAttnUpBlock2D"] * 3)
VAE = dict(in_channels=3, out_channels=3, latent_channels=4, layers_per_block=2, sample_size=512,
           block_out_channels=[128, 256, 512, 512], down_block_types=["DownEncoderBlock2D"] * 4,
           up_block_types=["UpDecoderBlock2D"] * 4, scaling_factor=0.18215)
TEXT = dict(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
            num_attention_heads=12, max_position_embeddings=77, hidden_act="quick_gelu", projection_dim=768)


def write_tokenizer(folder):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(REPO, "tests", "data", "clip", "merges.txt"), encoding="utf-8") as f:
        lines = [line for line in f.read().split("\n") if line]
    merges = lines[1:]
    symbols = byte_symbols()
    vocab = symbols + [s + "</w>" for s in symbols] + ["".join(m.split(" ")) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    assert len(vocab) == TEXT["vocab_size"], len(vocab)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(vocab)}, f, ensure_ascii=False)
    shutil.copy(os.path.join(TINY, "tokenizer", "tokenizer_config.json"), folder)


def released_layout(path):
    """transformers 5 saves CLIPTextModel without the `text_model.` prefix the released folders have."""
    from safetensors.torch import load_file, save_file
    tensors = load_file(path)
    save_file({(k if k.startswith("text_model.") else "text_model." + k): v for k, v in tensors.items()}, path,
              metadata={"format": "pt"})


def write_images(folder, count):
    from PIL import Image
    os.makedirs(folder, exist_ok=True)
    g = torch.Generator().manual_seed(5)
    words = ["a", "red", "lighthouse", "at", "dusk", "watercolor", "cat", "on", "the", "beach", "1920s", "photo"]
    with open(os.path.join(folder, "metadata.jsonl"), "w") as meta:
        for i in range(count):
            h, w = [512, 640, 768][i % 3], [640, 512, 768][(i // 3) % 3]
            coarse = torch.rand(3, h // 32, w // 32, generator=g)
            pixels = torch.nn.functional.interpolate(coarse[None], size=(h, w), mode="bilinear")[0]
            pixels = (pixels * 255).round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).contiguous().numpy()
            name = f"img_{i:05d}.png" if i % 2 else f"img_{i:05d}.jpg"
            Image.fromarray(pixels).save(os.path.join(folder, name))
            caption = " ".join(words[int(j)] for j in torch.randint(len(words), (8,), generator=g))
            meta.write(json.dumps({"file_name": name, "text": caption}) + "\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ref-src", required=True)
    parser.add_argument("out")
    parser.add_argument("--images")
    parser.add_argument("--count", type=int, default=256)
    args = parser.parse_args()
    import transformers
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        import_diffusers(args.ref_src, tmp)
        from diffusers import AutoencoderKL, UNet2DConditionModel
        UNet2DConditionModel(**UNET).save_pretrained(os.path.join(args.out, "unet"), safe_serialization=True)
        AutoencoderKL(**VAE).save_pretrained(os.path.join(args.out, "vae"), safe_serialization=True)
    text_encoder = os.path.join(args.out, "text_encoder")
    transformers.CLIPTextModel(transformers.CLIPTextConfig(**TEXT)).save_pretrained(text_encoder, safe_serialization=True)
    released_layout(os.path.join(text_encoder, "model.safetensors"))
    write_tokenizer(os.path.join(args.out, "tokenizer"))
    shutil.copytree(os.path.join(TINY, "scheduler"), os.path.join(args.out, "scheduler"), dirs_exist_ok=True)
    shutil.copy(os.path.join(TINY, "model_index.json"), args.out)
    if args.images:
        write_images(args.images, args.count)
    print(f"wrote {args.out}" + (f" and {args.count} pictures in {args.images}" if args.images else ""))


if __name__ == "__main__":
    main()
