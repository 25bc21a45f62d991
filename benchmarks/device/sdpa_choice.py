"""Which backend ``F.scaled_dot_product_attention`` picks by itself on this GPU, for causal
bf16 training shapes (batch 4, seq 1024-8192, head_dim 64/96/128), read from torch's own
dispatcher (``calibration.closed_loop.train.sdpa_choice``: "unknown" where torch has no
such function). The planner's stacks name the kernel they run; this says what SDPA's default is.

    python benchmarks/device/sdpa_choice.py
"""

from __future__ import annotations

import torch

from calibration.closed_loop.train import sdpa_choice


def main() -> None:
    print(torch.cuda.get_device_name(0), "torch", torch.__version__)
    for head_dim in (64, 96, 128):
        for seq in (1024, 2048, 8192):
            shape = (4, 4096 // head_dim, seq, head_dim)
            picked = sdpa_choice(shape, torch.device("cuda"), torch.bfloat16)
            print(f"head_dim {head_dim:3d} seq {seq:5d}: {picked}")


if __name__ == "__main__":
    main()
