"""Write a verl PPO-style actor checkpoint on CPU with verl's own FSDPCheckpointManager (run in verl's env).

    <verl env>/bin/python verl_fsdp_checkpoint.py MODEL_DIR ROOT STEP PORT

A single-process gloo group, FSDP2 (`fully_shard` per decoder layer, then the model) on a CPU device mesh
named `fsdp`, one real AdamW step, then `FSDPCheckpointManager.save_checkpoint` into
`ROOT/global_step_STEP/actor` (model/optim/extra shards, fsdp_config.json, huggingface/), the dataloader state
to `data.pt` and the tracker, as verl's trainer does (verl 0.9.1 `verl/trainer/ppo/ray_trainer.py`,
`_save_checkpoint`). The trained full-precision weights go to `ROOT/trained.pt` for the test to compare the
merged model with.
"""

import os
import sys

import torch
import torch.distributed as dist
from omegaconf import OmegaConf
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torchdata.stateful_dataloader import StatefulDataLoader
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager


def main(model_dir: str, root: str, step: int, port: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    dist.init_process_group("gloo", rank=0, world_size=1)
    mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    ids = torch.randint(0, model.config.vocab_size, (2, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    scheduler.step()
    contents = ["model", "optimizer", "extra"]
    manager = FSDPCheckpointManager(
        model=model,
        optimizer=optimizer,
        lr_scheduler=scheduler,
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        checkpoint_config=OmegaConf.create(
            {"save_contents": contents, "load_contents": contents, "async_save": False}
        ),
    )
    folder = os.path.join(root, f"global_step_{step}")
    manager.save_checkpoint(local_path=os.path.join(folder, "actor"), global_step=step)
    loader = StatefulDataLoader(list(range(8)), batch_size=2)
    next(iter(loader))
    torch.save(loader.state_dict(), os.path.join(folder, "data.pt"))
    with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(step))
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    torch.save({k: v.detach().clone() for k, v in full.items()}, os.path.join(root, "trained.pt"))
    dist.destroy_process_group()
    print(f"saved global_step_{step}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
