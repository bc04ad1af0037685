#!/usr/bin/env python3
"""Golden output for `zest data prepare images` (tests/prepare/test_prepare_golden.cpp): a tiny SDXL-shaped
pipeline made and saved by the references themselves (diffusers' AutoencoderKL, transformers'
CLIPTextModel / CLIPTextModelWithProjection / CLIPTokenizer, save_pretrained), a few of the test images of
tests/data/prepare with captions, and what diffusers' train_text_to_image_sdxl.py computes for them at
--resolution 16 --center_crop: the PIL image convert("RGB"), torchvision Resize(16, BILINEAR) +
CenterCrop(16) + ToTensor + Normalize(0.5, 0.5); vae.encode(x).latent_dist.sample(generator) ·
scaling_factor with torch.Generator().manual_seed(SEED + i) for the i-th image in sorted file order (zest's
documented seeding); encode_prompt's hidden_states[-2] of both encoders concatenated and text_encoder_2's
projected pooled output; (original_h, original_w, crop_top, crop_left, 16, 16); and the same for "".

The tokenizers use the first 2000 merges of tests/data/clip/merges.txt (OpenAI's, MIT) with the
vocabulary derived as the released one is. diffusers is imported from --ref-src (ref_src.tar.gz or a
folder with src/diffusers); transformers, torchvision and PIL must be installed.
Writes tests/data/prepare/golden/ (pipe/, images/, expected.safetensors, expected.json).
Usage (repository root, on the machine with transformers):
    python3 scripts/golden/make_prepare_golden.py --ref-src ../shared/anchor/ref_src.tar.gz
"""

import argparse
import json
import os
import shutil
import tempfile

import torch

from golden_common import import_diffusers

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(REPO, "tests", "data", "prepare", "golden")
SEED = 3
RESOLUTION = 16
MERGES = 2000
IMAGES = {  # file in tests/data/prepare → caption
    "rgb_37x23.png": "a colourful test card, 37 by 23",
    "rgb_120x80.png": "noise with a red gradient!",
    "palette_9x7.png": "Eight colours; tiny & upscaled",
}


def byte_symbols():
    printable = lambda b: (ord("!") <= b <= ord("~")) or (0xA1 <= b <= 0xAC) or (0xAE <= b <= 0xFF)
    symbols = [chr(b) for b in range(256) if printable(b)]
    n = 256
    for b in range(256):
        if not printable(b):
            symbols.append(chr(n))
            n += 1
    return symbols


