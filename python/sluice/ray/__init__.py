"""sluice.ray: sluice on a Ray cluster (docs/ray.md). Needs Ray (``pip install sluice[ray]``).

Ray Train, inside ``train_loop_per_worker`` (needs torch)::

    import sluice.ray
    loader = sluice.ray.Loader("/data/train", batch_size=256, budget="4G")  # rank, world, device from Ray
    for epoch in range(epochs):
        for images, labels in loader:
            ...
        sluice.ray.report({"epoch": epoch}, loader)   # ray.train.report + the loader's state

Ray Data::

    ds = sluice.ray.read("/data/train", epoch=0, batch_size=256, budget="1G")
    for batch in ds.iter_torch_batches(batch_size=256):
        ...

``Loader`` and ``report`` live in sluice.ray.train (imported on first use,
it imports torch); ``read``, ``SluiceDatasource`` and ``stats`` in
sluice.ray.data.
"""
from .data import SluiceDatasource, read, stats  # noqa: F401

__all__ = ["Loader", "report", "read", "stats", "SluiceDatasource", "train_context"]


def __getattr__(name):  # the Train part imports torch: only when asked for
    if name in ("Loader", "report", "train_context"):
        from . import train

        return getattr(train, name)
    raise AttributeError(f"module 'sluice.ray' has no attribute {name!r}")
