#!/usr/bin/env python3
"""Golden vectors of the training objectives and the v/sample-prediction samplers (tests/unet/test_objectives.cpp),
computed by diffusers' own code from the reference sources (../shared/anchor/ref_src.tar.gz or a folder holding
src/diffusers): the scheduler classes DDPMScheduler, DDIMScheduler, EulerDiscreteScheduler and
DPMSolverMultistepScheduler (their files are executed as they are; the package around them, which needs
huggingface_hub and friends, is replaced by the few names they import: ConfigMixin/register_to_config store the
constructor's arguments as `config`), training_utils.compute_snr and the pipelines' rescale_noise_cfg (their
function definitions taken from the files). The loss of each [loss] option is the arithmetic of diffusers'
examples/text_to_image/train_text_to_image.py (quoted below, the scripts are not in the tarball).

Needs only torch (1.13 is enough) and numpy. Writes objectives_golden.safetensors next to this file (or OUT):
    python3 tests/data/objectives/make_objectives_golden.py --ref-src ../shared/anchor/ref_src.tar.gz [OUT]
"""

import argparse
import ast
import inspect
import json
import os
import struct
import sys
import tarfile
import tempfile
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEDULER_FILES = ["scheduling_ddpm.py", "scheduling_ddim.py", "scheduling_euler_discrete.py",
                   "scheduling_dpmsolver_multistep.py"]


# ---- diffusers, from its sources -----------------------------------------------------------------------

def register_to_config(init):
    """Stores every constructor argument (defaults included) as self.config, as diffusers' decorator does."""
    def wrapped(self, *args, **kwargs):
        bound = inspect.signature(init).bind(self, *args, **kwargs)
        bound.apply_defaults()
        values = {k: v for k, v in bound.arguments.items() if k != "self"}
        self.config = types.SimpleNamespace(**values)
        init(self, *args, **kwargs)
    return wrapped


class ConfigMixin:
    def register_to_config(self, **kwargs):
        for key, value in kwargs.items():
            setattr(self.config, key, value)


def stub_package(src_root):
    """A `diffusers` package holding the real scheduler files and stand-ins for what they import."""
    pkg = types.ModuleType("diffusers"); pkg.__path__ = []
    cfg = types.ModuleType("diffusers.configuration_utils")
    cfg.ConfigMixin, cfg.register_to_config = ConfigMixin, register_to_config
    utils = types.ModuleType("diffusers.utils"); utils.__path__ = []
    utils.BaseOutput = type("BaseOutput", (), {})
    utils.deprecate = lambda *a, **k: None
    utils.is_scipy_available = lambda: False
    utils.logging = types.SimpleNamespace(get_logger=lambda name: types.SimpleNamespace(warning=print, info=print))
    torch_utils = types.ModuleType("diffusers.utils.torch_utils")
    torch_utils.randn_tensor = lambda shape, generator=None, device=None, dtype=None: torch.randn(
        shape, generator=generator, device=device, dtype=dtype)
    scheds = types.ModuleType("diffusers.schedulers"); scheds.__path__ = []
    sutils = types.ModuleType("diffusers.schedulers.scheduling_utils")
    sutils.KarrasDiffusionSchedulers = []
    sutils.SchedulerMixin = type("SchedulerMixin", (), {})
    sutils.SchedulerOutput = type("SchedulerOutput", (), {})
    for name, module in {"diffusers": pkg, "diffusers.configuration_utils": cfg, "diffusers.utils": utils,
                         "diffusers.utils.torch_utils": torch_utils, "diffusers.schedulers": scheds,
                         "diffusers.schedulers.scheduling_utils": sutils}.items():
        sys.modules[name] = module
    classes = {}
    for file in SCHEDULER_FILES:
        name = "diffusers.schedulers." + file[:-3]
        module = types.ModuleType(name); module.__package__ = "diffusers.schedulers"
        sys.modules[name] = module
        path = os.path.join(src_root, "diffusers", "schedulers", file)
        exec(compile(open(path).read(), path, "exec"), module.__dict__)
        classes[file] = module
    return classes


def function_from(path, name, namespace):
    """The definition of `name` in the file at `path`, executed in `namespace`."""
    tree = ast.parse(open(path).read())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), namespace)
    return namespace[name]


def source_root(ref_src, tmp):
    if os.path.isfile(ref_src):
        with tarfile.open(ref_src) as tar:
            tar.extractall(tmp, members=[m for m in tar.getmembers() if m.name.startswith("src/diffusers/")])
        return os.path.join(tmp, "src")
    return os.path.join(ref_src, "src") if os.path.isdir(os.path.join(ref_src, "src")) else ref_src


# ---- the training script's loss ------------------------------------------------------------------------

