"""Which backend ``F.scaled_dot_product_attention`` picks by itself on this GPU, for causal
bf16 training shapes (batch 4, seq 1024-8192, head_dim 64/96/128), read from torch's own
dispatcher (``torch._fused_sdp_choice``; a private function, so the script says when it is
missing). The planner's stacks name the kernel they run; this says what SDPA's default is.

    python benchmarks/device/sdpa_choice.py
"""

from __future__ import annotations

import torch
from torch.nn.attention import SDPBackend


def main() -> None:
    print(torch.cuda.get_device_name(0), "torch", torch.__version__)
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        print("torch._fused_sdp_choice is not in this torch")
        return
    for head_dim in (64, 96, 128):
        for seq in (1024, 2048, 8192):
            heads = 4096 // head_dim
            q = torch.randn(4, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16)
            q.requires_grad_(True)
            picked = SDPBackend(choose(q, q, q, None, 0.0, True))
            print(f"head_dim {head_dim:3d} seq {seq:5d}: {picked.name}")


if __name__ == "__main__":
    main()
