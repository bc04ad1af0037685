#!/usr/bin/env python3
"""How much of HY-Motion's dense attention its mask leaves to compute (issue 38's next lever, no GPU needed).

The MMDiT's bias (models/hymotion/attention_mask.cpp) over the joint [motion ; text] sequence: motion queries
see valid motion keys within the narrow band and valid text keys; text queries see valid text keys only.
For `zest bench`'s synthetic batches (valid motion lengths uniform in [60, L], text lengths in [8, T]) this
prints, per tile size, the share of (query tile, key tile) pairs holding any allowed pair (what a
block-sparse attention would still compute) and the share of allowed (query, key) pairs, with padded query
rows computed (as now) and skipped (their outputs feed nothing the loss sees).

    /usr/bin/python3 bench/attention_mask_sparsity.py [--motion 360 --text 128 --band 60 --samples 256]
"""
import argparse

import torch


def allowed_pairs(motion, text, band, motion_valid, text_valid, skip_padded_queries):
    joint = motion + text
    q = torch.arange(joint)[:, None]
    k = torch.arange(joint)[None, :]
    q_motion, k_motion = q < motion, k < motion
    k_text_valid = (k - motion) < text_valid
    allowed = (q_motion & k_motion & ((q - k).abs() <= band) & (k < motion_valid)) \
        | (q_motion & ~k_motion & k_text_valid) | (~q_motion & ~k_motion & k_text_valid)
    if skip_padded_queries:
        allowed &= (q_motion & (q < motion_valid)) | (~q_motion & ((q - motion) < text_valid))
    return allowed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--motion", type=int, default=360)
    ap.add_argument("--text", type=int, default=128)
    ap.add_argument("--band", type=int, default=60, help="narrow-band half width in frames (2 s at 30 fps)")
    ap.add_argument("--min-motion", type=int, default=60)
    ap.add_argument("--min-text", type=int, default=8)
    ap.add_argument("--samples", type=int, default=256)
    args = ap.parse_args()
    joint = args.motion + args.text
    gen = torch.Generator().manual_seed(0)
    lengths = [(int(torch.randint(args.min_motion, args.motion + 1, (1,), generator=gen)),
                int(torch.randint(args.min_text, args.text + 1, (1,), generator=gen))) for _ in range(args.samples)]
    print(f"joint sequence {joint} ({args.motion} motion + {args.text} text), band ±{args.band}, {args.samples} samples")
    tile_sizes = (64, 128)
    for skip in (False, True):
        pairs = 0
        used = {tile: 0 for tile in tile_sizes}
        for m, t in lengths:
            allowed = allowed_pairs(args.motion, args.text, args.band, m, t, skip)
            pairs += allowed.sum().item()
            for tile in tile_sizes:
                tiles = (joint + tile - 1) // tile
                a = torch.nn.functional.pad(allowed, (0, tiles * tile - joint, 0, tiles * tile - joint))
                used[tile] += a.view(tiles, tile, tiles, tile).any(3).any(1).sum().item()
        print(f"padded query rows {'skipped' if skip else 'computed'}: allowed pairs "
              f"{pairs / (args.samples * joint * joint):.3f} of dense")
        for tile in tile_sizes:
            tiles = (joint + tile - 1) // tile
            print(f"  {tile}x{tile} tiles holding an allowed pair: {used[tile] / (args.samples * tiles * tiles):.3f}")

if __name__ == "__main__":
    main()
