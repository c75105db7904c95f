"""Conv2d, BatchNorm2d (several training steps, then eval), MaxPool2d, AvgPool2d and
AdaptiveAvgPool2d against PyTorch."""

import torch

from parity import Family, grads, leaf, loss_against, module_case, perturb_, randn, run_qkv

f = Family("conv")
f64, f32 = torch.float64, torch.float32


def conv2d(dtype, cin=4, cout=6, k=3, stride=1, padding=0, groups=1, bias=True, size=(7, 6)):
    def run():
        m = perturb_(torch.nn.Conv2d(cin, cout, k, stride=stride, padding=padding, groups=groups,
                                     bias=bias))
        meta = {"in_channels": cin, "out_channels": cout, "kernel_size": k, "stride": stride,
                "padding": padding, "groups": groups, "bias": bias}
        return module_case("conv2d", meta, dtype, m, {"x": randn(2, cin, *size, dtype=dtype)},
                           lambda m, x: {"y": m(x["x"])})
    return run


f.case("conv2d_3x3", f64, conv2d(f64))
f.case("conv2d_stride2_pad1", f64, conv2d(f64, stride=2, padding=1))
f.case("conv2d_groups2_no_bias", f64, conv2d(f64, groups=2, bias=False, padding=1))
f.case("conv2d_depthwise", f64, conv2d(f64, cin=4, cout=4, groups=4, padding=1))
f.case("conv2d_1x1", f64, conv2d(f64, k=1))
f.case("conv2d_stride2_pad1", f32, conv2d(f32, stride=2, padding=1))
# float32 1x1 windows without padding take the CPU's pointwise convolution: a residual shortcut
f.case("conv2d_1x1", f32, conv2d(f32, k=1))
f.case("conv2d_1x1_stride2_no_bias", f32, conv2d(f32, cout=32, k=1, stride=2, bias=False, size=(9, 37)))
# float32 3x3 "same" windows with enough channels take the CPU's Winograd F(2x2, 3x3) for y and for
# gx (by the flipped kernel); odd sizes leave the last tiles half outside
f.case("conv2d_3x3_same_48_to_17", f32, conv2d(f32, cin=48, cout=17, padding=1, size=(9, 13)))


def batch_norm(dtype, steps=3, momentum=0.1, eps=1e-5):
    """`steps` training steps on fresh batches (outputs, gradients, running statistics and
    num_batches_tracked after each), then an eval step on the running statistics."""

    def run():
        C = 3
        m = perturb_(torch.nn.BatchNorm2d(C, eps=eps, momentum=momentum)).to(dtype)
        xs = {str(s): randn(4, C, 3, 2, dtype=dtype, scale=1.5) + 0.7 for s in range(steps)}
        xs["eval"] = randn(2, C, 3, 2, dtype=dtype)
        tensors = {"param." + k: v.detach().clone() for k, v in m.state_dict().items()}
        theirs = {}
        for s, x in xs.items():
            if s == "eval":
                m.eval()
            x = leaf(x)
            y = m(x)
            gout = randn(*y.shape, dtype=dtype)
            loss_against({"y": y}, {"y": gout}).backward()
            tensors[f"in.x.{s}"] = x.detach()
            tensors[f"gout.y.{s}"] = gout
            theirs[f"out.y.{s}"] = y.detach()
            theirs.update(grads(dict(m.named_parameters()), f"grad.{s}."))
            theirs[f"grad.{s}.in.x.{s}"] = x.grad.detach()
            m.zero_grad(set_to_none=True)
            if s != "eval":
                theirs.update({f"{s}.{k}": v.detach().clone() for k, v in m.named_buffers()})
        meta = {"num_features": C, "eps": repr(eps), "momentum": repr(momentum), "steps": steps}
        return run_qkv("batch_norm2d", tensors, meta, dtype), theirs, {}
    return run


f.case("batch_norm2d_3_steps_then_eval", f64, batch_norm(f64))
f.case("batch_norm2d_momentum_0.5", f64, batch_norm(f64, steps=2, momentum=0.5, eps=1e-3))
f.case("batch_norm2d_3_steps_then_eval", f32, batch_norm(f32))


def pool(dtype, kind, size=(7, 6), **kw):
    def run():
        if kind == "max":
            fn = torch.nn.MaxPool2d(kw["kernel_size"], stride=kw.get("stride"),
                                    padding=kw.get("padding", 0))
        elif kind == "avg":
            fn = torch.nn.AvgPool2d(kw["kernel_size"], stride=kw.get("stride"),
                                    padding=kw.get("padding", 0))
        else:
            fn = torch.nn.AdaptiveAvgPool2d((kw["out_h"], kw["out_w"]))
        meta = dict(kw, pool=kind)
        return module_case("pool", meta, dtype, None, {"x": randn(2, 3, *size, dtype=dtype)},
                           lambda m, x: {"y": fn(x["x"])})
    return run


f.case("max_pool2d_2x2", f64, pool(f64, "max", kernel_size=2))
f.case("max_pool2d_3x3_stride2_pad1", f64, pool(f64, "max", kernel_size=3, stride=2, padding=1))
f.case("max_pool2d_3x3_stride1_overlapping", f64, pool(f64, "max", kernel_size=3, stride=1))
f.case("avg_pool2d_2x2", f64, pool(f64, "avg", kernel_size=2))
f.case("avg_pool2d_3x3_stride2_pad1", f64, pool(f64, "avg", kernel_size=3, stride=2, padding=1))
f.case("adaptive_avg_pool2d_3x4", f64, pool(f64, "adaptive_avg", out_h=3, out_w=4))
f.case("adaptive_avg_pool2d_1x1", f64, pool(f64, "adaptive_avg", out_h=1, out_w=1))
f.case("adaptive_avg_pool2d_larger_than_input", f64,
       pool(f64, "adaptive_avg", size=(3, 2), out_h=5, out_w=3))
f.case("max_pool2d_3x3_stride2_pad1", f32, pool(f32, "max", kernel_size=3, stride=2, padding=1))
f.case("avg_pool2d_3x3_stride2_pad1", f32, pool(f32, "avg", kernel_size=3, stride=2, padding=1))

f.finish()
