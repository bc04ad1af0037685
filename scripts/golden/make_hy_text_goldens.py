#!/usr/bin/env python3
"""Golden vectors for HY-Motion's text side (models/qwen3, the Qwen tokenizer, the release's feature rule and
CLIP-L's pooled output): transformers' Qwen3 and CLIP text models at tiny random configurations, a tiny
byte-level BPE tokenizer built the way Qwen's is, and the release's own HYTextModel.encode
(hymotion/network/text_encoders/text_encoder.py of the anchor's ref_src.tar.gz) run on them.

No network and no model hub: every tokenizer and model is built here. Needs torch, transformers, tokenizers
and safetensors. Writes into OUT (argument; default $OUT, else tests/data/hy_text):
  qwen3_tiny/            config.json + model.safetensors (bfloat16, as Qwen3-8B ships) + tokenizer.json,
                         tokenizer_config.json (Qwen3's chat template), vocab.json, merges.txt
  qwen3_tiny_sharded/    another config (tied embeddings, float32) as model-0000N-of-00003.safetensors +
                         model.safetensors.index.json
  clip_l_tiny/           a tiny CLIPModel (text + vision, as clip-vit-large-patch14 ships) + its tokenizer
  hy_text_golden.safetensors  qwen.* (hidden states of a raw forward), sharded.*, features.* (encode)
  hy_text_golden.json    texts, token ids, chat texts, crop_start, configs, versions, cross-checks
Usage:
    python3 scripts/golden/make_hy_text_goldens.py [--ref-src PATH] [OUT_DIR]
--ref-src: ref_src.tar.gz or a folder holding hymotion/ (default: the first of .anchor/ref_src.tar.gz,
shared/anchor/ref_src.tar.gz, ../shared/anchor/ref_src.tar.gz, /work/shared/anchor/ref_src.tar.gz).
"""

import argparse
import json
import os
import platform
import sys
import tarfile
import tempfile
import traceback

import torch

from golden_common import bytes_to_unicode, perturb_constant_tensors

# No hub: every model and tokenizer is a local folder made here.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

CONSTRUCTION_SEED, PERTURB_SEED, INPUT_SEED = 0, 1000, 100
MAX_LENGTH_LLM = 32   # the release uses 128 with Qwen3-8B; small here to keep the files small
MAX_LENGTH_CLIP = 77

# Qwen2/Qwen3's pre-tokenizer split rule (tokenizer.json pre_tokenizer.pretokenizers[0].pattern.Regex).
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen3's added tokens in id order (content, special); ids follow the BPE vocabulary as Qwen's 151643... do.
QWEN_ADDED = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
              ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
              ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
              ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
              ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
              ("<|fim_prefix|>", True), ("<|fim_middle|>", True), ("<|fim_suffix|>", True), ("<|fim_pad|>", True),
              ("<|repo_name|>", True), ("<|file_sep|>", True), ("<tool_response>", False),
              ("</tool_response>", False), ("<think>", False), ("</think>", False)]

