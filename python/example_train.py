"""A small training script with memreplay as its CUDA allocator.

The three lines marked "memreplay" are all a training script needs; the rest
is an ordinary PyTorch loop. Run from the checkout, after `make libmemreplay`:

    python python/example_train.py
    memreplay replay --check example.mrt    # every decision reproduced
"""

import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from memreplay_torch import stats, use_memreplay, write_trace  # memreplay (1)

use_memreplay(alloc_conf="expandable_segments:True", record=True)  # memreplay (2): before any CUDA tensor


def main():
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(20):
        x = torch.randn(64, 1024, device=dev)
        loss = (model(x) - x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 5 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    torch.cuda.synchronize()
    s = stats()  # memreplay (3): in place of torch.cuda.memory_stats()
    print(f"peak reserved {s['reserved_bytes.all.peak'] / 2**20:.1f} MiB, "
          f"peak allocated {s['allocated_bytes.all.peak'] / 2**20:.1f} MiB, "
          f"retries {s['num_alloc_retries']}")
    write_trace("example.mrt")


if __name__ == "__main__":
    main()
