"""Host-memory offload costs: copies over the GPU's host link and the CPU's optimizer update.

Three mechanisms move training state to host memory:

* activation offload (Megatron-Core --cpu-offloading-num-layers, Transformer Engine CPU
  offload): a layer's saved tensors go to the host in forward and come back in backward;
* checkpoint offload (DeepSpeed ``activation_checkpointing.cpu_checkpointing``,
  Megatron-DeepSpeed --checkpoint-in-cpu): under full recompute, the layer-input checkpoints;
* optimizer offload (ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840; DeepSpeed
  ``zero_optimization.offload_optimizer``): fp32 master weights and Adam moments live on the
  host, the gradient shard goes down, the CPU runs Adam, the updated 16-bit weights come back.

Each copy hides behind one layer's compute (:func:`layer_copy_exposed_s`). The CPU update is
bound by host DRAM bandwidth (:func:`cpu_adam_time_s`) and overlaps the copy back of the
weights chunk by chunk (Ren et al. 2021, section 5.1, Algorithm 1: the fp16 copy of one tile
while the next is updated), so the optimizer step shows the longer of the two.
"""

from __future__ import annotations

# Achieved over peak host-link bandwidth: nvbandwidth on 8 x H200 measures 55.4 GB/s
# host-to-device and 55.1 GB/s device-to-host on PCIe Gen5 x16 (63 GB/s; shared/reference
# hardware.md A3).
HOST_LINK_EFFICIENCY = 0.88

# DeepSpeed's CPU Adam (csrc/includes/cpu_adam.h Adam_Optimizer::Step_AVX at deepspeedai/DeepSpeed
# 38327e07f6) streams, per parameter, fp32 gradient, momentum, variance and weight in (16 B)
# and weight, momentum and variance out (12 B); the updated weight is then cast to the 16-bit
# copy sent to the GPU (4 B in, 2 B out; zero/stage3.py _reassign_or_swap_out_partitioned_
# parameters copies fp32 -> fp16): 34 B of host DRAM traffic per parameter.
CPU_ADAM_BYTES_PER_PARAM = 34.0
# Achieved over peak host DRAM bandwidth for a streaming SIMD kernel: an assumption borrowed from
# STREAM triad, which reaches 74-78 % of the DRAM wire rate (TI SPRAD45A, Table 3-3); no
# published measurement of DeepSpeed CPU Adam's bandwidth was found.
HOST_DRAM_EFFICIENCY = 0.75
# Bytes per parameter over the host link: the gradient shard goes down in fp32 (zero/stage3.py
# casts grad_buffer.float() before the copy to the CPU buffer), the weights come back in the
# 16-bit training dtype.
GRAD_TO_HOST_BYTES = 4.0
WEIGHT_TO_GPU_BYTES = 2.0


def link_copy_s(nbytes: float, host_link_gb_per_s: float) -> float:
    """Seconds to copy ``nbytes`` one way over a host link of ``host_link_gb_per_s`` (peak)."""
    return nbytes / (host_link_gb_per_s * 1e9 * HOST_LINK_EFFICIENCY)


def layer_copy_exposed_s(
    layer_bytes: float, fwd_s: float, bwd_s: float, host_link_gb_per_s: float
) -> float:
    """Exposed seconds, per micro-batch, of sending one layer's ``layer_bytes`` to the host in
    forward and back in backward: each copy runs while the next layer computes its forward
    (``fwd_s``) or the previous one its backward with any recompute (``bwd_s``), so only the
    excess over that layer's seconds shows."""
    copy = link_copy_s(layer_bytes, host_link_gb_per_s)
    return max(0.0, copy - fwd_s) + max(0.0, copy - bwd_s)


def cpu_adam_time_s(
    params_per_gpu: float, gpus_per_node: int, host_memory_bandwidth_gb_per_s: float
) -> float:
    """Seconds of the CPU's Adam update when each of a node's ``gpus_per_node`` GPUs owns
    ``params_per_gpu`` parameters: they share the node's host DRAM bandwidth (peak GB/s)."""
    traffic = params_per_gpu * gpus_per_node * CPU_ADAM_BYTES_PER_PARAM
    return traffic / (host_memory_bandwidth_gb_per_s * 1e9 * HOST_DRAM_EFFICIENCY)


def offloaded_optimizer_s(
    params_per_gpu: float,
    gpus_per_node: int,
    host_memory_bandwidth_gb_per_s: float,
    host_link_gb_per_s: float,
) -> float:
    """Seconds of the optimizer step under optimizer offload, on the step's critical path: the
    CPU update and the copy of the updated weights to the GPU, which overlap (the longer shows).
    The gradient copy to the host runs during backward and is not counted here."""
    update = cpu_adam_time_s(params_per_gpu, gpus_per_node, host_memory_bandwidth_gb_per_s)
    back = link_copy_s(params_per_gpu * WEIGHT_TO_GPU_BYTES, host_link_gb_per_s)
    return max(update, back)


__all__ = [
    "CPU_ADAM_BYTES_PER_PARAM",
    "GRAD_TO_HOST_BYTES",
    "HOST_DRAM_EFFICIENCY",
    "HOST_LINK_EFFICIENCY",
    "WEIGHT_TO_GPU_BYTES",
    "cpu_adam_time_s",
    "layer_copy_exposed_s",
    "link_copy_s",
    "offloaded_optimizer_s",
]
