"""SGD, Adam and AdamW against torch.optim over several steps: the parameters after every step and
the optimizer's buffers at the end. Gradients are given per step; in the "late" schedules one
parameter gets its first gradient at step 2 and another skips step 3, as a layer that is frozen
at first or unused for a batch would. clip_grad_norm_ against torch.nn.utils.clip_grad_norm_."""

import torch

from parity import Family, randn, run_qkv

f = Family("optim")
f64, f32 = torch.float64, torch.float32
SHAPES = [(3, 4), (5,), (2, 2)]
STEPS = 6
EVERY_STEP = {i: set(range(STEPS)) for i in range(len(SHAPES))}
# p1 has no gradient at step 3; p2 none before step 2.
LATE = {0: set(range(STEPS)), 1: set(range(STEPS)) - {3}, 2: set(range(2, STEPS))}
BUFFERS = ("momentum_buffer", "exp_avg", "exp_avg_sq")


def optimizer(dtype, kind, schedule, lr_changes=None, **options):
    def run():
        params = [randn(*s, dtype=dtype).requires_grad_(True) for s in SHAPES]
        tensors = {f"param.p{i}": p.detach().clone() for i, p in enumerate(params)}
        lr = options.pop("lr")
        cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[kind]
        opt = cls(params, lr=lr, **options)
        theirs = {}
        for step in range(STEPS):
            if lr_changes and step in lr_changes:
                opt.param_groups[0]["lr"] = lr_changes[step]
            opt.zero_grad(set_to_none=True)
            for i, p in enumerate(params):
                if step in schedule[i]:
                    g = randn(*p.shape, dtype=dtype)
                    tensors[f"g.{step}.p{i}"] = g
                    p.grad = g.clone()
            opt.step()
            for i, p in enumerate(params):
                theirs[f"step{step}.p{i}"] = p.detach().clone()
        ours = run_qkv("optimizer", tensors, meta(kind, lr, options, lr_changes), dtype)
        for i, p in enumerate(params):
            for name in BUFFERS:
                key = f"state.{i}.{name}"
                if name in opt.state[p] and key in ours:
                    theirs[key] = opt.state[p][name].detach().clone()
        # Only the buffers both keep are compared (qkv names its per-parameter state the same).
        ours = {k: v for k, v in ours.items() if not k.startswith("state.") or k in theirs}
        return ours, theirs, {}
    return run


def meta(kind, lr, options, lr_changes):
    m = {"optimizer": kind, "lr": repr(lr), "steps": STEPS}
    for k, v in options.items():
        if k == "betas":
            m["beta1"], m["beta2"] = repr(v[0]), repr(v[1])
        else:
            m[k] = v if isinstance(v, bool) else repr(v)
    for step, value in (lr_changes or {}).items():
        m[f"lr.{step}"] = repr(value)
    return m


def sgd_cases(dtype, schedule, tag):
    f.case(f"sgd_{tag}", dtype, optimizer(dtype, "sgd", schedule, lr=0.1))
    f.case(f"sgd_momentum_{tag}", dtype, optimizer(dtype, "sgd", schedule, lr=0.1, momentum=0.9))
    f.case(f"sgd_momentum_dampening_{tag}", dtype,
           optimizer(dtype, "sgd", schedule, lr=0.1, momentum=0.9, dampening=0.3))
    f.case(f"sgd_nesterov_weight_decay_{tag}", dtype,
           optimizer(dtype, "sgd", schedule, lr=0.05, momentum=0.8, nesterov=True,
                     weight_decay=0.01))


def adam_cases(dtype, schedule, tag):
    f.case(f"adam_{tag}", dtype, optimizer(dtype, "adam", schedule, lr=0.01))
    f.case(f"adam_weight_decay_betas_{tag}", dtype,
           optimizer(dtype, "adam", schedule, lr=0.02, betas=(0.8, 0.99), eps=1e-6,
                     weight_decay=0.1))
    f.case(f"adamw_{tag}", dtype, optimizer(dtype, "adamw", schedule, lr=0.01))
    f.case(f"adamw_weight_decay_{tag}", dtype,
           optimizer(dtype, "adamw", schedule, lr=0.02, betas=(0.85, 0.995), weight_decay=0.3))


for dtype in (f64, f32):
    sgd_cases(dtype, EVERY_STEP, "every_step")
    adam_cases(dtype, EVERY_STEP, "every_step")
sgd_cases(f64, LATE, "late_gradients")
adam_cases(f64, LATE, "late_gradients")
f.case("adam_lr_changes", f64,
       optimizer(f64, "adam", EVERY_STEP, lr=0.01, lr_changes={2: 0.05, 4: 0.001}))
f.case("sgd_momentum_lr_changes", f64,
       optimizer(f64, "sgd", EVERY_STEP, lr=0.1, momentum=0.9, lr_changes={3: 0.02}))


def clip(dtype, max_norm, with_grad=(0, 1, 2)):
    def run():
        params = [randn(*s, dtype=dtype).requires_grad_(True) for s in SHAPES]
        tensors = {f"param.p{i}": p.detach().clone() for i, p in enumerate(params)}
        for i in with_grad:
            g = randn(*SHAPES[i], dtype=dtype, scale=0.7)
            tensors[f"g.p{i}"] = g
            params[i].grad = g.clone()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        theirs = {"out.norm": norm.detach().double()}
        theirs.update({f"grad.p{i}": params[i].grad.clone() for i in with_grad})
        ours = run_qkv("clip_grad_norm", tensors, {"max_norm": repr(max_norm)}, dtype)
        return ours, theirs, {}
    return run


f.case("clip_grad_norm_clips", f64, clip(f64, 1.0))
f.case("clip_grad_norm_below_max_unchanged", f64, clip(f64, 100.0))
f.case("clip_grad_norm_skips_params_without_grad", f64, clip(f64, 0.5, with_grad=(0, 2)))
f.case("clip_grad_norm_clips", f32, clip(f32, 1.0))

f.finish()
