"""The framework table: each name a framework is published under, and the shipped stack that
costs it (:mod:`planner.validate.frameworks` reads a schema 1 case's ``framework`` through it).
Each entry says where what that framework runs was read: its source at a named commit, its
paper or its published configs.
"""

from __future__ import annotations

# JAX on GPUs (below): XLA compiles the whole step, its loss included, in every version (so
# torchtitan's uncompiled-loss versions, frameworks.V1_LOSS, are not theirs)
JAX_NAMES = (
    "maxtext",
    "levanter",
    "paxml",
    "pax",
    "praxis",
    "jax",
    "jax-toolbox",
    "t5x",
    "easylm",
    "alpa",
)
# framework as published (lower case, spaces and underscores as "-") -> shipped stack id
FRAMEWORK_STACKS: dict[str, str] = {
    "megatron-lm": "megatron-lm-2021",  # or -2022, on Hopper and later megatron-core (module doc)
    "megatron": "megatron-lm-2021",
    "megatron-core": "megatron-core",
    "mcore": "megatron-core",
    "nemo": "nemo",
    "nvidia-nemo": "nemo",
    "nemo-megatron": "nemo",  # NeMo's LLM collection was published as "NeMo Megatron" (2022-23)
    "megatron-bridge": "megatron-bridge",
    "megatron-deepspeed": "megatron-deepspeed-2022",  # on Hopper and later: megatron-deepspeed
    # GPT-NeoX (EleutherAI): Megatron-LM's model and parallelism on DeepSpeed (Black et al. 2022,
    # arXiv 2204.06745 section 3: "built on Megatron and DeepSpeed", ZeRO-1 with TP and PP)
    "gpt-neox": "megatron-deepspeed-2022",  # on Hopper and later: megatron-deepspeed
    # DeepSpeed-MoE (Rajbhandari et al. 2022, arXiv 2201.05596) trains in Megatron-DeepSpeed,
    # "a fork of NVIDIA's Megatron-LM that adds ... MoE model training" (DeepSpeedExamples
    # training/megatron/README.md; examples_deepspeed/MoE in microsoft/Megatron-DeepSpeed)
    "deepspeed-moe": "megatron-deepspeed-2022",  # on Hopper and later: megatron-deepspeed
    "deepspeed": "deepspeed-zero",
    "deepspeed-zero": "deepspeed-zero",
    "torchtitan": "torchtitan-eager",  # precision fp8: torchtitan-compiled-float8
    "torchtitan-eager": "torchtitan-eager",
    "torchtitan-compiled": "torchtitan-compiled",
    "torchtitan-async-tp": "torchtitan-async-tp",
    # llm-foundry as its published MPT benchmark tables ran it (Triton FlashAttention); today's
    # attn_impl: flash is the llm-foundry stack (--stack, or a schema 2 case)
    "llm-foundry": "llm-foundry-2023",
    "composer": "llm-foundry-2023",
    "mosaicml": "llm-foundry-2023",
    # other names the same software is published under
    "nemo-framework": "nemo",  # NVIDIA's product name for NeMo
    "nemo2": "nemo",
    "nemo-2": "nemo",
    "megatron-ds": "megatron-deepspeed-2022",  # on Hopper and later: megatron-deepspeed
    "deepspeed-megatron": "megatron-deepspeed-2022",
    "deepspeed-zero3": "deepspeed-zero",
    # PyTorch FSDP by itself: the shipped stack that runs the same data parallelism eagerly.
    # FSDP1 (FullyShardedDataParallel, Zhao et al. 2023, arXiv 2304.11277) is llm-foundry's;
    # FSDP2 (fully_shard) eager is torchtitan-eager's, and torchtune's full-finetune recipes
    # (fully_shard, eager unless compile is set, SDPA attention) run the same
    "pytorch-fsdp": "llm-foundry",
    "torch-fsdp": "llm-foundry",
    "fsdp": "llm-foundry",
    "fsdp1": "llm-foundry",
    "pytorch-fsdp2": "torchtitan-eager",
    "fsdp2": "torchtitan-eager",
    "torchtune": "torchtitan-eager",
    # DeepSeek-AI's in-house framework, named in its LLM, V2 and V3 reports (the software of
    # every DeepSeek run, hence the company's name too)
    "hai-llm": "hai-llm",
    "deepseek-hai-llm": "hai-llm",
    "deepseek": "hai-llm",
    "deepseek-ai": "hai-llm",
    # PyTorch by itself: its own distributed training (FSDP2, DTensor TP, context parallelism,
    # torch.distributed.pipelining), eager unless a compile is published
    "pytorch": "torchtitan-eager",
    "torch": "torchtitan-eager",
    "pytorch-native": "torchtitan-eager",
    # ---- session 31: frameworks read from their source (the commit read), docs/stacks.md
    # "Framework table". Hugging Face nanotron (2411b022): flash-attn 2, Triton fused RMSNorm
    # and RoPE, fused AdamW, eager, Megatron-style TP with sequence parallelism and the
    # backward all-reduce under the weight-gradient GEMM, DDP / ZeRO-1 with the reduce
    # overlapped (src/nanotron/models/llama.py, optim/zero.py,
    # parallel/tensor_parallel/functional.py); picotron (59714b1b), its teaching version, runs
    # the same kernels
    "nanotron": "megatron-core",
    "picotron": "megatron-core",
    # Colossal-AI (4f9953be): its LLaMA benchmark's Gemini and LowLevelZero plugins run the
    # plain Hugging Face model (ShardFormer's kernels apply only with TP:
    # colossalai/booster/plugin/gemini_plugin.py) under chunked ZeRO with the gradient reduce
    # overlapped: DeepSpeed ZeRO's costs; with TP or PP, its HybridParallelPlugin is Megatron
    # TP, 1F1B and ZeRO-1 (WITH_MODEL_PARALLEL)
    "colossal-ai": "deepspeed-zero",
    "colossalai": "deepspeed-zero",
    # its HybridParallelPlugin (TP / PP; the name a case with TP or PP reads as): ShardFormer's
    # flash-attn 2 and fused norms, Megatron TP, 1F1B, ZeRO 0-1: the 2023 Megatron-DeepSpeed
    # code's costs, not the 2022 kernels'
    "colossal-ai-hybrid": "megatron-deepspeed",
    # AllenAI's OLMo trainer (59a53e3f): PyTorch FSDP1 (olmo/train.py FullyShardedDataParallel),
    # flash-attn 2 and fp32 gradient reduce in its official configs, no compile since
    # OLMo-7B-0424: llm-foundry's data parallelism and attention. OLMo-core (fa6c5014): FSDP2
    # or HSDP, each block and the LM head with its loss under torch.compile
    # (src/olmo_core/nn/transformer/model.py apply_compile): torchtitan-compiled
    "olmo": "llm-foundry",
    "olmo-core": "torchtitan-compiled",
    # IBM fms-fsdp (5a296afe): SDPA, eager RMSNorm / SwiGLU / RoPE, foreach AdamW, FSDP1, compile
    # off in its launch script (scripts/train.sh --use_torch_compile=False): torchtitan-eager's
    # kernels
    "fms-fsdp": "torchtitan-eager",
    "fms": "torchtitan-eager",
    "foundation-model-stack": "torchtitan-eager",
    # Hugging Face's own trainers: the transformers model (SDPA attention, eager RMSNorm, SwiGLU
    # and RoPE) under Trainer / Accelerate with DeepSpeed ZeRO or PyTorch FSDP (transformers
    # src/transformers/trainer.py, accelerate src/accelerate/accelerator.py); axolotl and
    # LLaMA-Factory launch the same: the deepspeed-zero stack's kernels
    "accelerate": "deepspeed-zero",
    "hf-accelerate": "deepspeed-zero",
    "huggingface-accelerate": "deepspeed-zero",
    "hf-trainer": "deepspeed-zero",
    "axolotl": "deepspeed-zero",
    "llama-factory": "deepspeed-zero",
    "llamafactory": "deepspeed-zero",
    # Meta lingua (437d680e): FSDP2, the whole model (its loss inside) under torch.compile in
    # the shipped configs (apps/main/configs/llama_7B.yaml compile: true), SDPA
    "lingua": "torchtitan-compiled",
    # metaseq (OPT; f7ffa5fd): Megatron TP with materialised attention and Megatron's fused
    # softmax, apex fused LayerNorm and Adam, dropout, full activation checkpointing, fp16
    # (metaseq/model_parallel/modules/multihead_attention.py): the 2021-22 Megatron kernels
    "metaseq": "megatron-deepspeed-2022",
    # Megatron-LM derivatives that run Megatron-Core with Transformer Engine: Alibaba
    # Pai-Megatron-Patch (a098ca5a: backends/megatron pins NVIDIA Megatron-LM) and AMD Primus
    # (fd1eeabb: third_party/Megatron-LM); Megatron-LLaMA (25306de8: 2023 Megatron-LM with flash
    # attention and an overlapped distributed optimizer, megatron/optimizer/
    # overlapped_dist_optimizer.py: Megatron-Core's costs more than the 2022 code's); ByteDance
    # MegaScale (Jiang et al. 2024, arXiv 2402.15627 section 3: Megatron-LM with
    # FlashAttention-2, fused kernels and overlapped data-parallel communication)
    "pai-megatron-patch": "megatron-core",
    "pai-megatron": "megatron-core",
    "megatron-patch": "megatron-core",
    "primus": "megatron-core",
    "primus-lm": "megatron-core",
    "megatron-llama": "megatron-core",
    "megascale": "megatron-core",
    # BAAI FlagScale (github.com/FlagOpen/FlagScale README: "builds upon open-source projects
    # such as Megatron-LM", kept in step with upstream; Aquila2 training, 2023-24)
    "flagscale": "megatron-core",
    # InternEvo, InternLM's trainer (c628a8c8): flash-attn 2, fused RMSNorm, in-place cross
    # entropy, ZeRO-1 with the reduce-scatter overlapped
    # (internlm/solver/optimizer/hybrid_zero_optim.py): HAI-LLM's costs
    "internevo": "hai-llm",
    "internlm": "hai-llm",
    "internlm-train": "hai-llm",
    # JAX on GPUs: MaxText (e591f30c), Levanter (9263f81e), Paxml (NVIDIA JAX-Toolbox
    # rosetta/projects/pax at 8b3ce014), and T5X (google-research/t5x; on GPUs through
    # JAX-Toolbox rosetta/projects/t5x), EasyLM (young-geng/EasyLM) and Alpa
    # (alpa-projects/alpa), each a JAX step partitioned by XLA: one XLA-compiled step, FSDP
    # sharding, fp32 gradients, collectives overlapped by XLA's latency-hiding scheduler,
    # attention cuDNN fused through Transformer Engine. No shipped stack is all of these;
    # torchtitan-compiled is all but the attention (SDPA flash); fp8:
    # torchtitan-compiled-float8 (JAX_FP8)
    **dict.fromkeys(JAX_NAMES, "torchtitan-compiled"),
}

# the frameworks above that run compiled, whose FP8 runs are torchao Float8 under torch.compile
# (torchtitan-compiled-float8; MaxText's and Pax's through Transformer Engine or XLA)
JAX_FP8 = "torchtitan-compiled-float8"
COMPILED_FP8: dict[str, str] = {
    key: JAX_FP8 for key, stack in FRAMEWORK_STACKS.items() if stack == "torchtitan-compiled"
}

__all__ = ["COMPILED_FP8", "FRAMEWORK_STACKS", "JAX_FP8", "JAX_NAMES"]
