"""The pre-launch memory estimate: per-device peak bytes by pipeline stage, before anything queues.

job.py       the open `Job` protocol every memory model implements (a backend may bring its own job)
shape.py     a model's dimensions and parameter counts
megatron.py  Megatron layouts (torch, mindspeed-llm, mindspeed-mm, mindspeed-rl's actor)
hf.py        HF models data-parallel: DDP / DeepSpeed ZeRO 0-3 (llamafactory), FSDP (verl)
rl.py        actor, reference, critic and rollout sharing the devices
devices.py   how much memory a device offers (probe, key, table) and the reserve
target.py    what a backend hands over (`Backend.memory_target(run)`): the job and how its knobs are
             spelled as the experiment's keys
check.py     the verdict, the refusal of a real run that will not fit
fixes.py     the cheapest fixes, the layout advisor (`estimate --suggest`)
report.py    the estimate's records and their JSON / text form
"""
