#!/usr/bin/env python3
"""Golden vectors for models/clip/clip_text_model: transformers' CLIPTextModel (SD1.5's text_encoder, quick-GELU)
and CLIPTextModelWithProjection (SDXL's text_encoder_2, GELU) in tiny configurations, plus the state-dict
names and shapes of the full-size encoders.

Writes into OUT (default $OUT, else tests/data/clip):
  clip_text_tiny.safetensors / clip_text_proj_tiny.safetensors: param.<state-dict name>, input.input_ids,
      output.last_hidden_state, output.pooler_output, output.hidden_states.<i> (all of them),
      output.text_embeds (projection model only); float32 on the CPU.
  clip_text_tiny.json: the configurations, construction, versions and the cross-checks.
  text_encoder_tiny/, text_encoder_2_tiny/: the same models written by save_pretrained (config.json +
      model.safetensors), the folder format a pipeline ships.
  clip_text_sd15_state_dict.txt, clip_text_sdxl_2_state_dict.txt: "name<TAB>[shape]" of the full-size
      encoders (built on the meta device).
Needs torch, transformers and safetensors. Usage:
    python3 scripts/golden/make_clip_text_golden.py [OUT_DIR]
"""

import json
import os
import platform
import sys

import torch

from golden_common import perturb_constant_tensors

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

TINY = {
    "vocab_size": 512,
    "hidden_size": 32,
    "intermediate_size": 64,
    "projection_dim": 24,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "max_position_embeddings": 16,
    "layer_norm_eps": 1e-5,
    "attention_dropout": 0.0,
    "bos_token_id": 510,
    "eos_token_id": 511,
    "pad_token_id": 1,
}
SPECS = {
    "clip_text_tiny": {"cls": "CLIPTextModel", "hidden_act": "quick_gelu", "folder": "text_encoder_tiny"},
    "clip_text_proj_tiny": {"cls": "CLIPTextModelWithProjection", "hidden_act": "gelu",
                            "folder": "text_encoder_2_tiny"},
}
# The released encoders: SD1.5's text_encoder (and SDXL's first) is CLIP ViT-L/14's, SDXL's text_encoder_2
# OpenCLIP ViT-bigG/14's.
FULL = {
    "clip_text_sd15": ("CLIPTextModel", {"hidden_size": 768, "intermediate_size": 3072, "projection_dim": 768,
                                         "num_hidden_layers": 12, "num_attention_heads": 12,
                                         "hidden_act": "quick_gelu"}),
    "clip_text_sdxl_2": ("CLIPTextModelWithProjection", {"hidden_size": 1280, "intermediate_size": 5120,
                                                          "projection_dim": 1280, "num_hidden_layers": 32,
                                                          "num_attention_heads": 20, "hidden_act": "gelu"}),
}
CONSTRUCTION_SEED, PERTURB_SEED, INPUT_SEED = 0, 1000, 100


def inputs():
    """Three rows of 16: a short caption padded with the end token (SD1.5's tokenizer), one that fills the
    sequence, and an empty caption padded with id 0 (SDXL's tokenizer_2 pads with "!" = 0)."""
    generator = torch.Generator().manual_seed(INPUT_SEED)
    body = torch.randint(1, 500, (3, 16), generator=generator)
    ids = torch.full((3, 16), TINY["eos_token_id"], dtype=torch.int64)
    ids[:, 0] = TINY["bos_token_id"]
    ids[0, 1:6] = body[0, 1:6]   # eos at 6, then end-token padding
    ids[1, 1:15] = body[1, 1:15]  # eos at 15
    ids[2, 2:] = 0                # eos at 1, then "!" padding
    return ids


def forward(model, ids):
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
        result = {"last_hidden_state": out.last_hidden_state}
        if getattr(out, "text_embeds", None) is not None:
            result["text_embeds"] = out.text_embeds
            # The pooled state before the projection too, for the C++ side to check it first (the
            # projection model's output has no pooler_output).
            result["pooler_output"] = model.text_model(input_ids=ids).pooler_output
        else:
            result["pooler_output"] = out.pooler_output
    for i, h in enumerate(out.hidden_states):
        result[f"hidden_states.{i}"] = h
    return result


