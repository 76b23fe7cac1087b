#!/usr/bin/env python3
"""Train a small Transformer for a few steps on one GPU, with PyTorch's own
CUDA caching allocator or with libmemreplay plugged in, and write what the
allocator did as JSON. bench/gpu-pytorch.sh runs it both ways, each in a
process of its own (the allocator cannot be swapped once CUDA is
initialised), and compares.

    python bench/gpu_train.py --allocator native --out native.json
    python bench/gpu_train.py --allocator memreplay --lib dist/libmemreplay.so \\
        --trace run.mrt --out memreplay.json

The model is built from its configuration (no downloaded weights): token
and position embeddings, N encoder layers (torch.nn.TransformerEncoder,
pre-norm, GELU), a tied LM head, AdamW, causal-LM loss on random tokens.
Every step also copies its batch on a side stream and calls
Tensor.record_stream, so the allocator's record_stream hook is exercised.
Determinism is on (same seed, deterministic algorithms), so both allocators
must see the same loss at every step: a block handed out twice, or memory
the allocator does not own, shows as a loss mismatch or a CUDA error.

The JSON has: the settings, torch/CUDA/GPU versions, per-step times (after
warm-up), the loss curve, and the allocator's peak reserved and allocated
bytes, num_alloc_retries, num_ooms and num_device_alloc/free, read with
torch.cuda.memory_stats() for the native allocator and with memreplay's
memreplay_stats_json for ours (PyTorch refuses memory_stats() with a
pluggable allocator). With --oom-check it then asks for more memory than
the GPU has and records whether a catchable exception came back and the
process kept working.
"""

import argparse
import json
import math
import os
import platform
import sys
import time

# Deterministic cuBLAS needs this before CUDA initialises.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--allocator", choices=["native", "memreplay"], required=True)
    p.add_argument("--lib", default=None, help="libmemreplay.so (default: dist/libmemreplay.so)")
    p.add_argument("--alloc-conf", default=None,
                   help="allocator settings (PYTORCH_CUDA_ALLOC_CONF syntax) for either allocator")
    p.add_argument("--trace", default=None, help="memreplay: record and write the trace here")
    p.add_argument("--snapshot", default=None,
                   help="write a PyTorch snapshot pickle here (native: _record_memory_history + _dump_snapshot)")
    p.add_argument("--memory-stats", default=None,
                   help="write the allocator's whole memory_stats() here as JSON, for `memreplay replay --expect-stats`")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="bf16", help="autocast dtype")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--oom-check", action="store_true", help="after training, provoke an OOM and record what happens")
    p.add_argument("--out", required=True, help="JSON result")
    return p.parse_args()