def write_tokenizer_files(folder):
    """vocab.json + merges.txt as the released CLIP tokenizers have them, from the first MERGES merges."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(REPO, "tests", "data", "clip", "merges.txt"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    merges = lines[1:MERGES + 1]
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write(lines[0] + "\n" + "\n".join(merges) + "\n")
    symbols = byte_symbols()
    vocab = symbols + [s + "</w>" for s in symbols] + ["".join(m.split(" ")) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(vocab)}, f, ensure_ascii=False)
    return len(vocab)


def randomize(model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ref-src", required=True)
    args = parser.parse_args()
    import PIL
    import transformers
    from PIL import Image
    from safetensors.torch import save_file
    try:
        import torchvision
        from torchvision import transforms
    except ImportError:  # what those transforms do on a PIL image, spelled out
        torchvision = None
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    shutil.rmtree(OUT, ignore_errors=True)
    pipe = os.path.join(OUT, "pipe")
    with tempfile.TemporaryDirectory() as tmp:
        AutoencoderKL = import_diffusers(args.ref_src, tmp).AutoencoderKL
        import diffusers

        tokenizers, encoders = [], []
        for i, (sub, pad, hidden, act, cls) in enumerate([
                ("", "<|endoftext|>", 4, "quick_gelu", CLIPTextModel),
                ("_2", "!", 8, "gelu", CLIPTextModelWithProjection)]):
            raw = os.path.join(tmp, "tok" + sub)
            vocab_size = write_tokenizer_files(raw)
            tok = CLIPTokenizer(os.path.join(raw, "vocab.json"), os.path.join(raw, "merges.txt"), pad_token=pad,
                                model_max_length=77)
            tok.save_pretrained(os.path.join(pipe, "tokenizer" + sub))
            config = CLIPTextConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                                    projection_dim=hidden if sub else 4, num_hidden_layers=2, num_attention_heads=2,
                                    max_position_embeddings=77, hidden_act=act, bos_token_id=vocab_size - 2,
                                    eos_token_id=vocab_size - 1, pad_token_id=1)
            model = cls(config).eval()
            randomize(model, 31 + i)
            model.save_pretrained(os.path.join(pipe, "text_encoder" + sub), safe_serialization=True)
            tokenizers.append(CLIPTokenizer.from_pretrained(os.path.join(pipe, "tokenizer" + sub)))
            encoders.append(model)
        vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 2,
                            up_block_types=["UpDecoderBlock2D"] * 2, block_out_channels=[8, 16], layers_per_block=1,
                            act_fn="silu", latent_channels=4, norm_num_groups=4, sample_size=16,
                            scaling_factor=0.13025, force_upcast=True).eval()
        randomize(vae, 33)
        vae.save_pretrained(os.path.join(pipe, "vae"), safe_serialization=True)

        images_dir = os.path.join(OUT, "images")
        os.makedirs(images_dir)
        if torchvision is not None:
            resize = transforms.Resize(RESOLUTION, interpolation=transforms.InterpolationMode.BILINEAR)
            crop = transforms.CenterCrop(RESOLUTION)
            to_tensor = transforms.Compose([transforms.ToTensor(), transforms.Normalize([0.5], [0.5])])
        else:
            def resize(im):
                short, long = sorted((im.width, im.height))
                new_long = int(RESOLUTION * long / short)
                size = (RESOLUTION, new_long) if im.width <= im.height else (new_long, RESOLUTION)
                return im.resize(size, Image.BILINEAR)

            def crop(im):
                top = int(round((im.height - RESOLUTION) / 2.0))
                left = int(round((im.width - RESOLUTION) / 2.0))
                return im.crop((left, top, left + RESOLUTION, top + RESOLUTION))

            def to_tensor(im):
                import numpy as np
                x = torch.from_numpy(np.array(im, copy=True)).permute(2, 0, 1).float().div(255)
                return (x - 0.5) / 0.5

        def encode_prompt(captions):
            states = []
            for tok, enc in zip(tokenizers, encoders):
                ids = tok(captions, padding="max_length", max_length=tok.model_max_length, truncation=True,
                          return_tensors="pt").input_ids
                out = enc(ids, output_hidden_states=True)
                pooled = out[0]
                states.append(out.hidden_states[-2])
            return torch.cat(states, dim=-1), pooled

        latents, tokens, pooled, time_ids, names = [], [], [], [], []
        with torch.no_grad():
            for i, name in enumerate(sorted(IMAGES)):
                shutil.copy(os.path.join(REPO, "tests", "data", "prepare", name), os.path.join(images_dir, name))
                with open(os.path.join(images_dir, os.path.splitext(name)[0] + ".txt"), "w", encoding="utf-8") as f:
                    f.write(IMAGES[name] + "\n")
                image = Image.open(os.path.join(images_dir, name)).convert("RGB")
                original = (image.height, image.width)
                image = resize(image)
                top = max(0, int(round((image.height - RESOLUTION) / 2.0)))
                left = max(0, int(round((image.width - RESOLUTION) / 2.0)))
                pixels = to_tensor(crop(image)).unsqueeze(0)
                dist = vae.encode(pixels).latent_dist
                sample = dist.sample(generator=torch.Generator().manual_seed(SEED + i))
                latents.append(sample[0] * vae.config.scaling_factor)
                seq, pool = encode_prompt([IMAGES[name]])
                tokens.append(seq[0])
                pooled.append(pool[0])
                time_ids.append(torch.tensor([*original, top, left, RESOLUTION, RESOLUTION], dtype=torch.float32))
                names.append(name)
            empty_seq, empty_pool = encode_prompt([""])
        save_file({"latents": torch.stack(latents).contiguous(), "text_embeds_seq": torch.stack(tokens).contiguous(),
                   "pooled": torch.stack(pooled).contiguous(), "time_ids": torch.stack(time_ids).contiguous(),
                   "empty_text_embeds_seq": empty_seq[0].contiguous(), "empty_pooled": empty_pool[0].contiguous()},
                  os.path.join(OUT, "expected.safetensors"))
        with open(os.path.join(OUT, "expected.json"), "w") as f:
            json.dump({"images": names, "seed": SEED, "resolution": RESOLUTION, "center_crop": True,
                       "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                    "diffusers": diffusers.__version__, "torchvision": torchvision.__version__ if torchvision else "absent (PIL directly)",
                                    "PIL": PIL.__version__}}, f, indent=2)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
