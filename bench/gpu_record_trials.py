#!/usr/bin/env python3
"""Record real PyTorch memory traces of HPO-style fine-tuning trials on a GPU,
for traces/ (docs/libmemreplay.md, "GPU checks").

Each trial is one process (so each trace starts from an empty allocator and
a fresh CUDA context, as a trial worker's first trial does): BERT-base
built from its configuration (no downloaded weights: random init, which
allocates exactly what loaded weights would) with a sequence-classification
head, transformers' BertForSequenceClassification when transformers imports
(the GPU machines have it; what the BERT-family study fine-tuned), else the same
shapes from torch.nn.TransformerEncoder (--model), AdamW, and N training steps on random tokens at one
(batch size, sequence length, precision) point of a small grid, recorded
with PyTorch's own allocator:

    torch.cuda.memory._record_memory_history(max_entries=..., stacks="python")
    ... build the model, train N steps, one eval batch ...
    torch.cuda.memory._dump_snapshot(DIR/NAME.pickle)

Beside each pickle: NAME.stats.json (torch.cuda.memory_stats() at the end,
the oracle of `memreplay replay --check --expect-stats NAME.stats.json
NAME.pickle`) and NAME.meta.json
(the trial's settings, versions, the GPU, peak memory, time per step,
whether it ran out of memory). A trial that runs out of memory still dumps
its snapshot (an OOM trace is the interesting kind) and is marked "oom".
DIR/index.json lists them all.

    python bench/gpu_record_trials.py --out-dir $OUT/trials
    python bench/gpu_record_trials.py --out-dir $OUT/trials --batches 8,32 --seqs 128,512 --dtypes fp16
    python bench/gpu_record_trials.py --out-dir $OUT/trials24 --gpu-memory 24GiB --batches 32,64,128 --seqs 512
        # the BERT-family study's 24 GiB GPU on a larger one: the big trials run out of memory

To commit some to traces/: copy the .pickle with its .stats.json and
.meta.json to traces/pytorch-recorded/ (or similar), check each with
`memreplay replay --check --expect-stats NAME.stats.json NAME.pickle`, and
describe them in traces/README.md with the command that made them (this
script's --trial line is in meta.json). sim/replay's
TestRecordedTracesPredictMemoryStats then checks every such pair in CI.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

# BERT-base (bert-base-uncased's config.json values).
BERT_BASE = dict(vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072, max_positions=512, type_vocab=2)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--batches", default="8,16,32", help="comma-separated batch sizes")
    p.add_argument("--seqs", default="128,256,512", help="comma-separated sequence lengths (<= 512)")
    p.add_argument("--dtypes", default="fp16", help="comma-separated: fp32, fp16 (AMP + GradScaler), bf16 (AMP)")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--max-entries", type=int, default=1_000_000, help="_record_memory_history ring size")
    p.add_argument("--alloc-conf", default=None, help="PYTORCH_CUDA_ALLOC_CONF for the trials")
    p.add_argument("--gpu-memory", default=None,
                   help="limit each trial to this much of the GPU (e.g. 24GiB, the BERT-family study's GPU) with "
                        "torch.cuda.set_per_process_memory_fraction, so that a large GPU records the OOMs "
                        "and retries of a small one; the names get the size as a suffix")
    p.add_argument("--model", choices=["auto", "hf", "torch"], default="auto",
                   help="hf: transformers' BertForSequenceClassification(BertConfig()) (what the BERT-family study "
                        "fine-tuned, built from its config, no download); torch: the same shapes from "
                        "torch.nn.TransformerEncoder; auto: hf when transformers imports, else torch")
    p.add_argument("--python", default=sys.executable)
    # one trial (the subprocess)
    p.add_argument("--trial", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int)
    p.add_argument("--seq", type=int)
    p.add_argument("--dtype")
    return p.parse_args()


def trial_name(batch, seq, dtype, gpu_memory=None):
    name = f"bert-base_b{batch}_s{seq}_{dtype}"
    return name + "_" + gpu_memory if gpu_memory else name


def parse_size(s):
    """24GiB, 512MiB, 24GB or plain bytes."""
    for suffix, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("GB", 10**9), ("MB", 10**6), ("B", 1)):
        if s.endswith(suffix):
            return int(float(s[: -len(suffix)]) * mult)
    return int(s)


def run_trial(args):
    import torch
    import torch.nn as nn

    cfg = BERT_BASE
    name = trial_name(args.batch, args.seq, args.dtype, args.gpu_memory)
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    limit = None
    if args.gpu_memory:
        # The allocator's limit, as a smaller GPU's memory would be (its
        # CUDA context aside): PyTorch raises the OOM at allowed_max.
        total = torch.cuda.get_device_properties(dev).total_memory
        limit = parse_size(args.gpu_memory)
        if not 0 < limit <= total:
            sys.exit(f"--gpu-memory {args.gpu_memory}: want at most the GPU's {total} bytes")
        torch.cuda.set_per_process_memory_fraction(limit / total, dev)
    # Record from the very start: the trace then holds every segment.
    torch.cuda.memory._record_memory_history(max_entries=args.max_entries, stacks="python")

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.word = nn.Embedding(cfg["vocab"], cfg["hidden"])
            self.pos = nn.Embedding(cfg["max_positions"], cfg["hidden"])
            self.type = nn.Embedding(cfg["type_vocab"], cfg["hidden"])
            self.ln = nn.LayerNorm(cfg["hidden"], eps=1e-12)
            self.drop = nn.Dropout(0.1)
            layer = nn.TransformerEncoderLayer(cfg["hidden"], cfg["heads"], cfg["intermediate"], dropout=0.1,
                                               activation="gelu", batch_first=True, layer_norm_eps=1e-12)
            self.encoder = nn.TransformerEncoder(layer, cfg["layers"], enable_nested_tensor=False)
            self.pool = nn.Linear(cfg["hidden"], cfg["hidden"])
            self.cls = nn.Linear(cfg["hidden"], 2)

        def forward(self, ids, types, pad_mask):
            pos = torch.arange(ids.shape[1], device=ids.device)
            h = self.drop(self.ln(self.word(ids) + self.pos(pos) + self.type(types)))
            h = self.encoder(h, src_key_padding_mask=pad_mask)
            return self.cls(self.drop(torch.tanh(self.pool(h[:, 0]))))

    model_kind = args.model
    if model_kind == "auto":
        try:
            import transformers  # noqa: F401

            model_kind = "hf"
        except ImportError:
            model_kind = "torch"

    def build_model():
        if model_kind == "hf":
            from transformers import BertConfig, BertForSequenceClassification

            hf_cfg = BertConfig(vocab_size=cfg["vocab"], hidden_size=cfg["hidden"], num_hidden_layers=cfg["layers"],
                                num_attention_heads=cfg["heads"], intermediate_size=cfg["intermediate"],
                                max_position_embeddings=cfg["max_positions"], type_vocab_size=cfg["type_vocab"],
                                num_labels=2)
            hf = BertForSequenceClassification(hf_cfg)

            class HF(nn.Module):  # called as Bert above
                def __init__(self):
                    super().__init__()
                    self.m = hf

                def forward(self, ids, types, pad_mask):
                    return self.m(input_ids=ids, token_type_ids=types, attention_mask=(~pad_mask).long()).logits

            return HF()
        return Bert()

    meta = {"name": name, "model": {"hf": "bert-base (transformers BertForSequenceClassification, from config)",
                                    "torch": "bert-base (torch.nn.TransformerEncoder, from config)"}[model_kind],
            "config": cfg,
            "batch": args.batch, "seq": args.seq, "dtype": args.dtype, "steps": args.steps,
            "max_entries": args.max_entries, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
            "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "gpu": torch.cuda.get_device_name(dev), "gpu_total_bytes": torch.cuda.get_device_properties(dev).total_memory,
            "command": " ".join([os.path.basename(sys.argv[0]), "--trial", "--batch", str(args.batch), "--seq",
                                 str(args.seq), "--dtype", args.dtype, "--model", model_kind, "--steps", str(args.steps),
                                 "--max-entries", str(args.max_entries)]
                                + (["--gpu-memory", args.gpu_memory] if args.gpu_memory else []) + ["--out-dir", "DIR"]),
            "gpu_memory_limit_bytes": limit,
            "status": "ok"}
    if model_kind == "hf":
        import transformers

        meta["transformers"] = transformers.__version__
    amp = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    step_times = []
    try:
        model = build_model().to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)
        scaler = torch.amp.GradScaler("cuda", enabled=args.dtype == "fp16")
        gen = torch.Generator(device="cpu").manual_seed(1)
        for step in range(args.steps):
            torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            ids = torch.randint(0, cfg["vocab"], (args.batch, args.seq), generator=gen).to(dev)
            types = torch.zeros_like(ids)
            # Variable-length examples, as padded batches are.
            lengths = torch.randint(args.seq // 2, args.seq + 1, (args.batch,), generator=gen)
            pad = (torch.arange(args.seq)[None, :] >= lengths[:, None]).to(dev)
            labels = torch.randint(0, 2, (args.batch,), generator=gen).to(dev)
            with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
                loss = nn.functional.cross_entropy(model(ids, types, pad), labels)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            loss.item()
            step_times.append(time.perf_counter() - t0)
        model.eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=amp, enabled=amp is not None):
            model(ids, types, pad).argmax(-1).cpu()
    except torch.OutOfMemoryError as e:  # the trial dies as an HPO trial would; keep its trace
        meta["status"] = "oom"
        meta["error"] = str(e)[:1000]
    torch.cuda.synchronize(dev)
    stats = torch.cuda.memory_stats(dev)
    meta["peak_reserved_bytes"] = stats.get("reserved_bytes.all.peak")
    meta["peak_allocated_bytes"] = stats.get("allocated_bytes.all.peak")
    meta["num_alloc_retries"] = stats.get("num_alloc_retries")
    meta["num_ooms"] = stats.get("num_ooms")
    meta["step_times_s"] = step_times
    base = os.path.join(args.out_dir, name)
    torch.cuda.memory._dump_snapshot(base + ".pickle")
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(base + ".stats.json", "w") as f:
        json.dump(dict(stats), f, indent=1, sort_keys=True)
    meta["snapshot_bytes"] = os.path.getsize(base + ".pickle")
    with open(base + ".meta.json", "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps({k: meta[k] for k in ("name", "status", "peak_reserved_bytes", "num_alloc_retries", "snapshot_bytes")}))


def main():
    args = parse_args()
    if args.gpu_memory:
        try:
            parse_size(args.gpu_memory)
        except ValueError:
            print(f"gpu_record_trials.py: --gpu-memory {args.gpu_memory!r}: want a size like 24GiB", file=sys.stderr)
            sys.exit(2)
    os.makedirs(args.out_dir, exist_ok=True)
    if args.trial:
        run_trial(args)
        return
    env = dict(os.environ)
    if args.alloc_conf is not None:
        env["PYTORCH_CUDA_ALLOC_CONF"] = args.alloc_conf
    index, failed = [], 0
    for dtype in args.dtypes.split(","):
        for batch in map(int, args.batches.split(",")):
            for seq in map(int, args.seqs.split(",")):
                cmd = [args.python, os.path.abspath(__file__), "--trial", "--out-dir", args.out_dir,
                       "--batch", str(batch), "--seq", str(seq), "--dtype", dtype, "--model", args.model,
                       "--steps", str(args.steps),
                       "--max-entries", str(args.max_entries)]
                if args.gpu_memory:
                    cmd += ["--gpu-memory", args.gpu_memory]
                print("==", " ".join(cmd[1:]), flush=True)
                rc = subprocess.call(cmd, env=env)
                name = trial_name(batch, seq, dtype, args.gpu_memory)
                entry = {"name": name, "exit_status": rc}
                meta = os.path.join(args.out_dir, name + ".meta.json")
                if rc == 0 and os.path.exists(meta):
                    with open(meta) as f:
                        m = json.load(f)
                    entry.update({k: m.get(k) for k in ("status", "peak_reserved_bytes", "num_alloc_retries",
                                                        "num_ooms", "snapshot_bytes")})
                else:
                    failed += 1
                index.append(entry)
    with open(os.path.join(args.out_dir, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    print(f"{len(index)} trials, {failed} failed; index: {os.path.join(args.out_dir, 'index.json')}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
