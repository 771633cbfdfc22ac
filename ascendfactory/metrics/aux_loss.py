"""The names of a mixture-of-experts run's auxiliary losses in its log (a light module: the planners read it
to ask for their plot panels and summary lines)."""

# A mixture-of-experts run's auxiliary losses, which Megatron prints beside the LM loss: core_r0.8.0
# megatron/core/transformer/moe/moe_utils.py `track_moe_metrics` adds every loss the routers track
# (router.py: load_balancing_loss, z_loss) to the iteration line's losses; MindSpeed-LLM 2.1.0's routers
# track the expert, device and communication levels too (mindspeed_llm/core/transformer/moe/router.py).
AUX_LOSS_KEYS = (
    "load_balancing_loss",
    "load_balancing_expert_level_loss",
    "load_balancing_device_level_loss",
    "load_balancing_comm_level_loss",
    "z_loss",
)
