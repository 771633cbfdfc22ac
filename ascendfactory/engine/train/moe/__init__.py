"""The embedded trainer's mixture-of-experts layer (Megatron-core's MoELayer with MindSpeed-LLM's router).

- `spec`: the MoE settings of a run (HF config.json + Megatron/MindSpeed-LLM flags), read once; no torch.
- `routing`: top-k routing, capacity and token dropping, the load-balancing (aux / seq-aux) and z losses.
- `dispatch`: token permutation and the all-to-all over the expert-parallel group.
- `layer`: the module that replaces an HF MoE block (router, local experts, shared experts), the
  auxiliary-loss gradient scaler and the per-layer loss tracker the log line reads.
- `state`: the layer's 3-D expert tensors <-> the HF per-expert names the checkpoint bridge maps.
"""
