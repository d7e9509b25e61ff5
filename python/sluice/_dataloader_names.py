"""The names PyTorch users type for a DataLoader, taken by sluice's loaders.

Each DataLoader keyword argument is either mapped onto sluice's own option,
with its meaning stated here and in docs/python.md, or refused with a message
that names the sluice option to use instead. ``batch_size``, ``shuffle`` and
``drop_last`` are sluice's own names already.

  num_workers         -> workers (threads in this process, not processes);
                         0 ("load in the main process") -> 1 thread: the
                         batches are the same bytes whatever the count
  persistent_workers  accepted, no effect: the threads live as long as the
                         loader
  prefetch_factor     refused unless None: it counts batches per worker
                         process; sluice's prefetch= counts the batch slots of
                         the whole loader
  pin_memory          sluice.torch.Loader: on CUDA the slot region is pinned
                         (True, the default) or not (False); sluice.Loader
                         (host views): False only
  sampler, batch_sampler, collate_fn, worker_init_fn, generator, timeout,
  multiprocessing_context, in_order, pin_memory_device   refused, saying why
"""
import difflib
import numbers

# DataLoader arguments sluice has no use for, and what to do instead.
_REFUSED = {
    "sampler": "sluice orders the samples itself: shuffle=, seed= and rank=/world_size= "
               "(a seeded permutation per epoch, resumable with state_dict())",
    "batch_sampler": "sluice makes batches of batch_size= itself (drop_last=True drops the short "
                     "last one)",
    "collate_fn": "sluice writes each batch in place as fixed-shape arrays; convert them in your "
                  "loop (sluice.torch.Loader converts on the GPU: dtype=, mean=, std=, "
                  "channels_last=)",
    "worker_init_fn": "sluice's workers are C threads of this process: there is no worker "
                      "process to initialise",
    "multiprocessing_context": "sluice's workers are threads of this process, not processes",
    "generator": "sluice's randomness (order and augmentation) comes from seed= alone",
    "timeout": "sluice never waits forever: when you hold every batch slot, the next batch "
               "raises SlotsHeldError at once",
    "in_order": "sluice always delivers batches in sampler order (that is what makes them "
                "deterministic)",
    "pin_memory_device": "sluice.torch.Loader(device='cuda:N') pins for and copies to that device",
}


def _check_bool(name, value):
    if not isinstance(value, (bool, numbers.Integral)) or int(value) not in (0, 1):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def translate(owner, args, workers, known):
    """Map the DataLoader names in ``args`` (the keyword arguments ``owner``,
    e.g. "sluice.Loader", did not know) onto sluice's; returns ``workers``.

    pin_memory=True is refused here: sluice.torch.Loader takes pin_memory
    itself and never passes it on.
    ``known``: the caller's own argument names, for "did you mean".
    Raises TypeError for a name neither sluice nor DataLoader has, and for a
    DataLoader name given beside its sluice name; ValueError/TypeError for a
    DataLoader option sluice cannot honour, naming the sluice option.
    """
    args = dict(args)
    if "num_workers" in args:
        n = args.pop("num_workers")
        if workers is not None and workers != "auto":  # "auto": the default
            raise TypeError(f"{owner}: give workers= or num_workers= (the DataLoader name), not both")
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
            raise ValueError(f"num_workers must be an int >= 0, got {n!r}")
        # sluice always decodes on threads; 0 (DataLoader: in the main process) is one thread
        workers = max(1, int(n))
    if "persistent_workers" in args:
        _check_bool("persistent_workers", args.pop("persistent_workers"))  # threads persist anyway
    if "prefetch_factor" in args and args.pop("prefetch_factor") is not None:
        raise ValueError(
            f"{owner}: prefetch_factor counts batches per DataLoader worker process; sluice's "
            "prefetch= counts the batch slots of the whole loader (in flight + held by you; "
            "None: as many as budget= holds, at most 4). Pass prefetch=N (N >= 2) or leave it out")
    if "pin_memory" in args and _check_bool("pin_memory", args.pop("pin_memory")):
        raise ValueError(
            f"{owner}: pin_memory=True: {owner} yields host views of its batch slots; "
            "sluice.torch.Loader(device='cuda') pins the slot region and copies to the GPU itself")
    for name in args:
        if name in _REFUSED:
            raise TypeError(f"{owner}: the DataLoader argument {name}= has no sluice equivalent: "
                            f"{_REFUSED[name]}")
    if args:
        name = sorted(args)[0]
        close = difflib.get_close_matches(name, known, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}{hint}")
    return workers
