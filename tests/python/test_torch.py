"""sluice.torch: tensors on the GPU (CPU fallback here), memory_report."""
import gc
import os
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import sluice  # noqa: E402
import sluice.torch as st  # noqa: E402
from conftest import CLASSES, PER_CLASS  # noqa: E402

N = len(CLASSES) * PER_CLASS
BS = 8
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
MEAN = torch.tensor(st.IMAGENET_MEAN).view(1, 3, 1, 1)
STD = torch.tensor(st.IMAGENET_STD).view(1, 3, 1, 1)


def kw(**k):
    # the CPU decode: these cases compare with the plain loader's CPU pixels (the GPU decode's own
    # cases are in test_gpu.py)
    k.setdefault("decode", "cpu")
    k.setdefault("batch_size", BS)
    k.setdefault("size", 32)
    k.setdefault("budget", "64M")
    k.setdefault("workers", 2)
    k.setdefault("seed", 11)
    return k


def reference(dataset, epochs=1, **k):
    """uint8 images, labels and indexes from the plain loader."""
    out = []
    with sluice.Loader(dataset, **kw(**k)) as ld:
        for _ in range(epochs):
            for b in ld:
                out.append((torch.from_numpy(np.asarray(b["image"]).copy()),
                            torch.from_numpy(np.asarray(b["label"]).copy())))
    return out


def normalized(u8):
    return (u8.float() / 255 - MEAN) / STD


def own(t):
    """A copy on the CPU: uint8 CPU batches are zero-copy views holding slots."""
    return t.detach().cpu().clone()


