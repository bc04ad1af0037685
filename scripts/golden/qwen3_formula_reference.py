#!/usr/bin/env python3
"""An independent Qwen3 decoder stack written from the formulas of transformers' modeling_qwen3 (not imported:
plain torch, 1.13 is enough, and no safetensors package), for the hytext suite's check of models/qwen3 where
transformers is not installed. Reads a model folder (config.json + model.safetensors in any float dtype) and
input ids / attention mask (.npy, int64 [B, T]); writes every hidden state as transformers' output_hidden_states
orders them, computed in float64, to OUT.npy [count, B, T, hidden].
Usage: python3 qwen3_formula_reference.py FOLDER IDS.npy MASK.npy OUT.npy
"""

import json
import struct
import sys

import numpy as np
import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    base = 8 + length
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(data[base + begin:base + end])
        t = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]) if raw else torch.zeros(0, dtype=DTYPES[info["dtype"]])
        tensors[name] = t.reshape(info["shape"]).to(torch.float64)
    return tensors


def rms_norm(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def main():
    folder, ids_path, mask_path, out_path = sys.argv[1:5]
    with open(folder + "/config.json") as f:
        c = json.load(f)
    w = read_safetensors(folder + "/model.safetensors")
    ids = torch.from_numpy(np.load(ids_path))
    mask = torch.from_numpy(np.load(mask_path)).bool()
    batch, length = ids.shape
    heads, kv, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    eps, theta = c["rms_norm_eps"], c.get("rope_theta", (c.get("rope_parameters") or {}).get("rope_theta", 10000.0))
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], -1)
    cos, sin = angles.cos(), angles.sin()

    def rope(x):
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rotated * sin

    allowed = torch.tril(torch.ones(length, length, dtype=torch.bool))[None, None] & mask[:, None, None, :]
    x = w["model.embed_tokens.weight"][ids]
    states = []
    for i in range(c["num_hidden_layers"]):
        states.append(x)
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(batch, length, heads, d)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(batch, length, kv, d)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(batch, length, kv, d).transpose(1, 2)
        q = rope(rms_norm(q, w[p + "self_attn.q_norm.weight"], eps).transpose(1, 2))
        k = rope(rms_norm(k, w[p + "self_attn.k_norm.weight"], eps).transpose(1, 2))
        k, v = k.repeat_interleave(heads // kv, 1), v.repeat_interleave(heads // kv, 1)
        scores = (q @ k.transpose(2, 3)) / d ** 0.5
        scores = scores.masked_fill(~allowed, torch.finfo(torch.float32).min)
        attn = torch.softmax(scores, -1) @ v
        x = x + attn.transpose(1, 2).reshape(batch, length, heads * d) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    states.append(rms_norm(x, w["model.norm.weight"], eps))
    np.save(out_path, torch.stack(states).numpy())


if __name__ == "__main__":
    main()