def main():
    args = parse_args()
    if args.allocator == "memreplay":
        import memreplay_torch as mt

        # Before any CUDA tensor. --alloc-conf goes to MEMREPLAY_ALLOC_CONF;
        # without it the library reads PYTORCH_CUDA_ALLOC_CONF, as PyTorch does.
        mt.use_memreplay(lib_path=args.lib, alloc_conf=args.alloc_conf, record=bool(args.trace or args.snapshot))
    elif args.alloc_conf is not None:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = args.alloc_conf

    import torch
    import torch.nn as nn

    if not torch.cuda.is_available():
        sys.exit("gpu_train.py: no CUDA device")
    dev = torch.device("cuda", 0)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    if args.allocator == "native" and args.snapshot:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(args.vocab, args.d_model)
            self.pos = nn.Embedding(args.seq, args.d_model)
            layer = nn.TransformerEncoderLayer(args.d_model, args.heads, 4 * args.d_model, dropout=0.0,
                                               activation="gelu", batch_first=True, norm_first=True)
            self.body = nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(args.d_model)
            self.head = nn.Linear(args.d_model, args.vocab, bias=False)
            self.head.weight = self.tok.weight
            mask = torch.triu(torch.full((args.seq, args.seq), float("-inf")), diagonal=1)
            self.register_buffer("mask", mask, persistent=False)

        def forward(self, x):
            pos = torch.arange(x.shape[1], device=x.device)
            h = self.tok(x) + self.pos(pos)
            h = self.body(h, mask=self.mask, is_causal=True)
            return self.head(self.norm(h))

    model = LM().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    amp = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    scaler = torch.amp.GradScaler("cuda", enabled=args.dtype == "fp16")
    side = torch.cuda.Stream(dev)
    gen = torch.Generator(device="cpu").manual_seed(args.seed)

    losses, times = [], []
    for step in range(args.steps):
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        cpu = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=gen).pin_memory()
        with torch.cuda.stream(side):  # the batch arrives on a side stream...
            batch = cpu.to(dev, non_blocking=True)
        torch.cuda.current_stream(dev).wait_stream(side)
        batch.record_stream(torch.cuda.current_stream(dev))  # ...and is used on the main one
        x, y = batch[:, :-1], batch[:, 1:]
        with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
            logits = model(x)
            loss = nn.functional.cross_entropy(logits.float().reshape(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        del batch, x, y, logits
        losses.append(loss.item())  # synchronises
        t1 = time.perf_counter()
        if step >= args.warmup:
            times.append(t1 - t0)
    torch.cuda.synchronize(dev)

    if args.allocator == "native":
        s = torch.cuda.memory_stats(dev)
    else:
        s = mt.stats(0)
    if args.memory_stats:  # before the snapshot: nothing allocates in between
        with open(args.memory_stats, "w") as f:
            json.dump(dict(s), f, indent=1, sort_keys=True)
    keys = ["reserved_bytes.all.peak", "reserved_bytes.all.current", "allocated_bytes.all.peak",
            "allocated_bytes.all.current", "num_alloc_retries", "num_ooms", "num_device_alloc",
            "num_device_free", "segment.all.peak", "inactive_split_bytes.all.peak"]
    props = torch.cuda.get_device_properties(dev)
    res = {
        "allocator": args.allocator,
        "alloc_conf": args.alloc_conf,
        "config": {k: getattr(args, k) for k in ("steps", "warmup", "batch", "seq", "d_model", "layers",
                                                 "heads", "vocab", "dtype", "seed")},
        "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
                     "gpu": props.name, "gpu_total_bytes": props.total_memory},
        "parameters": sum(p.numel() for p in model.parameters()),
        "stats": {k: s.get(k) for k in keys},
        # for the native allocator, the same as torch.cuda.max_memory_reserved()
        "peak_reserved_bytes": s.get("reserved_bytes.all.peak"),
        "peak_allocated_bytes": s.get("allocated_bytes.all.peak"),
        "alloc_retries": s.get("num_alloc_retries"),
        "losses": losses,
        "losses_finite": all(math.isfinite(v) for v in losses),
        "step_times_s": times,
        "step_time_median_s": sorted(times)[len(times) // 2] if times else None,
        "step_time_mean_s": sum(times) / len(times) if times else None,
    }
    if args.allocator == "native":
        res["max_memory_reserved"] = torch.cuda.max_memory_reserved(dev)

    if args.trace:
        mt.write_trace(args.trace)
        res["trace"] = args.trace
    if args.snapshot:
        if args.allocator == "native":
            torch.cuda.memory._dump_snapshot(args.snapshot)
        else:
            mt.write_snapshot(args.snapshot)
        res["snapshot"] = args.snapshot

    if args.oom_check:
        res["oom_check"] = oom_check(torch, dev, props.total_memory)
        if args.allocator == "memreplay":
            res["oom_check"]["num_ooms_after"] = mt.stats(0).get("num_ooms")

    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps({k: res[k] for k in ("allocator", "alloc_conf", "peak_reserved_bytes", "alloc_retries",
                                          "step_time_median_s", "losses_finite")}))


def oom_check(torch, dev, total):
    """Ask for twice the GPU's memory: PyTorch's allocator raises
    torch.OutOfMemoryError; memreplay's throws from memreplay_malloc, which
    PyTorch surfaces as a RuntimeError with PyTorch's message. Either way the
    process must survive and keep allocating."""
    out = {"raised": False}
    try:
        t = torch.empty(2 * total, dtype=torch.uint8, device=dev)
        out["raised"] = False
        out["unexpected"] = "allocated %d bytes" % t.numel()
        del t
    except Exception as e:  # noqa: BLE001: recording which exception it is
        out["raised"] = True
        out["type"] = type(e).__module__ + "." + type(e).__name__
        out["message"] = str(e)[:400]
        out["cuda_oom_text"] = "CUDA out of memory." in str(e)
    try:
        x = torch.ones(1 << 20, device=dev)
        out["after"] = float(x.sum().item())  # 1048576.0 when the process still works
    except Exception as e:  # noqa: BLE001
        out["after_error"] = str(e)[:400]
    return out


if __name__ == "__main__":
    main()