def max_abs_diff(a, b):
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def main():
    import safetensors
    import transformers
    from safetensors.torch import load_file, save_file

    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT") or os.path.join(REPO, "tests", "data", "clip")
    os.makedirs(out_dir, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, safetensors {safetensors.__version__}")
    record = {"what": "scripts/golden/make_clip_text_golden.py", "tiny_config": TINY, "models": {},
              "construction": (f"torch.manual_seed({CONSTRUCTION_SEED}); model = cls(CLIPTextConfig(**config)).float()"
                               f".eval(); identically-0/1 floating tensors perturbed from "
                               f"torch.Generator().manual_seed({PERTURB_SEED}) in state-dict order"),
              "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                           "safetensors": safetensors.__version__, "python": platform.python_version()}}
    ids = inputs()
    for name, spec in SPECS.items():
        cls = getattr(transformers, spec["cls"])
        config = transformers.CLIPTextConfig(**TINY, hidden_act=spec["hidden_act"])
        torch.manual_seed(CONSTRUCTION_SEED)
        model = cls(config).float().eval()
        perturbed = perturb_constant_tensors(model)
        outputs = forward(model, ids)
        tensors = {f"param.{k}": v.detach().clone().contiguous() for k, v in model.state_dict().items()
                   if k != "text_model.embeddings.position_ids"}
        tensors["input.input_ids"] = ids
        tensors.update({f"output.{k}": v.detach().clone().contiguous() for k, v in outputs.items()})
        path = os.path.join(out_dir, f"{name}.safetensors")
        save_file(tensors, path)
        folder = os.path.join(out_dir, spec["folder"])
        model.save_pretrained(folder, safe_serialization=True)

        checks = {"attn_implementation": getattr(model.config, "_attn_implementation", None),
                  "pooled_positions": [6, 15, 1]}
        reloaded = cls.from_pretrained(folder).float().eval()
        checks["save_pretrained_reload_max_abs_diff"] = max_abs_diff(outputs, forward(reloaded, ids))
        try:
            eager = cls.from_pretrained(folder, attn_implementation="eager").float().eval()
            checks["eager_attention_max_abs_diff"] = max_abs_diff(outputs, forward(eager, ids))
        except Exception as error:  # noqa: BLE001 (recorded, not fatal)
            checks["eager_attention"] = f"not run: {error}"
        double = cls.from_pretrained(folder).double().eval()
        checks["float64_max_abs_diff"] = max_abs_diff(outputs, forward(double, ids))
        if torch.cuda.is_available():
            cuda = cls.from_pretrained(folder).float().eval().cuda()
            with torch.no_grad():
                got = forward(cuda, ids.cuda())
            checks["cuda_float32_max_abs_diff"] = max_abs_diff(outputs, {k: v.cpu() for k, v in got.items()})
        loaded = load_file(os.path.join(folder, "model.safetensors"))
        checks["save_pretrained_keys"] = sorted(loaded)
        record["models"][name] = {"class": spec["cls"], "hidden_act": spec["hidden_act"], "folder": spec["folder"],
                                  "perturbed_tensors": perturbed, "checks": checks}
        print(f"  {name}: {spec['cls']}, {len(tensors)} tensors -> {path}; {json.dumps({k: v for k, v in checks.items() if k != 'save_pretrained_keys'})}")

    for name, (cls_name, fields) in FULL.items():
        config = transformers.CLIPTextConfig(vocab_size=49408, max_position_embeddings=77, **fields)
        with torch.device("meta"):
            model = getattr(transformers, cls_name)(config)
        lines = [f"{k}\t{list(v.shape)}" for k, v in model.state_dict().items()]
        path = os.path.join(out_dir, f"{name}_state_dict.txt")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"  {name}: {len(lines)} state-dict entries -> {path}")

    with open(os.path.join(out_dir, "clip_text_tiny.json"), "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    print(f"wrote {out_dir}")


if __name__ == "__main__":
    main()
