#!/usr/bin/env python3
"""Train with a modern recipe: sluice crops on the CPU, RandAugment + MixUp/CutMix on the GPU.

    python examples/train_randaugment_mixup.py DATA --steps 100
    python examples/train_randaugment_mixup.py DATA --steps 5 --arch resnet18 --batch 32 --size 128

DATA is an ImageFolder tree (class folders), or a folder holding one under
train/ (what tools/make_demo_data.py and bench/make_imagenet_like.py write).

The recipe (timm / torchvision v2 reference scripts):
  sluice.torch.Loader  RandomResizedCrop(--size, scale=(0.08, 1)) with bicubic
                       interpolation and flip 0.5, decoded and cropped by
                       sluice's threads; batches arrive on the GPU as uint8
  transform=           on the GPU, on sluice's side stream one batch ahead:
                       RandAugment(num_ops=2, magnitude=9) per sample, then
                       normalization, then MixUp or CutMix (one of them a
                       batch, alpha 0.2 / 1.0) giving soft labels
  model                a torchvision ResNet, SGD, AMP (bf16), channels_last,
                       soft-target cross-entropy

Needs torch and torchvision (imported when the script runs, not before).
Prints one line a --log-every steps and a JSON summary at the end.
"""
import argparse
import json
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data")
    p.add_argument("--arch", default="resnet50", choices=["resnet18", "resnet50"])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--budget", default="2G", help="sluice memory budget")
    p.add_argument("--workers", type=int, default=None, help="sluice decode threads (all CPUs)")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda")
    p.add_argument("--log-every", type=int, default=10)
    return p.parse_args()


def gpu_augment(num_classes, size):
    """transform=(images uint8 [N, 3, H, W] on the GPU, labels int64 [N]) ->
    (normalized float images, soft labels [N, num_classes])."""
    import torch
    from torchvision.transforms import v2

    randaugment = v2.RandAugment(num_ops=2, magnitude=9)
    normalize = v2.Compose([v2.ToDtype(torch.float32, scale=True),
                            v2.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=num_classes),
                           v2.CutMix(alpha=1.0, num_classes=num_classes)])

    def transform(images, labels):
        # RandAugment draws its ops once a call: per sample for per-sample policies
        images = torch.stack([randaugment(img) for img in images])
        images = normalize(images)
        return mix(images, labels)

    return transform


def main():
    args = parse_args()
    import torch
    import torchvision

    import sluice.torch

    torch.manual_seed(args.seed)  # RandAugment and MixUp/CutMix draw from torch's generator
    probe = sluice.Loader(args.data, batch_size=1, budget="64M", workers=1)
    num_classes = max(2, len({probe.sample_path(i).split("/")[-2] for i in range(probe.dataset_size)}))
    probe.close()
    loader = sluice.torch.Loader(
        args.data, batch_size=args.batch, size=args.size, interpolation="bicubic", scale=(0.08, 1.0),
        hflip=0.5, budget=args.budget, workers=args.workers, seed=args.seed, drop_last=True,
        device=args.device, dtype=torch.uint8, transform=gpu_augment(num_classes, args.size))
    use_cuda = args.device.startswith("cuda") and torch.cuda.is_available()
    dev = torch.device(args.device if use_cuda else "cpu")  # the loader falls back to the CPU too
    model = getattr(torchvision.models, args.arch)(num_classes=num_classes).to(dev)
    model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-5)
    amp = dict(device_type=dev.type, dtype=torch.bfloat16)

    step, seen, t0, epoch = 0, 0, time.perf_counter(), 0
    loss = torch.zeros(())
    while step < args.steps:
        loader.set_epoch(epoch)
        for images, soft in loader:
            images = images.contiguous(memory_format=torch.channels_last)
            with torch.autocast(**amp):
                logits = model(images)
                loss = torch.sum(-soft * torch.log_softmax(logits.float(), dim=1), dim=1).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            seen += images.shape[0]
            if step % args.log_every == 0:
                print(f"step {step} loss {loss.item():.3f}", flush=True)
            if step >= args.steps:
                break
        epoch += 1
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    secs = time.perf_counter() - t0
    stats = loader.stats()
    loader.close()
    print(json.dumps({"steps": step, "images": seen, "seconds": round(secs, 3),
                      "images_per_s": round(seen / secs, 1), "final_loss": round(float(loss), 4),
                      "classes": num_classes, "device": str(dev),
                      "loader_errors": stats["errors"], "consumer_wait_s": round(stats["consumer_wait_s"], 3)}))


if __name__ == "__main__":
    main()