def script_loss(scheduler, compute_snr, latents, noise, offset_noise, timesteps, model_pred, prediction,
                noise_offset, snr_gamma):
    """train_text_to_image.py, step by step:
        noise = torch.randn_like(latents)
        if args.noise_offset: noise += args.noise_offset * torch.randn((B, C, 1, 1))
        noisy_latents = noise_scheduler.add_noise(latents, noise, timesteps)
        target = noise (epsilon) | noise_scheduler.get_velocity(latents, noise, timesteps) (v_prediction)
        if args.snr_gamma is None: loss = F.mse_loss(model_pred.float(), target.float(), reduction="mean")
        else:
            snr = compute_snr(noise_scheduler, timesteps)
            mse_loss_weights = torch.stack([snr, args.snr_gamma * torch.ones_like(timesteps)], dim=1).min(dim=1)[0]
            if prediction_type == "epsilon": mse_loss_weights = mse_loss_weights / snr
            elif prediction_type == "v_prediction": mse_loss_weights = mse_loss_weights / (snr + 1)
            loss = F.mse_loss(model_pred.float(), target.float(), reduction="none")
            loss = loss.mean(dim=list(range(1, len(loss.shape)))) * mse_loss_weights
            loss = loss.mean()
    "sample" (x0 as the target) is what DDPMScheduler's prediction_type = "sample" means; its min-SNR weight is
    the paper's x0 form, min(snr, gamma), which the script's branches leave it at."""
    noise = noise.clone()
    if noise_offset:
        noise += noise_offset * offset_noise
    noisy = scheduler.add_noise(latents, noise, timesteps)
    target = {"epsilon": noise, "v_prediction": scheduler.get_velocity(latents, noise, timesteps),
              "sample": latents}[prediction]
    if not snr_gamma:
        return torch.nn.functional.mse_loss(model_pred.float(), target.float(), reduction="mean"), noisy, target
    snr = compute_snr(scheduler, timesteps)
    weights = torch.stack([snr, snr_gamma * torch.ones_like(timesteps)], dim=1).min(dim=1)[0]
    if prediction == "epsilon":
        weights = weights / snr
    elif prediction == "v_prediction":
        weights = weights / (snr + 1)
    loss = torch.nn.functional.mse_loss(model_pred.float(), target.float(), reduction="none")
    loss = loss.mean(dim=list(range(1, len(loss.shape)))) * weights
    return loss.mean(), noisy, target


