#!/usr/bin/env python3
"""PyTorch Lightning with sluice: a LightningDataModule whose loaders are sluice.torch.Loader.

    python examples/lightning_datamodule.py DATA [--epochs 2] [--batch 64] [--accelerator auto]

What to copy into your own project is SluiceDataModule:
  * setup() builds the loaders with the trainer's rank and world size (each DDP
    rank reads its own shard; nothing is forked, so nothing is copied per worker);
  * train_dataloader()/val_dataloader() return the loaders themselves: Lightning
    iterates any iterable, and each `for` over a sluice loader is the next epoch;
  * state_dict()/load_state_dict() put the loader's position into Lightning's
    checkpoints, so a run resumed from a mid-epoch checkpoint goes on with the
    next batch instead of replaying the epoch.
Batches arrive on the module's device already normalized (uint8 -> dtype and
mean/std on the GPU), as (images, labels).
"""
import argparse

import torch
from torch import nn

try:
    import lightning as L
except ImportError:  # the older package name
    import pytorch_lightning as L

import sluice.torch as st


class SluiceDataModule(L.LightningDataModule):
    def __init__(self, train, val=None, batch_size=64, size=224, budget="4G", workers=None, seed=0):
        super().__init__()
        self.train_path, self.val_path = train, val
        self.kw = dict(batch_size=batch_size, size=size, budget=budget, workers=workers, seed=seed)
        self.train = self.val = None
        self._resume = None

    def _device(self):
        trainer = getattr(self, "trainer", None)
        root = getattr(trainer, "strategy", None)
        dev = getattr(root, "root_device", None) if root is not None else None
        return str(dev) if dev is not None else ("cuda" if torch.cuda.is_available() else "cpu")

    def setup(self, stage=None):
        trainer = getattr(self, "trainer", None)
        rank = trainer.global_rank if trainer is not None else 0
        world = trainer.world_size if trainer is not None else 1
        common = dict(self.kw, rank=rank, world_size=world, device=self._device())
        if self.train is None:
            self.train = st.Loader(self.train_path, preset="train", **common)
            if self._resume is not None:
                self.train.load_state_dict(self._resume)
        if self.val is None and self.val_path:
            self.val = st.Loader(self.val_path, preset="val", shuffle=False, **common)

    def train_dataloader(self):
        return self.train

    def val_dataloader(self):
        return self.val if self.val is not None else []

    def state_dict(self):
        return {"train": self.train.state_dict()} if self.train is not None else {}

    def load_state_dict(self, state):
        if "train" in state:
            if self.train is not None:
                self.train.load_state_dict(state["train"])
            else:
                self._resume = state["train"]

    def teardown(self, stage=None):
        for ld in (self.train, self.val):
            if ld is not None:
                ld.close()
        self.train = self.val = None


class TinyNet(L.LightningModule):
    def __init__(self, classes, lr=0.05):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, classes))
        self.lr = lr
        self.seen = 0

    def training_step(self, batch, i):
        images, labels = batch
        self.seen += images.shape[0]
        loss = nn.functional.cross_entropy(self.net(images.float()), labels)
        self.log("loss", loss, prog_bar=True, batch_size=images.shape[0])
        return loss

    def validation_step(self, batch, i):
        images, labels = batch
        acc = (self.net(images.float()).argmax(1) == labels).float().mean()
        self.log("val_acc", acc, batch_size=images.shape[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data")
    p.add_argument("--val", default=None)
    p.add_argument("--classes", type=int, default=1000, help="outputs of the model (at least the labels' range)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--budget", default="1G")
    p.add_argument("--accelerator", default="auto")
    p.add_argument("--devices", default="auto")
    a = p.parse_args()
    dm = SluiceDataModule(a.data, a.val, batch_size=a.batch, size=a.size, budget=a.budget)
    model = TinyNet(a.classes)
    trainer = L.Trainer(max_epochs=a.epochs, accelerator=a.accelerator, devices=a.devices, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(model, datamodule=dm)
    print(f"lightning: {a.epochs} epochs, {model.seen} samples seen on rank {trainer.global_rank}")


if __name__ == "__main__":
    main()
