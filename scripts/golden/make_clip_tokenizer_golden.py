#!/usr/bin/env python3
"""Golden token ids for models/clip/clip_tokenizer: transformers' CLIPTokenizer on a corpus of captions.

Builds two tokenizer folders like the released pipelines' (SD1.5's tokenizer/, which pads with
<|endoftext|>, and SDXL's tokenizer_2/, which pads with "!") from tests/data/clip/merges.txt, loads them with
CLIPTokenizer.from_pretrained as diffusers does, and records for every caption the ids without truncation
(tokenizer(caption).input_ids) and checks that the pipelines' call
tokenizer(caption, padding="max_length", max_length=77, truncation=True) gives the first 76 of them, the end
token and the padding. Also records CLIPTokenizerFast where this transformers has a separate one.

Needs only transformers (and what it imports) and the standard library. Usage:
    python3 scripts/golden/make_clip_tokenizer_golden.py [OUT.json]
OUT defaults to $OUT/clip_tokenizer_golden.json, or tests/data/clip/tokenizer_golden.json without $OUT.
Copy the file to tests/data/clip/tokenizer_golden.json; the clip test suite (`ctest -R clip`) reads it.
"""

import json
import os
import random
import sys
import tempfile

from golden_common import bytes_to_unicode

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MERGES = os.path.join(REPO, "tests", "data", "clip", "merges.txt")
MAX_LENGTH = 77


def vocab_from_merges(merges_path):
    """vocab.json as the released CLIP tokenizers have it: 256 byte symbols, the same with </w>, one token per
    merge, then <|startoftext|> and <|endoftext|>."""
    with open(merges_path, encoding="utf-8") as f:
        merges = [line.split() for line in f.read().strip().split("\n")[1:]]
    symbols = list(bytes_to_unicode().values())
    vocab = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    return {token: i for i, token in enumerate(vocab)}


def added(content):
    return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": True, "rstrip": False,
            "single_word": False}