def device_for_tests():
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback without CUDA")
def test_cpu_fallback_warns_once_and_normalizes(dataset):
    ref = reference(dataset)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ld = st.Loader(dataset, device="cuda", dtype=torch.float32, **kw())
    assert len([x for x in w if "CUDA is not available" in str(x.message)]) == 1
    with ld:
        got = list(ld)
    assert len(got) == len(ref)
    for (img, lab), (u8, rlab) in zip(got, ref):
        assert img.device.type == "cpu" and img.dtype == torch.float32
        assert torch.equal(lab, rlab)
        assert torch.allclose(img, normalized(u8), atol=1e-5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback without CUDA")
def test_cpu_fallback_default_dtype_is_what_a_cpu_model_takes(dataset):
    """device="cuda" without CUDA: the default dtype is float32 (a float32 model
    on the CPU takes the batch as it comes); a dtype given is kept."""
    model = torch.nn.Conv2d(3, 4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with st.Loader(dataset, device="cuda", **kw()) as ld:
            img, _ = next(iter(ld))
            assert img.dtype == torch.float32 and img.device.type == "cpu"
            assert model(img).shape == (BS, 4, 30, 30)
        with st.Loader(dataset, device="cuda", dtype=torch.bfloat16, **kw()) as ld:
            assert next(iter(ld))[0].dtype == torch.bfloat16


def test_default_dtype_follows_the_device(dataset):
    """dtype=None: float32 on the CPU, float16 on CUDA."""
    with st.Loader(dataset, device="cpu", **kw()) as ld:
        assert next(iter(ld))[0].dtype == torch.float32
    if torch.cuda.is_available():
        with st.Loader(dataset, device="cuda", **kw()) as ld:
            assert next(iter(ld))[0].dtype == torch.float16


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.uint8])
@pytest.mark.parametrize("channels_last", [False, True])
def test_dtypes_and_layout(dataset, dtype, channels_last):
    ref = reference(dataset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ld = st.Loader(dataset, device=device_for_tests(), dtype=dtype, channels_last=channels_last, **kw())
    with ld:
        for (img, lab), (u8, rlab) in zip(ld, ref):
            assert img.dtype == dtype and img.shape == (BS, 3, 32, 32)
            assert img.is_contiguous(memory_format=torch.channels_last if channels_last
                                     else torch.contiguous_format)
            assert torch.equal(lab.cpu(), rlab)
            if dtype == torch.uint8:
                assert torch.equal(img.cpu(), u8)
            else:
                tol = {torch.float16: 2e-2, torch.bfloat16: 3e-2, torch.float32: 1e-5}[dtype]
                assert torch.allclose(img.cpu().float(), normalized(u8), atol=tol, rtol=tol)


def test_no_normalization_scales_to_unit(dataset):
    ref = reference(dataset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ld = st.Loader(dataset, device=device_for_tests(), dtype=torch.float32, mean=None, std=None, **kw())
    with ld:
        img, _ = next(iter(ld))
    assert torch.allclose(img.cpu(), ref[0][0].float() / 255)


def test_torch_loader_argument_errors(dataset):
    with pytest.raises(TypeError, match="dtype must be one of"):
        st.Loader(dataset, device="cpu", dtype=torch.int32, **kw())
    with pytest.raises(ValueError, match="mean must have 3 values"):
        st.Loader(dataset, device="cpu", mean=(0.5, 0.5), **kw())
    with pytest.raises(ValueError, match="std must be > 0"):
        st.Loader(dataset, device="cpu", std=(0.2, 0.0, 0.2), **kw())
    with pytest.raises(ValueError, match="mean and std go together"):
        st.Loader(dataset, device="cpu", mean=None, **kw())
    with pytest.raises(ValueError, match="device must be"):
        st.Loader(dataset, device="meta", **kw())
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        st.Loader(dataset, device="cpu", **kw(batch_size=0))


@pytest.mark.parametrize("stop", [1, 5])
def test_torch_resume_equals_uninterrupted(dataset, stop):
    dev = device_for_tests()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with st.Loader(dataset, device=dev, dtype=torch.uint8, **kw()) as ld:
            ref = [(own(i), own(l)) for _ in range(2) for i, l in ld]
        with st.Loader(dataset, device=dev, dtype=torch.uint8, **kw()) as ld:
            first = []
            for i, l in ld:
                first.append((own(i), own(l)))
                if len(first) == stop:
                    break
            state = ld.state_dict()
            # a loop left early ends its pass: the next loop runs the next
            # epoch, whole, as a DataLoader's would
            second = [(own(i), own(l)) for i, l in ld]
        assert len(second) == N // BS
        for (a, la), (b, lb) in zip(ref[N // BS:], second):
            assert torch.equal(a, b) and torch.equal(la, lb)
        with st.Loader(dataset, device=dev, dtype=torch.uint8, **kw(workers=1)) as ld:
            ld.load_state_dict(state)
            rest = [(own(i), own(l)) for _ in range(2) for i, l in ld]
    assert len(rest) == len(ref) - stop
    for (a, la), (b, lb) in zip(ref[stop:], rest):
        assert torch.equal(a, b) and torch.equal(la, lb)
    for (a, la), (b, lb) in zip(ref, first):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_memory_report_is_flat_and_named_for_logs():
    r = st.memory_report()
    assert r["memory/rss_gb"] > 0
    assert r["memory/peak_rss_gb"] >= r["memory/rss_gb"]
    assert r["memory/system_available_gb"] > 0
    assert all(k.startswith("memory/") and k.endswith("_gb") for k in r)
    assert all(isinstance(v, float) for v in r.values())


@cuda
def test_cuda_batches_pinned_and_correct(dataset):
    ref = reference(dataset)
    with st.Loader(dataset, device="cuda", dtype=torch.float16, channels_last=True, **kw()) as ld:
        s = ld.stats()
        assert s["pinned_bytes"] > 0
        base, length = ld.loader.slot_region()
        assert s["pinned_bytes"] == length
        n = 0
        for (img, lab), (u8, rlab) in zip(ld, ref):
            assert img.is_cuda and lab.is_cuda
            assert img.is_contiguous(memory_format=torch.channels_last)
            assert torch.equal(lab.cpu(), rlab)
            assert torch.allclose(img.float().cpu(), normalized(u8), atol=2e-2, rtol=2e-2)
            n += 1
        assert n == N // BS
        # every slot came back once its copy was done
        torch.cuda.synchronize()
        assert ld.stats()["slots_held"] <= 1


@cuda
def test_cuda_work_on_the_consumer_stream_is_ordered(dataset):
    # Consume on a non-default stream: the loader must order its copies
    # before the consumer's kernels.
    ref = reference(dataset)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s), st.Loader(dataset, device="cuda", dtype=torch.float32, **kw()) as ld:
        sums = [img.sum(dtype=torch.float64) for img, _ in ld]
    s.synchronize()
    for got, (u8, _) in zip(sums, ref):
        assert abs(got.item() - normalized(u8).double().sum().item()) < 1e-2 * u8.numel()


def _rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


@cuda
def test_cuda_budget_respected_with_pinned_memory(tmp_path):
    from conftest import make_dataset

    make_dataset(str(tmp_path), per_class=64)
    torch.zeros(1, device="cuda")  # the CUDA context's own memory is not ours
    torch.cuda.synchronize()
    gc.collect()
    budget = 96 << 20
    before = _rss()
    with st.Loader(str(tmp_path), device="cuda", batch_size=64, size=224, budget=budget,
                   workers=2, dtype=torch.float16, decode="cpu") as ld:  # the pinned CPU path
        for _ in range(2):
            for img, lab in ld:
                pass
        s = ld.stats()
        assert s["pinned_bytes"] > 0
        assert s["peak_accounted_bytes"] <= budget
        growth = _rss() - before
    overhead = 64 << 20  # thread stacks, library code, allocator slack (docs/python.md)
    assert growth <= budget + overhead, f"RSS grew {growth >> 20} MiB for a {budget >> 20} MiB budget"


# ---- transform= (GPU-side augmentation hook) -----------------------------------

def test_transform_runs_on_each_converted_batch(dataset):
    """fn(images, labels) sees each batch after dtype and normalization, on
    the loader's device, and what it returns is what the loop yields (here
    a mixup-like blend with one-hot soft labels: dtype and shape change)."""
    ref = reference(dataset, shuffle=False)
    seen = []

    def mix(images, labels):
        seen.append((images.dtype, images.device.type, tuple(images.shape)))
        soft = torch.nn.functional.one_hot(labels, len(CLASSES)).float()
        return 0.5 * images + 0.5 * images.flip(0), 0.5 * soft + 0.5 * soft.flip(0)

    dev = device_for_tests()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ld = st.Loader(dataset, device=dev, dtype=torch.float32, transform=mix, **kw(shuffle=False))
    got = [(own(x), own(y)) for x, y in ld]
    ld.close()
    assert len(got) == len(ref) == len(seen)
    assert all(s == (torch.float32, dev, (BS, 3, 32, 32)) for s in seen[:-1])
    for (x, y), (u8, lab) in zip(got, ref):
        norm = normalized(u8)
        assert torch.allclose(x, 0.5 * norm + 0.5 * norm.flip(0), atol=1e-5)
        soft = torch.nn.functional.one_hot(lab, len(CLASSES)).float()
        assert torch.equal(y, 0.5 * soft + 0.5 * soft.flip(0))


def test_transform_uint8_and_errors(dataset):
    ref = reference(dataset, shuffle=False)
    dev = device_for_tests()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ld = st.Loader(dataset, device=dev, dtype=torch.uint8, transform=lambda x, y: (255 - x, y + 1),
                       **kw(shuffle=False))
        x, y = next(iter(ld))
        assert torch.equal(own(x), 255 - ref[0][0]) and torch.equal(own(y), ref[0][1] + 1)
        ld.close()
        with pytest.raises(TypeError, match="transform must be callable"):
            st.Loader(dataset, device=dev, transform=42, **kw())
        ld = st.Loader(dataset, device=dev, transform=lambda x, y: x, **kw())
        with pytest.raises(TypeError, match=r"transform must return \(images, labels\)"):
            next(iter(ld))
        ld.close()