SD = dict(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear")


def make_losses(out, mods, compute_snr):
    g = torch.Generator().manual_seed(20)
    latents = torch.randn(3, 4, 6, 6, generator=g)
    noise = torch.randn(3, 4, 6, 6, generator=g)
    offset_noise = torch.randn(3, 4, 1, 1, generator=g)
    model_pred = torch.randn(3, 4, 6, 6, generator=g)
    timesteps = torch.tensor([0, 517, 999])
    out.update({"loss.latents": latents, "loss.noise": noise, "loss.offset_noise": offset_noise,
                "loss.model_pred": model_pred, "loss.timesteps": timesteps})
    cases = []
    for rescale in (False, True):
        scheduler = mods["scheduling_ddpm.py"].DDPMScheduler(**SD, rescale_betas_zero_snr=rescale)
        tag = "zsnr" if rescale else "sd"
        out[f"schedule.{tag}.betas"] = scheduler.betas
        out[f"schedule.{tag}.alphas_cumprod"] = scheduler.alphas_cumprod
        steps = timesteps if not rescale else torch.tensor([0, 517, 998])  # epsilon + min-SNR is 0/0 at 999
        out[f"snr.{tag}.timesteps"] = steps
        out[f"snr.{tag}"] = compute_snr(scheduler, steps)
        for prediction in ("epsilon", "v_prediction", "sample"):
            for noise_offset in (0.0, 0.1):
                for snr_gamma in (None, 5.0):
                    t = steps if snr_gamma else timesteps
                    loss, noisy, target = script_loss(scheduler, compute_snr, latents, noise, offset_noise, t,
                                                      model_pred, prediction, noise_offset, snr_gamma)
                    name = f"loss.{tag}.{prediction}.offset{noise_offset}.gamma{snr_gamma or 0}"
                    out[name] = loss.reshape(1)
                    out[name + ".target"] = target
                    cases.append(name)
    return cases


# ---- the samplers ----------------------------------------------------------------------------------------

# A toy model output from the scaled UNet input and the step's timestep, the same in the C++ test.
def toy_output(x, t):
    return 0.5 * x + 0.0002 * t


def run_sampler(scheduler, steps):
    scheduler.set_timesteps(steps)
    x = torch.tensor([[1.0, -0.5, 0.25]]) * scheduler.init_noise_sigma
    trajectory = []
    for t in scheduler.timesteps:
        output = toy_output(scheduler.scale_model_input(x, t), t.float())
        x = scheduler.step(output, t, x, return_dict=False)[0]
        trajectory.append(x.reshape(-1))
    return torch.stack(trajectory)


SAMPLER_CASES = {
    # name: (class file, class name, config fields, steps)
    "ddim_v_zsnr_trailing": ("scheduling_ddim.py", "DDIMScheduler",
                             dict(prediction_type="v_prediction", rescale_betas_zero_snr=True,
                                  timestep_spacing="trailing", clip_sample=False, set_alpha_to_one=False), 8),
    "ddim_v_leading": ("scheduling_ddim.py", "DDIMScheduler",
                       dict(prediction_type="v_prediction", steps_offset=1, clip_sample=False, set_alpha_to_one=False), 10),
    "ddim_sample": ("scheduling_ddim.py", "DDIMScheduler",
                    dict(prediction_type="sample", steps_offset=1, clip_sample=False, set_alpha_to_one=False), 6),
    "ddim_epsilon_clip": ("scheduling_ddim.py", "DDIMScheduler",
                          dict(prediction_type="epsilon", steps_offset=1, clip_sample=True, clip_sample_range=0.6), 6),
    "euler_v_zsnr_trailing": ("scheduling_euler_discrete.py", "EulerDiscreteScheduler",
                              dict(prediction_type="v_prediction", rescale_betas_zero_snr=True,
                                   timestep_spacing="trailing"), 8),
    "euler_v_leading": ("scheduling_euler_discrete.py", "EulerDiscreteScheduler",
                        dict(prediction_type="v_prediction", timestep_spacing="leading", steps_offset=1), 10),
    "euler_sample": ("scheduling_euler_discrete.py", "EulerDiscreteScheduler", dict(prediction_type="sample"), 6),
    "dpmpp_v_zsnr_trailing": ("scheduling_dpmsolver_multistep.py", "DPMSolverMultistepScheduler",
                              dict(prediction_type="v_prediction", rescale_betas_zero_snr=True,
                                   timestep_spacing="trailing"), 8),
    "dpmpp_v": ("scheduling_dpmsolver_multistep.py", "DPMSolverMultistepScheduler",
                dict(prediction_type="v_prediction"), 20),
    "dpmpp_sample_heun": ("scheduling_dpmsolver_multistep.py", "DPMSolverMultistepScheduler",
                          dict(prediction_type="sample", solver_type="heun"), 6),
}


def make_samplers(out, mods):
    configs = {}
    for name, (file, cls, fields, steps) in SAMPLER_CASES.items():
        scheduler = getattr(mods[file], cls)(**SD, **fields)
        out[f"sampler.{name}"] = run_sampler(scheduler, steps)
        out[f"sampler.{name}.timesteps"] = scheduler.timesteps.float()
        configs[name] = dict(SD, **fields, steps=steps)
    return configs


def make_guidance_rescale(out, rescale_noise_cfg):
    g = torch.Generator().manual_seed(30)
    guided, cond = torch.randn(2, 4, 5, 5, generator=g), torch.randn(2, 4, 5, 5, generator=g)
    out.update({"guidance.guided": guided, "guidance.cond": cond,
                "guidance.rescaled": rescale_noise_cfg(guided, cond, guidance_rescale=0.7)})


# ---- writing ---------------------------------------------------------------------------------------------

def save_safetensors(path, tensors, metadata):
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        dt = {torch.float32: "F32", torch.int64: "I64"}[t.dtype]
        data = t.numpy().tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref-src", required=True, help="ref_src.tar.gz or a folder with src/diffusers")
    parser.add_argument("out", nargs="?", default=HERE)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = source_root(args.ref_src, tmp)
        mods = stub_package(root)
        compute_snr = function_from(os.path.join(root, "diffusers", "training_utils.py"), "compute_snr", {"torch": torch})
        rescale_noise_cfg = function_from(
            os.path.join(root, "diffusers", "pipelines", "stable_diffusion", "pipeline_stable_diffusion.py"),
            "rescale_noise_cfg", {"torch": torch})
        out = {}
        cases = make_losses(out, mods, compute_snr)
        samplers = make_samplers(out, mods)
        make_guidance_rescale(out, rescale_noise_cfg)
    metadata = {"torch": torch.__version__, "python": sys.version.split()[0],
                "loss_cases": json.dumps(cases), "sampler_cases": json.dumps(samplers)}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "objectives_golden.safetensors")
    save_safetensors(path, out, metadata)
    print(f"wrote {path}: {len(out)} tensors, {len(cases)} loss cases, {len(samplers)} sampler cases")


if __name__ == "__main__":
    main()
