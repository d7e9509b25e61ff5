#!/usr/bin/env python3
"""timm's training recipe fed by sluice: timm model, optimizer, scheduler, mixup and loss.

    python examples/timm_train.py DATA --model resnet18 [--epochs 1] [--steps N] [--batch 128]

sluice decodes, crops (RandomResizedCrop with timm's scale/ratio), flips and
normalizes; timm's Mixup/CutMix runs on the device batch, then timm's
SoftTargetCrossEntropy. Everything else is timm's own: create_model,
create_optimizer_v2, create_scheduler_v2. Needs timm (and through it
torchvision); the test skips without them.
"""
import argparse
import time

import torch

import sluice.torch as st


def main():
    import timm
    from timm.data import Mixup
    from timm.loss import SoftTargetCrossEntropy
    from timm.optim import create_optimizer_v2
    from timm.scheduler import create_scheduler_v2

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: whole epochs)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--budget", default="4G")
    p.add_argument("--lr", type=float, default=0.05)
    a = p.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = timm.create_model(a.model, num_classes=a.classes).to(device).to(memory_format=torch.channels_last)
    cfg = model.pretrained_cfg
    opt = create_optimizer_v2(model, opt="sgd", lr=a.lr, momentum=0.9, weight_decay=1e-4)
    sched, _ = create_scheduler_v2(opt, sched="cosine", num_epochs=a.epochs, warmup_epochs=0)
    mixup = Mixup(mixup_alpha=0.2, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=a.classes)
    loss_fn = SoftTargetCrossEntropy()
    loader = st.Loader(a.data, batch_size=a.batch, size=a.size, budget=a.budget, device=device,
                       dtype=torch.float32, channels_last=True, drop_last=True,
                       mean=cfg.get("mean", st.IMAGENET_MEAN), std=cfg.get("std", st.IMAGENET_STD))
    step, t0, seen = 0, time.perf_counter(), 0
    with loader:
        for epoch in range(a.epochs):
            for images, labels in loader:
                images, targets = mixup(images, labels)
                with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
                    loss = loss_fn(model(images), targets)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                step += 1
                seen += images.shape[0]
                if a.steps and step >= a.steps:
                    break
            sched.step(epoch + 1)
            if a.steps and step >= a.steps:
                break
    dt = time.perf_counter() - t0
    print(f"timm {a.model}: {step} steps, {seen} images, {seen / dt:.0f} images/s, loss {float(loss):.3f}")


if __name__ == "__main__":
    main()
