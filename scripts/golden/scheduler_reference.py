#!/usr/bin/env python3
"""Independent float64 re-derivation of the three inference schedulers zest sample offers, written from
the published update rules (DDIM, Euler / Karras et al. 2022 with sigma = sqrt((1-abar)/abar), DPM-Solver++
2M), in plain Python (no numpy, no torch, no diffusers), so that tests/unet/test_schedulers.cpp checks
zest's arithmetic against numbers it did not produce.

For a toy model eps(x, t) = 0.5 * x + 0.0002 * t on x_T = NOISE it prints, per case, the final sample.
Usage: python3 scripts/golden/scheduler_reference.py   (paste the output into the test)
"""
import math

NOISE = [1.0, -0.5, 0.25]


def eps_model(x, t):
    return [0.5 * v + 0.0002 * t for v in x]


def alphas_cumprod(T=1000, b0=0.00085, b1=0.012):
    out, prod = [], 1.0
    for i in range(T):
        root = math.sqrt(b0) + (math.sqrt(b1) - math.sqrt(b0)) * i / (T - 1)
        prod *= 1.0 - root * root
        out.append(prod)
    return out


def spaced(kind, T, n, offset, extra=0):
    """Timesteps, descending. extra=1: DPM-Solver's n+1 grid with the last point dropped."""
    if kind == "leading":
        r = T // (n + extra)
        return [i * r + offset for i in range(n - 1 + extra, -1 + extra, -1)]
    if kind == "linspace":
        m = n + extra
        pts = [(T - 1) * i / (m - 1) for i in range(m)]
        pts = pts[::-1]
        return pts[:n] if extra else pts
    if kind == "trailing":
        r = T / n
        return [round(T - k * r) - 1 for k in range(n)]
    raise ValueError(kind)


def ddim(n, spacing="leading", offset=1, alpha_one=False):
    acp = alphas_cumprod()
    T = len(acp)
    ts = [int(round(t)) for t in spaced(spacing, T, n, offset)]
    x = list(NOISE)
    for t in ts:
        prev = t - T // n
        a, ap = acp[t], (acp[prev] if prev >= 0 else (1.0 if alpha_one else acp[0]))
        e = eps_model(x, t)
        x0 = [(xi - math.sqrt(1 - a) * ei) / math.sqrt(a) for xi, ei in zip(x, e)]
        x = [math.sqrt(ap) * x0i + math.sqrt(1 - ap) * ei for x0i, ei in zip(x0, e)]
    return x


def sigma_at(acp, t):
    lo = int(math.floor(t))
    hi = min(lo + 1, len(acp) - 1)
    s = lambda k: math.sqrt((1 - acp[k]) / acp[k])
    return s(lo) + (t - lo) * (s(hi) - s(lo))


def euler(n, spacing="linspace", offset=0):
    acp = alphas_cumprod()
    ts = spaced(spacing, len(acp), n, offset)
    sig = [sigma_at(acp, t) for t in ts] + [0.0]
    init = max(sig) if spacing != "leading" else math.sqrt(max(sig) ** 2 + 1)
    x = [v * init for v in NOISE]
    for i, t in enumerate(ts):
        xin = [v / math.sqrt(sig[i] ** 2 + 1) for v in x]
        e = eps_model(xin, t)
        # dx/dsigma = (x - x0)/sigma with x0 = x - sigma*eps
        x = [xi + ei * (sig[i + 1] - sig[i]) for xi, ei in zip(x, e)]
    return x


def dpmpp(n, spacing="linspace", offset=0, heun=False, final="zero"):
    """final: the last sigma, "zero" (then the last step returns x0) or "sigma_min" (the schedule's
    smallest sigma, sqrt((1 - abar_0) / abar_0)); the last step is first order under 15 steps
    (lower_order_final) or with "zero", second order otherwise."""
    acp = alphas_cumprod()
    ts = [int(round(t)) for t in spaced(spacing, len(acp), n, offset, extra=1)]
    sigma_last = 0.0 if final == "zero" else math.sqrt((1 - acp[0]) / acp[0])
    sig = [sigma_at(acp, t) for t in ts] + [sigma_last]
    alpha = lambda s: 1 / math.sqrt(s * s + 1)
    lam = lambda s: math.log(alpha(s)) - math.log(s * alpha(s))
    x, prev_x0 = list(NOISE), None
    for i, t in enumerate(ts):
        s0, s1 = sig[i], sig[i + 1]
        e = eps_model(x, t)
        x0 = [(xi - s0 * alpha(s0) * ei) / alpha(s0) for xi, ei in zip(x, e)]
        last = i == n - 1
        if s1 == 0.0:
            x = x0
        else:
            h = lam(s1) - lam(s0)
            at, st, ss0 = alpha(s1), s1 * alpha(s1), s0 * alpha(s0)
            phi = at * (math.exp(-h) - 1)
            lower_second = (i == n - 2) and n < 15  # second order is the highest here anyway
            if prev_x0 is None or (last and (final == "zero" or n < 15)):
                x = [st / ss0 * xi - phi * x0i for xi, x0i in zip(x, x0)]
            else:
                r0 = (lam(s0) - lam(sig[i - 1])) / h
                d1 = [(a - b) / r0 for a, b in zip(x0, prev_x0)]
                if heun:
                    x = [st / ss0 * xi - phi * a + at * ((math.exp(-h) - 1) / h + 1) * d
                         for xi, a, d in zip(x, x0, d1)]
                else:
                    x = [st / ss0 * xi - phi * a - 0.5 * phi * d for xi, a, d in zip(x, x0, d1)]
            del lower_second
        prev_x0 = x0
    return x


CASES = {
    "ddim_leading_10": lambda: ddim(10),
    "ddim_trailing_7_alpha_one": lambda: ddim(7, "trailing", 0, True),
    "euler_linspace_10": lambda: euler(10),
    "euler_leading_7_offset_1": lambda: euler(7, "leading", 1),
    "dpmpp_linspace_10": lambda: dpmpp(10),
    "dpmpp_linspace_20": lambda: dpmpp(20),
    "dpmpp_heun_leading_6": lambda: dpmpp(6, "leading", 1, heun=True),
}
# final_sigmas_type = "sigma_min" on both sides of lower_order_final's threshold (15 steps).
for _n in range(10, 17):
    CASES[f"dpmpp_sigma_min_{_n}"] = (lambda n: lambda: dpmpp(n, final="sigma_min"))(_n)

if __name__ == "__main__":
    for name, run in CASES.items():
        print(f'{{"{name}", {{{", ".join(f"{v:.9g}" for v in run())}}}}},')