def write_folder(folder, pad_token):
    """A tokenizer/ folder as SD1.5's (pad <|endoftext|>) or SDXL's tokenizer_2/ (pad "!")."""
    os.makedirs(folder)
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab_from_merges(MERGES), f, ensure_ascii=False)
    with open(MERGES, encoding="utf-8") as src, open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as dst:
        dst.write(src.read())
    special = {"bos_token": added("<|startoftext|>"), "eos_token": added("<|endoftext|>"),
               "unk_token": added("<|endoftext|>"), "pad_token": pad_token}
    with open(os.path.join(folder, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump(special, f, indent=2)
    config = dict(special, add_prefix_space=False, do_lower_case=True, errors="replace",
                  model_max_length=MAX_LENGTH, tokenizer_class="CLIPTokenizer")
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


# ---------------------------------------------------------------------------------------------------------
# The corpus: hand-written captions for each class of input, then seeded random mixtures of them.

HAND_WRITTEN = [
    "", " ", "   ", "\t", "\n", "\r\n", " \t\n ", "\u3000", "\u00a0", "\u2028", "\u200b", "\x0b", "\x0c", "\x85",
    "a", "A", "I", "!", "!!", "!!!", "?", ".", ",", "'", "\"", "-", "_", "#", "@", "$", "%", "&", "*", "~", "`",
    "a photo of a cat", "A Photo Of A Cat", "A PHOTO OF A CAT", "a photo of a cat.", "a photo of a cat!",
    "an astronaut riding a horse on mars, highly detailed, 8k, trending on artstation",
    "a red cube on top of a blue sphere", "two dogs playing in the snow", "a bowl of fruit, still life",
    "portrait of a woman, oil painting, by rembrandt", "cyberpunk city at night, neon lights, rain",
    "a watercolor painting of a fox in a forest", "masterpiece, best quality, 1girl, solo, long hair",
    "(masterpiece:1.2), (best quality), [worst quality], {blurry}", "a <lora:style:0.8> landscape",
    "it's a dog", "IT'S A DOG", "she'll go; they're here; we've seen; I'm fine; he'd say; don't", "rock'n'roll",
    "'s 't 're 've 'm 'll 'd", "''s", "dogs' toys", "the 1990's", "o'clock", "'hello'", "\"quoted\" text",
    "smart quotes \u201clike this\u201d and \u2018this\u2019", "em\u2014dash and en\u2013dash", "ellipsis\u2026",
    "12345", "3.14159", "1,000,000", "1/2 cup", "50%", "$100", "#1 best", "24/7", "1920x1080", "v2.1", "8k uhd",
    "0", "00", "007", "a1b2c3", "mp3", "h2o", "2nd place", "year 2024", "-5 degrees", "+10", "1e-5", "0x1F",
    "\u00bd", "\u00b2", "\u2460", "\u0663\u0664", "\u4e00\u4e8c\u4e09", "\u2167",
    "caf\u00e9", "cafe\u0301", "na\u00efve", "r\u00e9sum\u00e9", "CAF\u00c9", "\u00c5ngstr\u00f6m", "Stra\u00dfe",
    "STRASSE", "\u1e9e", "\u0130stanbul", "I\u0307", "\u0131", "\u03a3\u03bf\u03c6\u03af\u03b1",
    "\u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3", "\u03c3\u03c2\u03a3", "\u0391\u0398\u0397\u039d\u0391",
    "\u0435\u0436\u0438\u043a \u0432 \u0442\u0443\u043c\u0430\u043d\u0435", "\u041c\u041e\u0421\u041a\u0412\u0410",
    "\u05e9\u05dc\u05d5\u05dd", "\u0645\u0631\u062d\u0628\u0627", "\u0928\u092e\u0938\u094d\u0924\u0947",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0",
    "\u4e00\u53ea\u732b", "\u732b\u304c\u597d\u304d", "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c",
    "\u30ab\u30bf\u30ab\u30ca", "\uc548\ub155\ud558\uc138\uc694", "\u5c71\u6c34\u753b, \u6c34\u58a8",
    "a cat \u732b and a dog \u72ac", "\u4e2d\u6587English\u6df7\u5408", "\U00020000\U0002a6d6", "\uf900",
    "\uff21\uff22\uff23 \uff11\uff12\uff13", "\ufb01ne \ufb02ower", "\u2122 \u00a9 \u00ae", "\u00b0C",
    "emoji \U0001f600", "\U0001f600\U0001f601\U0001f602", "\U0001f408 cat", "\U0001f44d\U0001f3fd",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\u2764\ufe0f", "\U0001f1fa\U0001f1f8", "\u2600\ufe0e",
    "a \U0001f525 fire", "\U0001f3a8\U0001f58c\ufe0f painting", "\u2b50\u2b50\u2b50\u2b50\u2b50 five stars",
    "tab\tseparated\twords", "new\nline", "windows\r\nline", "multiple     spaces", "  leading and trailing  ",
    "nbsp\u00a0between", "ideographic\u3000space", "zero\u200bwidth", "soft\u00adhyphen", "bom\ufeffinside",
    "bell\x07char", "null\x00char", "replacement\ufffdchar", "vt\x0bff\x0cnel\x85", "\u2028line\u2029para",
    "<|startoftext|>", "<|endoftext|>", "a <|endoftext|> b", "<|startoftext|>hello<|endoftext|>",
    "<|ENDOFTEXT|>", "<|endoftext|", "|endoftext|>", "<|startoftext|><|startoftext|>",
    "wow!", "wow !", "hello!world", "!hello", "!!!hello!!!", "what?!", "yes!!! no!!!", "a!b!c!d",
    "https://example.com/path?query=1&x=2", "user@example.com", "C:\\Users\\name\\file.txt", "#hashtag @mention",
    "snake_case and camelCase and kebab-case", "<html><body>text</body></html>", "&amp; &lt; &gt; &quot;",
    "x^2 + y^2 = z^2", "a -> b => c <- d", "[1, 2, 3]", "{\"key\": \"value\"}", "(((nested)))", "....", "----",
    "====", "****", "~~~~", "!?!?!?", "a.b.c", "a,b,c", "a;b;c", "e.g. i.e. etc.", "Mr. Smith", "U.S.A.",
    "pneumonoultramicroscopicsilicovolcanoconiosis", "supercalifragilisticexpialidocious",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "abababababababababababab", "zzzzzzzzzzzzzzzz",
    "qwertyuiopasdfghjklzxcvbnm", "xyzzy plugh", "lorem ipsum dolor sit amet, consectetur adipiscing elit",
    "\u00e0\u00e1\u00e2\u00e3\u00e4\u00e5\u00e6\u00e7\u00e8\u00e9\u00ea\u00eb", "\u00c0\u00c1\u00c2\u00c3\u00c4\u00c5",
    "\u0141\u00f3d\u017a", "\u017b\u00f3\u0142w", "\u010cesk\u00fd Krumlov", "Reykjav\u00edk", "S\u00e3o Paulo",
    "Z\u00fcrich", "Malm\u00f6", "Fran\u00e7ois", "Ni\u00f1o", "\u00d8resund", "\u00deing", "\u00f0",
    "a\u0300\u0301\u0302", "o\u0308\u0304", "\u1100\u1161\u11a8", "\uac00", "\u0915\u093f", "e\u0301\u0301",
    "\U0001d400\U0001d401", "\U0001d7d8", "\u2160\u2161", "\u00aa\u00ba", "\u02b0\u02b2", "\u2070\u2071",
]

WORDS = [
    "cat", "dog", "castle", "mountain", "river", "portrait", "city", "forest", "dragon", "robot", "flower",
    "sunset", "ocean", "astronaut", "painting", "photograph", "detailed", "beautiful", "ancient", "futuristic",
    "Cat", "DOG", "Castle", "high-quality", "4k", "8K", "35mm", "f/1.8", "2.5D", "hdr", "RAW", "dslr", "bokeh",
    "caf\u00e9", "\u00fcber", "ma\u00f1ana", "gar\u00e7on", "\u00e9l\u00e8ve", "\u732b", "\u72ac", "\u5c71",
    "\u3055\u304f\u3089", "\ud55c\uad6d", "\u043a\u043e\u0442", "\u03b3\u03ac\u03c4\u03b1", "\U0001f431",
    "\U0001f436", "\u2728", "\U0001f308", "it's", "don't", "they're", "I'll", "we've", "!", "!!", "?", ",", ".",
    ":", ";", "-", "(", ")", "[", "]", "{", "}", "\"", "'", "&", "+", "=", "/", "\\", "|", "<", ">", "*", "#",
    "1", "42", "1999", "3.5", "100%", "x2", "by", "of", "the", "a", "an", "in", "on", "with", "and", "at",
    "greg rutkowski", "artstation", "unreal engine", "octane render", "studio ghibli", "van gogh", "monet",
]
SEPARATORS = [" ", " ", " ", ", ", ",", "  ", "\t", "\n", "", " | ", "_", "-"]


def generated(count, seed=22):
    rng = random.Random(seed)
    out = []
    for i in range(count):
        n = rng.choice([1, 2, 3, 5, 8, 13, 21, 40, 80])  # 40 and 80 words run past 77 tokens
        text = ""
        for _ in range(n):
            text += rng.choice(WORDS) + rng.choice(SEPARATORS)
        if rng.random() < 0.3:
            text = text.strip()
        if rng.random() < 0.1:
            text = text.upper()
        out.append(text)
    return out


def corpus():
    long_captions = [
        " ".join(["a highly detailed photograph of a castle on a mountain at sunset"] * 6),
        ", ".join(str(i) for i in range(100)),
        "!" * 200,
        "word " * 100,
        "\u732b" * 100,
        "\U0001f600" * 60,
    ]
    return HAND_WRITTEN + long_captions + generated(400)


# ---------------------------------------------------------------------------------------------------------

def run(tokenizer, captions, name):
    pad_id = tokenizer.pad_token_id
    eos_id = tokenizer.eos_token_id
    ids, mismatches = [], []
    for index, caption in enumerate(captions):
        full = tokenizer(caption).input_ids
        padded = tokenizer(caption, padding="max_length", max_length=MAX_LENGTH, truncation=True).input_ids
        expected = full if len(full) <= MAX_LENGTH else full[:MAX_LENGTH - 1] + [eos_id]
        expected = expected + [pad_id] * (MAX_LENGTH - len(expected))
        if list(padded) != expected:
            mismatches.append({"index": index, "padded": list(padded), "expected": expected})
        ids.append(list(full))
    print(f"  {name}: {type(tokenizer).__module__}.{type(tokenizer).__name__}, pad {tokenizer.pad_token!r} "
          f"(id {pad_id}), model_max_length {tokenizer.model_max_length}, "
          f"{len(mismatches)} captions where truncation/padding is not first-76 + eos + pad")
    return {
        "class": f"{type(tokenizer).__module__}.{type(tokenizer).__name__}",
        "pad_token": tokenizer.pad_token,
        "pad_token_id": pad_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": eos_id,
        "model_max_length": tokenizer.model_max_length,
        "ids": ids,
        "padding_mismatches": mismatches,
    }


def main():
    import transformers

    if len(sys.argv) > 1:
        out_path = sys.argv[1]
    elif os.environ.get("OUT"):
        out_path = os.path.join(os.environ["OUT"], "clip_tokenizer_golden.json")
    else:
        out_path = os.path.join(REPO, "tests", "data", "clip", "tokenizer_golden.json")
    try:
        import ftfy  # noqa: F401  (CLIPTokenizer cleans text with ftfy when it is importable)
        ftfy_version = getattr(ftfy, "__version__", "unknown")
    except ImportError:
        ftfy_version = None
    try:
        import tokenizers
        tokenizers_version = tokenizers.__version__
    except ImportError:
        tokenizers_version = None
    print(f"transformers {transformers.__version__}, tokenizers {tokenizers_version}, ftfy {ftfy_version}, "
          f"python {sys.version.split()[0]}")

    captions = corpus()
    print(f"{len(captions)} captions")
    result = {
        "what": "transformers CLIPTokenizer ids (no truncation) of each caption; see "
                "scripts/golden/make_clip_tokenizer_golden.py",
        "versions": {"transformers": transformers.__version__, "tokenizers": tokenizers_version,
                     "ftfy": ftfy_version, "python": sys.version.split()[0]},
        "captions": captions,
        "variants": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        sd15 = os.path.join(tmp, "tokenizer")
        sdxl2 = os.path.join(tmp, "tokenizer_2")
        write_folder(sd15, "<|endoftext|>")
        write_folder(sdxl2, "!")
        variants = {"sd15": (transformers.CLIPTokenizer, sd15), "sdxl_tokenizer_2": (transformers.CLIPTokenizer, sdxl2)}
        fast = getattr(transformers, "CLIPTokenizerFast", None)
        if fast is not None and fast is not transformers.CLIPTokenizer:
            variants["sd15_fast"] = (fast, sd15)
            variants["sdxl_tokenizer_2_fast"] = (fast, sdxl2)
        for name, (cls, folder) in variants.items():
            result["variants"][name] = run(cls.from_pretrained(folder), captions, name)

    names = list(result["variants"])
    for other in names[1:]:
        differ = sum(a != b for a, b in zip(result["variants"][names[0]]["ids"], result["variants"][other]["ids"]))
        print(f"  {other} differs from {names[0]} on {differ} captions")
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {out_path} ({os.path.getsize(out_path)} bytes)")


if __name__ == "__main__":
    main()
