"""The one validator of "is this layout legal for this model, cluster and batch"."""

from __future__ import annotations

from planner.divisors import divisors_text
from planner.errors import PlannerError
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec


def _divisors(n: int) -> str:
    return divisors_text(n)


def check_layout(
    model: ModelSpec, cluster: Cluster, layout: Layout, training: Training, gpus: int | None = None
) -> None:
    """Raise PlannerError naming the first illegal field and the values that would be valid."""
    if gpus is not None and layout.world_size != gpus:
        raise PlannerError(
            "layout",
            f"tp*cp*dp*pp = {layout.tp}*{layout.cp}*{layout.dp}*{layout.pp} = "
            f"{layout.world_size} but gpus = {gpus}",
            "factors whose product equals gpus",
        )
    if model.heads % layout.tp:
        raise PlannerError(
            "layout.tp",
            f"tp={layout.tp} does not divide heads={model.heads}",
            _divisors(model.heads),
        )
    # Megatron-Core splits the KV heads (query groups) over TP: kv_heads % tp == 0
    if model.mla is None and model.n_kv_heads % layout.tp:
        raise PlannerError(
            "layout.tp",
            f"tp={layout.tp} does not divide kv_heads={model.n_kv_heads}",
            _divisors(model.n_kv_heads),
        )
    # Megatron may count the embedding and the loss as pipeline layers (account-for-* splits)
    if layout.pp * layout.virtual_stages > model.layers + 2:
        raise PlannerError(
            "layout.pp",
            f"pp*vpp = {layout.pp * layout.virtual_stages} exceeds layers + 2 = {model.layers + 2}",
            f"pp*vpp <= {model.layers + 2} (embedding and loss may count as stages)",
        )
    if layout.vpp and layout.vpp > 1 and layout.pp == 1:
        raise PlannerError("layout.vpp", "virtual pipeline stages need pp > 1", "vpp=1 or pp>1")
    if layout.cp > 1 and training.seq_len % (2 * layout.cp):
        raise PlannerError(
            "layout.cp",
            f"seq_len={training.seq_len} is not divisible by 2*cp",
            "cp with seq_len % (2*cp) == 0",
        )
    if layout.cp > 1 and any(layer.mixer.kind != "attention" for layer, _ in model.layer_kinds()):
        raise PlannerError(
            "layout.cp",
            "context parallelism of state-space / linear-attention layers is not modelled",
            "cp=1 for models with such layers",
        )
    if model.moe is None and layout.ep > 1:
        raise PlannerError("layout.ep", f"ep={layout.ep} but {model.name} has no experts", "1")
    if model.moe is not None:
        if model.moe.experts % layout.ep:
            raise PlannerError(
                "layout.ep",
                f"ep={layout.ep} does not divide experts={model.moe.experts}",
                _divisors(model.moe.experts),
            )
        grid = layout.tp * layout.dp * layout.cp
        if grid % layout.ep:
            raise PlannerError(
                "layout.ep",
                f"ep={layout.ep} must divide tp*dp*cp={grid} "
                "(expert parallelism is carved out of TP x DP x CP)",
                _divisors(grid),
            )
    if layout.overlap_ep_comm and layout.pp > 1 and layout.virtual_stages < 2:
        raise PlannerError(
            "layout.overlap_ep_comm",
            "all-to-all overlap pairs the forward of one micro-batch with the backward of "
            "another, which with pp > 1 needs the interleaved schedule",
            "vpp >= 2, pp = 1, or overlap_ep_comm false",
        )
    per_step = training.micro_batch * layout.dp
    if training.global_batch % per_step:
        raise PlannerError(
            "training.global_batch",
            f"global_batch={training.global_batch} is not divisible by "
            f"micro_batch*dp = {training.micro_batch}*{layout.dp} = {per_step}",
            f"a multiple of {per_step}",
        )
    cluster.accelerator.peak_flops_per_s(training.precision)  # raises if unsupported
    _check_offload(model, cluster, layout, training)


def _check_offload(model: ModelSpec, cluster: Cluster, layout: Layout, training: Training) -> None:
    """Activation offloading as Megatron-Core allows it (TransformerConfig): fewer layers than
    the model has, no pipeline parallelism, no activation recompute; and a known host link."""
    n = training.offload_layers
    if n == 0:
        return
    if n >= model.layers:
        raise PlannerError(
            "training.offload_layers",
            f"offload_layers={n} but the model has {model.layers} layers",
            f"0 to {model.layers - 1}",
        )
    if layout.pp > 1:
        raise PlannerError(
            "training.offload_layers",
            f"activation offloading with pp={layout.pp}: Megatron-Core supports it only "
            "without pipeline parallelism",
            "pp 1, or offload_layers 0",
        )
    if training.recompute != "none":
        raise PlannerError(
            "training.offload_layers",
            f"activation offloading with recompute {training.recompute}: Megatron-Core does "
            "not combine them",
            "recompute none, or offload_layers 0",
        )
    if cluster.accelerator.host_link_gb_per_s is None:
        raise PlannerError(
            "training.offload_layers",
            f"{cluster.accelerator.name} has no host link bandwidth in its spec "
            "(host_link_gb_per_s)",
            "offload_layers 0, or a spec with host_link_gb_per_s",
        )
