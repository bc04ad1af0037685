"""What the golden scripts share: the recipe's perturbation of constant tensors (README.md, step 2), byte-level
BPE's byte table, and diffusers imported from the anchor's sources (ref_src.tar.gz, or a folder holding src/diffusers)."""

import os
import sys
import tarfile

import torch

PERTURB_SEED = 1000


def perturb_constant_tensors(model, seed=PERTURB_SEED):
    """Replaces every floating state-dict tensor that is identically 0 by 0.1·N(0,1) and every one that is
    identically 1 by 1 + 0.1·N(0,1), drawn from torch.Generator().manual_seed(seed) in state-dict order, so
    that zero-initialised modulations get non-zero gradients and norm weights and biases are told apart.
    Returns the names, in order."""
    generator = torch.Generator().manual_seed(seed)
    perturbed = []
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if not tensor.is_floating_point():
                continue
            if bool((tensor == 0).all()):
                tensor.copy_(0.1 * torch.randn(tensor.shape, generator=generator))
            elif bool((tensor == 1).all()):
                tensor.copy_(1 + 0.1 * torch.randn(tensor.shape, generator=generator))
            else:
                continue
            perturbed.append(name)
    return perturbed


def bytes_to_unicode():
    """The byte → printable character table of byte-level BPE (GPT-2's, also CLIP's and Qwen's): the printable
    Latin-1 bytes stand for themselves, every other byte for a character from 256 up, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, [chr(c) for c in chars]))


def import_diffusers(ref_src, tmp):
    """The diffusers package of ref_src (a .tar.gz, unpacked into tmp, or a folder), first on sys.path."""
    if os.path.isfile(ref_src):
        with tarfile.open(ref_src) as tar:
            tar.extractall(tmp)
        root = os.path.join(tmp, "src")
    else:
        root = os.path.join(ref_src, "src") if os.path.isdir(os.path.join(ref_src, "src")) else ref_src
    sys.path.insert(0, root)
    import diffusers

    return diffusers