# Qwen3's chat template (tokenizer_config.json of the Qwen3 releases).
QWEN3_CHAT_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for forward_message in messages %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- set message = messages[index] %}
    {%- set tool_start = '<tool_response>' %}
    {%- set tool_start_length = tool_start|length %}
    {%- set start_of_message = message.content[:tool_start_length] %}
    {%- set tool_end = '</tool_response>' %}
    {%- set tool_end_length = tool_end|length %}
    {%- set start_pos = (message.content|length) - tool_end_length %}
    {%- if start_pos < 0 %}
        {%- set start_pos = 0 %}
    {%- endif %}
    {%- set end_of_message = message.content[start_pos:] %}
    {%- if ns.multi_step_tool and message.role == "user" and not(start_of_message == tool_start and end_of_message == tool_end) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = (message.content.split('</think>')|last).lstrip('\\n') %}
                {%- set reasoning_content = (message.content.split('</think>')|first).rstrip('\\n') %}
                {%- set reasoning_content = (reasoning_content.split('<think>')|last).lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""

# The captions the tokenizer, the chat text and the features are checked on.
HARD_TEXTS = [
    "a person walks forward and waves",
    "A man jumps, then turns LEFT.  He runs 3 steps; then sits down.",
    "",
    " ",
    "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\r\n\n  mixed \u3000 ideographic\u00a0space\u2028line separator",
    "\n\nstarts with new lines",
    "一个人向前走，然后挥手。",
    "人が歩いてから手を振る。사람이 앞으로 걸어간다",
    "emoji 🏃‍♂️💃🏽 👋🏻 🇯🇵 done",
    "numbers 12345 3.14159 1,000,000 ٣٤٥ ½ ²³ Ⅻ",
    "Ünïcödé café naïve résumé; decomposed: cafe\u0301 A\u030a",
    "don't I'LL we've THEY'RE it's 's",
    "specials <|im_start|> inside <|im_end|> and <think>x</think> <|endoftext|> <BOC> marker",
    "\u200b zero width\u200d joiner \ufeff bom \x07 bell \x00 nul",
    "Ω≈ç√∫ math ∑ symbols ### $$$ !!! ??? ...... ----",
    "x" * 40 + " " + " ".join(["walk", "run", "jump", "turn"] * 60),
]
TRAINING_CAPTIONS = [
    "a person walks forward and waves with the right hand",
    "a man jumps up, then turns to the left and runs",
    "the person sits down slowly on a chair and stands up again",
    "someone dances happily, spinning around twice",
    "a woman kicks with her left leg, then punches forward",
    "the figure crouches, crawls forward and stands",
    "a person raises both arms above the head and claps",
    "walking in a circle, then stopping and looking back",
    "一个人向前走，然后挥手。", "一个人跳起来然后转身。", "人が歩いてから手を振る。",
    "numbers 1 2 3 4 5 6 7 8 9 0 and steps 10 20 30",
]


def find_ref_src(given):
    candidates = [given] if given else [os.path.join(os.getcwd(), ".anchor", "ref_src.tar.gz"),
                                        os.path.join(REPO, ".anchor", "ref_src.tar.gz"),
                                        os.path.join(os.getcwd(), "shared", "anchor", "ref_src.tar.gz"),
                                        os.path.join(REPO, "shared", "anchor", "ref_src.tar.gz"),
                                        os.path.join(REPO, "..", "shared", "anchor", "ref_src.tar.gz"),
                                        "/work/shared/anchor/ref_src.tar.gz"]
    for path in candidates:
        if path and os.path.exists(path):
            return os.path.abspath(path)
    sys.exit("make_hy_text_goldens: the release's sources were not found (tried: " + ", ".join(candidates)
             + "); pass --ref-src PATH (ref_src.tar.gz or a folder holding hymotion/)")


def import_release_text_encoder(ref_src, tmp):
    """hymotion.network.text_encoders.text_encoder from the anchor (hymotion/ has no __init__.py files: it is
    imported as a namespace package; only the text_encoders and utils modules are loaded)."""
    if os.path.isfile(ref_src):
        with tarfile.open(ref_src) as tar:
            members = [m for m in tar.getmembers() if m.name.lstrip("./").startswith("hymotion/")]
            tar.extractall(tmp, members=members)
        root = tmp
    else:
        root = ref_src
    if not os.path.isfile(os.path.join(root, "hymotion", "network", "text_encoders", "text_encoder.py")):
        sys.exit(f"make_hy_text_goldens: {ref_src} holds no hymotion/network/text_encoders/text_encoder.py")
    sys.path.insert(0, root)
    import importlib

    return importlib.import_module("hymotion.network.text_encoders.text_encoder")


# ---------------------------------------------------------------------------------------------------------
# The tiny tokenizers

def build_qwen_tokenizer(folder, vocab_size, system_prompt):
    """A byte-level BPE laid out as Qwen2/Qwen3's tokenizer.json (NFC; Split(QWEN_SPLIT, isolated) then
    ByteLevel without its own regex; no unk; the added tokens after the BPE vocabulary) trained on the
    release's system prompt and a few captions, plus tokenizer_config.json with Qwen3's chat template."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, \
        processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    try:
        tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    except TypeError:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator([system_prompt] * 4 + TRAINING_CAPTIONS * 3, trainer=trainer)
    for content, special in QWEN_ADDED:
        token = AddedToken(content, lstrip=False, rstrip=False, single_word=False, normalized=False, special=special)
        if special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    try:
        tok.model.save(folder)  # vocab.json + merges.txt, as Qwen releases also ship them
    except Exception as error:  # noqa: BLE001 (the C++ reads tokenizer.json; these are for transformers)
        print(f"  (vocab.json/merges.txt not written: {error})")
    added_decoder = {}
    for content, special in QWEN_ADDED:
        added_decoder[str(tok.token_to_id(content))] = {
            "content": content, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
            "special": special}
    config = {
        "add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added_decoder,
        "additional_special_tokens": [c for c, s in QWEN_ADDED if s and c != "<|endoftext|>"],
        "bos_token": None, "chat_template": QWEN3_CHAT_TEMPLATE, "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>", "errors": "replace", "model_max_length": 131072,
        "pad_token": "<|endoftext|>", "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None}
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
    return tok


def write_clip_tokenizer(folder, merges_count):
    """CLIP's tokenizer files (vocab.json built from merges as the released vocabularies are) with the first
    merges_count merges of tests/data/clip/merges.txt (CLIP's own), or merges trained here when that file is
    absent."""
    candidates = [os.path.join(root, "tests", "data", "clip", "merges.txt") for root in (REPO, os.getcwd())]
    merges_path = next((p for p in candidates if os.path.isfile(p)), candidates[0])
    if os.path.isfile(merges_path):
        with open(merges_path, encoding="utf-8") as f:
            merges = [line.split() for line in f.read().strip().split("\n")[1:]][:merges_count]
    else:
        sys.exit(f"make_hy_text_goldens: tests/data/clip/merges.txt not found (tried {candidates}); run from a zest checkout")
    symbols = list(bytes_to_unicode().values())
    vocab = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(vocab)}, f, ensure_ascii=False)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(" ".join(m) for m in merges) + "\n")
    added = lambda c: {"content": c, "lstrip": False, "normalized": True, "rstrip": False, "single_word": False}  # noqa: E731
    special = {"bos_token": added("<|startoftext|>"), "eos_token": added("<|endoftext|>"),
               "unk_token": added("<|endoftext|>"), "pad_token": "<|endoftext|>"}
    with open(os.path.join(folder, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump(special, f, indent=2)
    config = dict(special, add_prefix_space=False, do_lower_case=True, errors="replace",
                  model_max_length=MAX_LENGTH_CLIP, tokenizer_class="CLIPTokenizer")
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    return len(vocab)


# ---------------------------------------------------------------------------------------------------------
# The tiny models

def qwen3_config(transformers, vocab_size, fields, rope_theta):
    config = transformers.Qwen3Config(vocab_size=vocab_size, rope_theta=rope_theta, **fields)
    # transformers 5 keeps the RoPE base in rope_parameters; make sure the intended one is what it uses.
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and params.get("rope_theta") != rope_theta:
        params["rope_theta"] = rope_theta
    if hasattr(config, "rope_theta"):
        try:
            config.rope_theta = rope_theta
        except Exception:  # noqa: BLE001
            pass
    return config


def check_rope(model, rope_theta, head_dim):
    """|inv_freq - 1/theta^(2i/d)| of the built model (0 when the config's base is the one used)."""
    rotary = getattr(model.model, "rotary_emb", None)
    inv_freq = getattr(rotary, "inv_freq", None) if rotary is not None else None
    if inv_freq is None:
        return "no model.rotary_emb.inv_freq"
    expected = 1.0 / (rope_theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    return float((inv_freq.double().cpu() - expected).abs().max())


def load_causal_lm(transformers, folder, dtype, attn_implementation="eager"):
    """The folder's model loaded in `dtype` (eager attention). Loaded in that dtype, not cast after: casting a
    bf16-loaded model would round the rotary inv_freq buffer to bf16 too, which the release never does."""
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation=attn_implementation,
                                                                  dtype=dtype)
    except Exception:  # noqa: BLE001 (transformers 4: torch_dtype)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation=attn_implementation,
                                                                  torch_dtype=dtype)
    return model.to(dtype).eval()


def qwen_forward(model, ids, mask):
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        last = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
    return [h.float() for h in out.hidden_states], last.float()


def write_sharded(model, folder, pieces):
    """model's state dict as pieces safetensors files + model.safetensors.index.json, as save_pretrained shards
    (a tied lm_head.weight is left out, as save_pretrained does)."""
    from safetensors.torch import save_file

    os.makedirs(folder, exist_ok=True)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    names = list(state)
    per_piece = (len(names) + pieces - 1) // pieces
    weight_map, total = {}, 0
    for i in range(pieces):
        file = f"model-{i + 1:05d}-of-{pieces:05d}.safetensors"
        part = {k: state[k] for k in names[i * per_piece:(i + 1) * per_piece]}
        save_file(part, os.path.join(folder, file), metadata={"format": "pt"})
        for k, v in part.items():
            weight_map[k] = file
            total += v.numel() * v.element_size()
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    model.config.architectures = ["Qwen3ForCausalLM"]
    try:
        text = model.config.to_json_string(use_diff=False)  # every field, as save_pretrained writes them
    except TypeError:
        text = model.config.to_json_string()
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write(text)


def max_rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-30))


