#!/usr/bin/env python3
"""Reference numbers for zest's image decoding and preprocessing (tests/prepare/test_image_preprocess.cpp),
from PIL itself: the test images of tests/data/prepare/ (written here, deterministic), what
Image.open(f).convert("RGB") gives for each, PIL's BILINEAR resize of two of them to several sizes, and
the [-1, 1] center crop diffusers' train_text_to_image.py computes (torchvision's Resize(r) on a PIL
image is Image.resize(size, BILINEAR) with size as computed below; ToTensor + Normalize(0.5, 0.5)).

Needs only PIL and numpy (Debian: python3-pil, python3-numpy). Run from the repository root:
    /usr/bin/python3 scripts/golden/make_image_reference.py
"""
import io
import json
import os
import struct
import zlib

import numpy as np
from PIL import Image

OUT = "tests/data/prepare"


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def write_png16(path, array):
    """A 16-bit PNG (grey [H, W] or RGB [H, W, 3] uint16), written by hand: PIL cannot write 16-bit RGB."""
    h, w = array.shape[:2]
    colour = 2 if array.ndim == 3 else 0
    raw = b"".join(b"\x00" + array[y].astype(">u2").tobytes() for y in range(h))
    data = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, colour, 0, 0, 0))
    data += png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(data)


def torchvision_resize_size(w, h, r):
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = r, int(r * long / short)
    return (new_short, new_long) if w <= h else (new_long, new_short)  # (width, height)


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(1234)
    # A photo-like test card: smooth gradients plus noise, so resampling errors show.
    yy, xx = np.mgrid[0:23, 0:37]
    base = np.stack([xx * 7, yy * 11, (xx + yy) * 5], axis=-1) % 256
    rgb = np.clip(base + rng.integers(-40, 40, base.shape), 0, 255).astype(np.uint8)
    Image.fromarray(rgb, "RGB").save(f"{OUT}/rgb_37x23.png")
    big = rng.integers(0, 256, (80, 120, 3)).astype(np.uint8)
    big[:, :, 0] = np.linspace(0, 255, 120).astype(np.uint8)[None, :]
    Image.fromarray(big, "RGB").save(f"{OUT}/rgb_120x80.png")
    small = rng.integers(0, 256, (7, 9, 4)).astype(np.uint8)
    Image.fromarray(small[:, :, 0], "L").save(f"{OUT}/grey_9x7.png")
    Image.fromarray(small[:, :, :2], "LA").save(f"{OUT}/grey_alpha_9x7.png")
    Image.fromarray(small, "RGBA").save(f"{OUT}/rgba_9x7.png")
    Image.fromarray(small[:, :, :3], "RGB").quantize(colors=8).save(f"{OUT}/palette_9x7.png")
    write_png16(f"{OUT}/rgb16_9x7.png", rng.integers(0, 65536, (7, 9, 3)).astype(np.uint16))
    Image.fromarray(rgb, "RGB").save(f"{OUT}/rgb_37x23.jpg", quality=90)
    Image.fromarray(small, "RGBA").convert("CMYK").save(f"{OUT}/cmyk_9x7.jpg")

    ref = {"decoded": {}, "resized": [], "center_crop": {}}
    for name in ["rgb_37x23.png", "grey_9x7.png", "grey_alpha_9x7.png", "rgba_9x7.png", "palette_9x7.png",
                 "rgb16_9x7.png", "rgb_37x23.jpg"]:
        im = Image.open(f"{OUT}/{name}")
        mode = im.mode
        rgb_im = im.convert("RGB")
        ref["decoded"][name] = {"mode": mode, "width": rgb_im.width, "height": rgb_im.height,
                                "rgb": np.asarray(rgb_im).tobytes().hex()}
    for name, sizes in [("rgb_37x23.png", [(25, 16), (102, 64), (11, 40), (37, 5), (36, 23)]),
                        ("rgb_120x80.png", [(20, 13), (48, 32), (121, 79)])]:
        im = Image.open(f"{OUT}/{name}").convert("RGB")
        for w, h in sizes:
            out = im.resize((w, h), Image.BILINEAR)
            ref["resized"].append({"image": name, "width": w, "height": h, "rgb": np.asarray(out).tobytes().hex()})
    # train_text_to_image.py at --resolution 16 --center_crop on rgb_37x23.png.
    im = Image.open(f"{OUT}/rgb_37x23.png").convert("RGB")
    w, h = torchvision_resize_size(im.width, im.height, 16)
    resized = im.resize((w, h), Image.BILINEAR)
    top, left = int(round((h - 16) / 2.0)), int(round((w - 16) / 2.0))
    crop = np.asarray(resized)[top:top + 16, left:left + 16].astype(np.float32)
    values = ((crop / np.float32(255)) - np.float32(0.5)) / np.float32(0.5)
    ref["center_crop"] = {"image": "rgb_37x23.png", "resolution": 16, "resized_width": w, "resized_height": h,
                          "top": top, "left": left, "chw": values.transpose(2, 0, 1).reshape(-1).tolist()}
    import PIL
    ref["pil_version"] = PIL.__version__
    with open(f"{OUT}/image_reference.json", "w") as f:
        json.dump(ref, f)
    print("wrote", OUT, "with PIL", PIL.__version__)


if __name__ == "__main__":
    main()
