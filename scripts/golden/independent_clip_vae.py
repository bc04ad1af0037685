#!/usr/bin/env python3
"""An independent re-implementation of the tiny CLIP text encoders and the tiny AutoencoderKL, written from
transformers' modeling_clip.py and diffusers' autoencoder_kl.py / vae.py semantics in plain torch (1.13 is
enough), writing files in the golden formats of make_clip_text_golden.py and make_vae_golden.py (random
parameters, not the reference's construction). For checking models/clip and models/vae on a machine without
transformers or diffusers; it does not replace the reference goldens:
    python3 scripts/golden/independent_clip_vae.py /tmp/x   # then copy /tmp/x/clip/* to tests/data/clip,
                                                            # /tmp/x/vae/* to tests/data/vae, run ctest -R "clip|vae"
"""
import json, os, struct, sys
import torch
import torch.nn.functional as F

def save_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        t = t.contiguous()
        dt = {torch.float32: "F32", torch.int64: "I64"}[t.dtype]
        data = t.numpy().tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data); blobs.append(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h)
        for b in blobs: f.write(b)

out = sys.argv[1]
g = torch.Generator().manual_seed(0)
def rnd(*shape, scale=0.2): return torch.randn(*shape, generator=g) * scale

# ---------------- CLIP text
def clip(act, proj, name, folder):
    V, H, I, L, NH, P, T = 512, 32, 64, 3, 4, 16, 24
    p = {"text_model.embeddings.token_embedding.weight": rnd(V, H), "text_model.embeddings.position_embedding.weight": rnd(P, H)}
    for i in range(L):
        pre = f"text_model.encoder.layers.{i}."
        for n in ("k_proj", "v_proj", "q_proj", "out_proj"):
            p[pre + f"self_attn.{n}.weight"] = rnd(H, H); p[pre + f"self_attn.{n}.bias"] = rnd(H)
        p[pre + "layer_norm1.weight"] = 1 + rnd(H); p[pre + "layer_norm1.bias"] = rnd(H)
        p[pre + "mlp.fc1.weight"] = rnd(I, H); p[pre + "mlp.fc1.bias"] = rnd(I)
        p[pre + "mlp.fc2.weight"] = rnd(H, I); p[pre + "mlp.fc2.bias"] = rnd(H)
        p[pre + "layer_norm2.weight"] = 1 + rnd(H); p[pre + "layer_norm2.bias"] = rnd(H)
    p["text_model.final_layer_norm.weight"] = 1 + rnd(H); p["text_model.final_layer_norm.bias"] = rnd(H)
    if proj: p["text_projection.weight"] = rnd(T, H)
    ids = torch.full((3, 16), 511, dtype=torch.int64); ids[:, 0] = 510
    ids[0, 1:6] = torch.randint(1, 500, (5,), generator=g); ids[1, 1:15] = torch.randint(1, 500, (14,), generator=g); ids[2, 2:] = 0
    f = (lambda x: x * torch.sigmoid(1.702 * x)) if act == "quick_gelu" else (lambda x: F.gelu(x))
    h = p["text_model.embeddings.token_embedding.weight"][ids] + p["text_model.embeddings.position_embedding.weight"][:16]
    mask = torch.full((16, 16), float("-inf")).triu(1)
    hs = [h]
    for i in range(L):
        pre = f"text_model.encoder.layers.{i}."
        lin = lambda x, n: F.linear(x, p[pre + n + ".weight"], p[pre + n + ".bias"])
        r = h; x = F.layer_norm(h, (H,), p[pre + "layer_norm1.weight"], p[pre + "layer_norm1.bias"], 1e-5)
        sp = lambda t: t.view(3, 16, NH, H // NH).transpose(1, 2)
        q, k, v = sp(lin(x, "self_attn.q_proj")), sp(lin(x, "self_attn.k_proj")), sp(lin(x, "self_attn.v_proj"))
        w = torch.softmax(q @ k.transpose(-1, -2) * (H // NH) ** -0.5 + mask, -1)
        a = (w @ v).transpose(1, 2).reshape(3, 16, H)
        h = r + lin(a, "self_attn.out_proj")
        r = h; x = F.layer_norm(h, (H,), p[pre + "layer_norm2.weight"], p[pre + "layer_norm2.bias"], 1e-5)
        h = r + lin(f(lin(x, "mlp.fc1")), "mlp.fc2")
        hs.append(h)
    last = F.layer_norm(h, (H,), p["text_model.final_layer_norm.weight"], p["text_model.final_layer_norm.bias"], 1e-5)
    pos = (ids == 511).int().argmax(-1)
    pooled = last[torch.arange(3), pos]
    t = {f"param.{k}": v for k, v in p.items()}
    t["input.input_ids"] = ids
    t["output.last_hidden_state"] = last; t["output.pooler_output"] = pooled
    for i, x in enumerate(hs): t[f"output.hidden_states.{i}"] = x
    if proj: t["output.text_embeds"] = F.linear(pooled, p["text_projection.weight"])
    save_safetensors(os.path.join(out, name + ".safetensors"), t)
    os.makedirs(os.path.join(out, folder), exist_ok=True)
    save_safetensors(os.path.join(out, folder, "model.safetensors"), dict(p, **{"text_model.embeddings.position_ids": torch.arange(16).view(1, 16)}))
    cfg = {"architectures": ["CLIPTextModelWithProjection" if proj else "CLIPTextModel"], "model_type": "clip_text_model",
           "vocab_size": V, "hidden_size": H, "intermediate_size": I, "projection_dim": T, "num_hidden_layers": L,
           "num_attention_heads": NH, "max_position_embeddings": P, "hidden_act": act, "layer_norm_eps": 1e-5,
           "eos_token_id": 511, "bos_token_id": 510, "pad_token_id": 1, "torch_dtype": "float32"}
    json.dump(cfg, open(os.path.join(out, folder, "config.json"), "w"))

os.makedirs(out + "/clip", exist_ok=True)
clip("quick_gelu", False, "clip/clip_text_tiny", "clip/text_encoder_tiny")
clip("gelu", True, "clip/clip_text_proj_tiny", "clip/text_encoder_2_tiny")

# ---------------- VAE (block_out [8, 16], layers 1, groups 4)
C, G, LAT = [8, 16], 4, 4
p = {}
def conv(name, cin, cout, k): p[name + ".weight"] = rnd(cout, cin, k, k); p[name + ".bias"] = rnd(cout)
def gn(name, c): p[name + ".weight"] = 1 + rnd(c); p[name + ".bias"] = rnd(c)
def lin_(name, c): p[name + ".weight"] = rnd(c, c); p[name + ".bias"] = rnd(c)
def resnet(name, cin, cout):
    gn(name + ".norm1", cin); conv(name + ".conv1", cin, cout, 3); gn(name + ".norm2", cout); conv(name + ".conv2", cout, cout, 3)
    if cin != cout: conv(name + ".conv_shortcut", cin, cout, 1)
def mid(name, c):
    resnet(name + ".resnets.0", c, c)
    gn(name + ".attentions.0.group_norm", c)
    for n in ("to_q", "to_k", "to_v", "to_out.0"): lin_(name + ".attentions.0." + n, c)
    resnet(name + ".resnets.1", c, c)
conv("encoder.conv_in", 3, 8, 3)
resnet("encoder.down_blocks.0.resnets.0", 8, 8); conv("encoder.down_blocks.0.downsamplers.0.conv", 8, 8, 3)
resnet("encoder.down_blocks.1.resnets.0", 8, 16)
mid("encoder.mid_block", 16); gn("encoder.conv_norm_out", 16); conv("encoder.conv_out", 16, 8, 3)
conv("decoder.conv_in", 4, 16, 3)
for j in range(2): resnet(f"decoder.up_blocks.0.resnets.{j}", 16, 16)
conv("decoder.up_blocks.0.upsamplers.0.conv", 16, 16, 3)
resnet("decoder.up_blocks.1.resnets.0", 16, 8); resnet("decoder.up_blocks.1.resnets.1", 8, 8)
mid("decoder.mid_block", 16); gn("decoder.conv_norm_out", 8); conv("decoder.conv_out", 8, 3, 3)
conv("quant_conv", 8, 8, 1); conv("post_quant_conv", 4, 4, 1)
def C2(x, n, pad=1, stride=1): return F.conv2d(x, p[n + ".weight"], p[n + ".bias"], stride=stride, padding=pad)
def GN(x, n): return F.group_norm(x, G, p[n + ".weight"], p[n + ".bias"], 1e-6)
def RES(x, n):
    h = C2(F.silu(GN(x, n + ".norm1")), n + ".conv1"); h = C2(F.silu(GN(h, n + ".norm2")), n + ".conv2")
    s = C2(x, n + ".conv_shortcut", pad=0) if n + ".conv_shortcut.weight" in p else x
    return s + h
def ATT(x, n):
    B, Cc, Hh, Ww = x.shape
    h = GN(x, n + ".group_norm").view(B, Cc, Hh * Ww).transpose(1, 2)
    q, k, v = [F.linear(h, p[n + f".{m}.weight"], p[n + f".{m}.bias"]) for m in ("to_q", "to_k", "to_v")]
    a = torch.softmax(q @ k.transpose(1, 2) / Cc ** 0.5, -1) @ v
    a = F.linear(a, p[n + ".to_out.0.weight"], p[n + ".to_out.0.bias"])
    return a.transpose(-1, -2).reshape(B, Cc, Hh, Ww) + x
def MID(x, n): return RES(ATT(RES(x, n + ".resnets.0"), n + ".attentions.0"), n + ".resnets.1")
def enc(x):
    h = C2(x, "encoder.conv_in"); h = RES(h, "encoder.down_blocks.0.resnets.0")
    h = C2(F.pad(h, (0, 1, 0, 1)), "encoder.down_blocks.0.downsamplers.0.conv", pad=0, stride=2)
    h = RES(h, "encoder.down_blocks.1.resnets.0"); h = MID(h, "encoder.mid_block")
    h = C2(F.silu(GN(h, "encoder.conv_norm_out")), "encoder.conv_out")
    return C2(h, "quant_conv", pad=0)
def dec(z):
    h = C2(C2(z, "post_quant_conv", pad=0), "decoder.conv_in"); h = MID(h, "decoder.mid_block")
    for j in range(2): h = RES(h, f"decoder.up_blocks.0.resnets.{j}")
    h = C2(F.interpolate(h, scale_factor=2.0, mode="nearest"), "decoder.up_blocks.0.upsamplers.0.conv")
    for j in range(2): h = RES(h, f"decoder.up_blocks.1.resnets.{j}")
    return C2(F.silu(GN(h, "decoder.conv_norm_out")), "decoder.conv_out")
images = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(100)) * 2 - 1
m = enc(images); mean, logvar = m.chunk(2, 1); logvar = logvar.clamp(-30, 20); std = torch.exp(0.5 * logvar)
sample = mean + std * torch.randn(mean.shape, generator=torch.Generator().manual_seed(7))
t = {f"param.{k}": v for k, v in p.items()}
t.update({"input.images": images, "output.mean": mean, "output.logvar": logvar, "output.std": std, "output.sample": sample,
          "output.decoded": dec(mean), "output.decoded_sample": dec(sample)})
os.makedirs(out + "/vae/vae_tiny", exist_ok=True)
save_safetensors(out + "/vae/vae_tiny.safetensors", t)
save_safetensors(out + "/vae/vae_tiny/diffusion_pytorch_model.safetensors", p)
json.dump({"_class_name": "AutoencoderKL", "block_out_channels": C, "layers_per_block": 1, "norm_num_groups": G, "latent_channels": LAT,
           "down_block_types": ["DownEncoderBlock2D"] * 2, "up_block_types": ["UpDecoderBlock2D"] * 2, "scaling_factor": 0.13025},
          open(out + "/vae/vae_tiny/config.json", "w"))
print("ok")