# ---------------------------------------------------------------------------------------------------------

def record_tokens(tokenizer, raw, texts, record):
    rows = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=True)["input_ids"]
        raw_ids = raw.encode(text, add_special_tokens=True).ids
        rows.append({"text": text, "ids": list(ids), "tokenizers_library_ids": None if raw_ids == list(ids) else raw_ids})
    record["tokens"] = rows
    record["checks"]["tokens_equal_tokenizers_library"] = all(r["tokenizers_library_ids"] is None for r in rows)


def make_large_gpu_golden(out, transformers):
    """--large-gpu DIR (GPU machine, not committed: ~70 MB): a larger random Qwen3 (hidden 1024, 4 layers, 16 query
    and 4 key/value heads of 128) saved in bf16, and its last hidden state on 4 right-padded rows of 256 tokens from
    transformers in bf16 on CUDA (sdpa, as the release runs it) and in float32 on the CPU (eager), for
    tests/gpu/test_gpu_hy_text.cpp (ZEST_HY_TEXT_LARGE=DIR)."""
    from safetensors.torch import save_file

    os.makedirs(out, exist_ok=True)
    fields = {"hidden_size": 1024, "intermediate_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 16,
              "num_key_value_heads": 4, "head_dim": 128, "hidden_act": "silu", "max_position_embeddings": 1024,
              "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "attention_bias": False, "attention_dropout": 0.0,
              "use_sliding_window": False}
    torch.manual_seed(CONSTRUCTION_SEED + 3)
    model = transformers.Qwen3ForCausalLM(qwen3_config(transformers, 4096, fields, 1e6)).float().eval()
    perturb_constant_tensors(model, PERTURB_SEED + 3)
    folder = os.path.join(out, "qwen3_large")
    model.to(torch.bfloat16).save_pretrained(folder)
    generator = torch.Generator().manual_seed(INPUT_SEED + 3)
    ids = torch.randint(0, 4096, (4, 256), generator=generator)
    mask = torch.ones(4, 256, dtype=torch.int64)
    for row, valid in enumerate((256, 200, 120, 30)):
        mask[row, valid:] = 0
    tensors = {"input_ids": ids, "attention_mask": mask}
    cpu = load_causal_lm(transformers, folder, torch.float32)
    tensors["last_hidden_state_fp32"] = qwen_forward(cpu, ids, mask)[1].contiguous()
    if torch.cuda.is_available():
        gpu = load_causal_lm(transformers, folder, torch.bfloat16, attn_implementation="sdpa").cuda()
        tensors["last_hidden_state_bf16_cuda"] = qwen_forward(gpu, ids.cuda(), mask.cuda())[1].cpu().contiguous()
        print(f"  large: bf16 CUDA vs float32 CPU max rel "
              f"{max_rel(tensors['last_hidden_state_bf16_cuda'], tensors['last_hidden_state_fp32']):.3g}")
    save_file(tensors, os.path.join(out, "large_golden.safetensors"))
    print(f"wrote {out}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?", default=os.environ.get("OUT") or os.path.join(REPO, "tests", "data", "hy_text"))
    parser.add_argument("--ref-src", default=None)
    parser.add_argument("--large-gpu", default=None, metavar="DIR",
                        help="only the larger bf16 GPU check's folder (not committed), into DIR")
    args = parser.parse_args()
    if args.large_gpu:
        import transformers

        torch.backends.cuda.matmul.allow_tf32 = False
        print("versions:", torch.__version__, transformers.__version__)
        make_large_gpu_golden(os.path.abspath(args.large_gpu), transformers)
        return
    ref_src = find_ref_src(args.ref_src)

    import safetensors
    import tokenizers
    import transformers
    from safetensors.torch import save_file

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__,
                "python": platform.python_version()}
    print("versions:", json.dumps(versions))
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="hy_text_ref_")
    te = import_release_text_encoder(ref_src, tmp)
    print(f"release text encoder: {te.__file__}")

    record = {"what": "scripts/golden/make_hy_text_goldens.py", "versions": versions, "checks": {},
              "max_length_llm": MAX_LENGTH_LLM, "max_length_clip": MAX_LENGTH_CLIP,
              "system_prompt": te.PROMPT_TEMPLATE_ENCODE_HUMAN_MOTION, "texts": HARD_TEXTS}
    tensors = {}

    # --- the Qwen tokenizer ---
    qwen_dir = os.path.join(out, "qwen3_tiny")
    raw = build_qwen_tokenizer(qwen_dir, 640, te.PROMPT_TEMPLATE_ENCODE_HUMAN_MOTION)
    tokens_total = raw.get_vocab_size(with_added_tokens=True)
    model_vocab = (tokens_total + 63) // 64 * 64  # Qwen's embedding is padded past its tokenizer too
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(qwen_dir, padding_side="right")
    except Exception:  # noqa: BLE001 (recorded; the release's own call below would fail the same way)
        traceback.print_exc()
        raise
    record["qwen_tokenizer_class"] = type(tokenizer).__name__
    record["qwen_tokenizer_size"] = tokens_total
    print(f"qwen tokenizer: {type(tokenizer).__name__}, {tokens_total} tokens; model vocab {model_vocab}")
    record_tokens(tokenizer, raw, HARD_TEXTS, record)

    # --- the tiny Qwen3 models ---
    main_fields = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "head_dim": 24, "hidden_act": "silu", "max_position_embeddings": 512,
                   "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "attention_bias": False,
                   "attention_dropout": 0.0, "bos_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
                   "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"), "use_sliding_window": False}
    sharded_fields = dict(main_fields, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=1, head_dim=16, rms_norm_eps=1e-5,
                          tie_word_embeddings=True)
    torch.manual_seed(CONSTRUCTION_SEED)
    config = qwen3_config(transformers, model_vocab, main_fields, 1e6)
    model = transformers.Qwen3ForCausalLM(config).float().eval()
    record["qwen_perturbed"] = perturb_constant_tensors(model)
    record["checks"]["qwen_rope_inv_freq_error"] = check_rope(model, 1e6, 24)
    model.to(torch.bfloat16).save_pretrained(qwen_dir)
    torch.manual_seed(CONSTRUCTION_SEED + 1)
    sconfig = qwen3_config(transformers, model_vocab, sharded_fields, 10000.0)
    smodel = transformers.Qwen3ForCausalLM(sconfig).float().eval()
    record["sharded_perturbed"] = perturb_constant_tensors(smodel, PERTURB_SEED + 1)
    record["checks"]["sharded_rope_inv_freq_error"] = check_rope(smodel, 10000.0, 16)
    write_sharded(smodel, os.path.join(out, "qwen3_tiny_sharded"), 3)
    for name in ("qwen3_tiny", "qwen3_tiny_sharded"):
        with open(os.path.join(out, name, "config.json")) as f:
            record[f"{name}_config"] = json.load(f)

    # A raw forward (no template): two rows, the second right-padded as the release's batches are.
    generator = torch.Generator().manual_seed(INPUT_SEED)
    ids = torch.randint(0, tokens_total, (2, 24), generator=generator)
    mask = torch.ones(2, 24, dtype=torch.int64)
    mask[1, 17:] = 0
    ids[1, 17:] = tokenizer.pad_token_id
    qwen = load_causal_lm(transformers, qwen_dir, torch.float32)
    rotary = getattr(qwen.model, "rotary_emb", None)
    record["checks"]["qwen_raw_forward_inv_freq_dtype"] = str(getattr(rotary, "inv_freq", torch.zeros(1)).dtype)
    hidden, last = qwen_forward(qwen, ids, mask)
    tensors["qwen.input_ids"], tensors["qwen.attention_mask"] = ids, mask
    for i, h in enumerate(hidden):
        tensors[f"qwen.hidden_states.{i}"] = h.contiguous()
    tensors["qwen.last_hidden_state"] = last.contiguous()
    record["checks"]["qwen_hidden_states_minus_1_vs_last_hidden_state"] = max_rel(hidden[-1], last)
    record["qwen_hidden_states_count"] = len(hidden)
    sharded = load_causal_lm(transformers, os.path.join(out, "qwen3_tiny_sharded"), torch.float32)
    s_hidden, s_last = qwen_forward(sharded, ids, mask)
    tensors["sharded.hidden_states.last"] = s_hidden[-1].contiguous()
    tensors["sharded.last_hidden_state"] = s_last.contiguous()
    record["checks"]["sharded_reload_vs_built"] = max_rel(qwen_forward(smodel, ids, mask)[0][-1], s_hidden[-1])
    try:
        sdpa = load_causal_lm(transformers, qwen_dir, torch.float32, attn_implementation="sdpa")
        record["checks"]["qwen_sdpa_vs_eager"] = max_rel(qwen_forward(sdpa, ids, mask)[0][-1], hidden[-1])
    except Exception as error:  # noqa: BLE001 (recorded, not fatal)
        record["checks"]["qwen_sdpa_vs_eager"] = f"not run: {error}"
    double = load_causal_lm(transformers, qwen_dir, torch.float64)
    record["checks"]["qwen_float64_vs_float32"] = max_rel(qwen_forward(double, ids, mask)[0][-1], hidden[-1])

    # --- CLIP-L, tiny, laid out as clip-vit-large-patch14 (a whole CLIPModel) ---
    clip_dir = os.path.join(out, "clip_l_tiny")
    clip_vocab = write_clip_tokenizer(clip_dir, 300)
    text_config = {"vocab_size": clip_vocab, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "max_position_embeddings": MAX_LENGTH_CLIP, "hidden_act": "quick_gelu",
                   "layer_norm_eps": 1e-5, "projection_dim": 16, "bos_token_id": 0, "eos_token_id": 2,
                   "pad_token_id": 1}  # eos 2: clip-vit-large-patch14's legacy value (pooled at argmax(ids))
    vision_config = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 2,
                     "image_size": 32, "patch_size": 16, "hidden_act": "quick_gelu", "projection_dim": 16}
    clip_config = transformers.CLIPConfig(text_config=text_config, vision_config=vision_config, projection_dim=16)
    torch.manual_seed(CONSTRUCTION_SEED + 2)
    clip = transformers.CLIPModel(clip_config).float().eval()
    record["clip_perturbed"] = perturb_constant_tensors(clip, PERTURB_SEED + 2)
    clip.save_pretrained(clip_dir)
    with open(os.path.join(clip_dir, "config.json")) as f:
        record["clip_l_tiny_config"] = json.load(f)

    # --- the release's HYTextModel on these folders ---
    class CausalLMShim:
        """AutoModelForCausalLM.from_pretrained with the release's arguments, dropping those this transformers
        no longer takes (low_cpu_mem_usage; torch_dtype renamed dtype)."""

        @staticmethod
        def from_pretrained(path, **kwargs):
            try:
                return transformers.AutoModelForCausalLM.from_pretrained(path, **kwargs)
            except Exception as error:  # noqa: BLE001 (retried once with the arguments adapted)
                print(f"  (release's from_pretrained arguments adapted: {error})")
                kwargs.pop("low_cpu_mem_usage", None)
                if "torch_dtype" in kwargs:
                    kwargs["dtype"] = kwargs.pop("torch_dtype")
                return transformers.AutoModelForCausalLM.from_pretrained(path, **kwargs)

    te.LLM_ENCODER_LAYOUT["qwen3"]["module_path"] = qwen_dir
    te.LLM_ENCODER_LAYOUT["qwen3"]["text_encoder_class"] = CausalLMShim
    te.SENTENCE_EMB_LAYOUT["clipl"]["module_path"] = clip_dir
    hy = te.HYTextModel(llm_type="qwen3", max_length_llm=MAX_LENGTH_LLM, sentence_emb_type="clipl",
                        max_length_sentence_emb=MAX_LENGTH_CLIP)
    record["crop_start"] = hy.crop_start
    record["qwen_dtype_as_release_loads"] = str(next(hy.llm_text_encoder.parameters()).dtype)
    template = te.LLM_ENCODER_LAYOUT["qwen3"]["template"]
    chat = []
    for text in HARD_TEXTS + ["<BOC>"]:
        rendered = hy.llm_tokenizer.apply_chat_template(hy.apply_text_to_template(text, template), tokenize=False,
                                                        add_generation_prompt=False, enable_thinking=False)
        expected = ("<|im_start|>system\n" + te.PROMPT_TEMPLATE_ENCODE_HUMAN_MOTION + "<|im_end|>\n"
                    "<|im_start|>user\n" + text + "<|im_end|>\n")
        chat.append({"text": text, "chat_text": rendered, "equals_hard_coded_rendering": rendered == expected})
    record["chat"] = chat
    record["checks"]["chat_equals_hard_coded_rendering"] = all(c["equals_hard_coded_rendering"] for c in chat)
    marker_chat = chat[-1]["chat_text"]
    record["crop_marker"] = {"chat_ids": hy.llm_tokenizer(marker_chat, add_special_tokens=True)["input_ids"],
                             "marker_ids": hy.llm_tokenizer("<BOC>", add_special_tokens=False)["input_ids"]}
    print(f"crop_start {hy.crop_start}; chat rendering as hard-coded: {record['checks']['chat_equals_hard_coded_rendering']}")

    # The batch encode_llm tokenizes (its exact call), kept for the C++ tokenizer test.
    llm_text = [c["chat_text"] for c in chat[:-1]]
    batch = hy.llm_tokenizer(llm_text, return_length=False, return_overflowing_tokens=False, truncation=True,
                             return_attention_mask=True, max_length=hy.max_length_llm, padding="max_length",
                             return_tensors="pt")
    tensors["features.llm_input_ids"] = batch["input_ids"].to(torch.int64).contiguous()
    tensors["features.llm_attention_mask"] = batch["attention_mask"].to(torch.int64).contiguous()
    clip_batch = hy.sentence_emb_tokenizer(HARD_TEXTS, return_length=False, return_overflowing_tokens=False,
                                           truncation=True, return_attention_mask=True,
                                           max_length=hy.max_length_sentence_emb, padding=True, return_tensors="pt")
    tensors["features.clip_input_ids"] = clip_batch["input_ids"].to(torch.int64).contiguous()
    tensors["features.clip_attention_mask"] = clip_batch["attention_mask"].to(torch.int64).contiguous()
    record["clip_tokenizer_class"] = type(hy.sentence_emb_tokenizer).__name__

    with torch.no_grad():
        vtxt16, ctxt16, len16 = hy.encode(HARD_TEXTS)  # as the release runs it: Qwen3 in bfloat16
        hy.llm_text_encoder = hy.llm_text_encoder.float()
        vtxt, ctxt, length = hy.encode(HARD_TEXTS)
    tensors["features.vtxt_raw"] = vtxt.float().contiguous()
    tensors["features.ctxt_raw"] = ctxt.float().contiguous()
    tensors["features.ctxt_length"] = length.to(torch.int64).contiguous()
    tensors["features_bf16.ctxt_raw"] = ctxt16.float().contiguous()
    tensors["features_bf16.vtxt_raw"] = vtxt16.float().contiguous()
    record["checks"]["bf16_vs_float32_ctxt_max_rel"] = max_rel(ctxt16.float(), ctxt)
    record["checks"]["bf16_lengths_equal"] = bool(torch.equal(len16, length))
    with torch.no_grad():
        pooled = hy.sentence_emb_text_encoder(input_ids=clip_batch["input_ids"]).pooler_output
    record["checks"]["clip_pooled_without_mask_vs_release"] = max_rel(pooled, vtxt[:, 0])
    record["features_shapes"] = {"vtxt_raw": list(vtxt.shape), "ctxt_raw": list(ctxt.shape),
                                 "ctxt_length": length.tolist()}

    save_file(tensors, os.path.join(out, "hy_text_golden.safetensors"))
    with open(os.path.join(out, "hy_text_golden.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("checks:", json.dumps(record["checks"]))
    sizes = 0
    for root, _, files in os.walk(out):
        sizes += sum(os.path.getsize(os.path.join(root, n)) for n in files)
    print(f"wrote {out} ({sizes / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
