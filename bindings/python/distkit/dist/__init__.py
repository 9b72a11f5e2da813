"""mmengine.dist, on distkit: the same names, signatures, return conventions,
exception types and messages (see docs/semantics.md), so code
written against mmengine runs after ``from distkit import dist``.

Tensors are torch tensors or numpy arrays; they travel to the C ABI through
DLPack and are updated in place, never copied through Python lists. Objects
travel pickled. Collectives release the GIL while they wait.

The modules mirror the library's concepts:
  launch       joining and leaving the job (init_dist, destroy) and the
               launcher's view of it (launcher_info, read by the library)
  groups       process groups and topology (rank, size, local group)
  devices      which device data is on and casting it to the comm device
  collectives  tensor collectives (all_reduce, broadcast, ..., all_reduce_params)
  objects      object collectives (pickled Python objects, raw bytes)
  results      collect_results (a sharded evaluation's results, in order)
  work         Work, what async_op=True returns
  call_forms   how a function tells the seeds' call form from mmengine's

Ranks given as ``src`` / ``dst`` are global ranks, as in torch.distributed.
"""
from ..errors import DistkitError
from .collectives import (_get_reduce_op, all_gather, all_reduce, all_reduce_dict,
                          all_reduce_params, broadcast, gather, reduce, sync_random_seed)
from .devices import cast_data_device, get_comm_device, get_data_device
from .groups import (ProcessGroup, barrier, get_backend, get_default_group, get_dist_info,
                     get_global_rank, get_group_rank, get_local_group, get_local_rank,
                     get_local_size, get_rank, get_world_size, grow_group, grow_pending,
                     init_local_group,
                     is_distributed, is_main_process, master_only, new_group, shrink_group,
                     transport)
from .launch import LauncherInfo, destroy, infer_launcher, init_dist, launcher_info
from .objects import all_gather_bytes, all_gather_object, broadcast_object_list, gather_object
from .results import collect_results, collect_results_cpu, collect_results_gpu
from .work import Work

__all__ = [
    "DistkitError", "LauncherInfo", "ProcessGroup", "Work", "all_gather", "all_gather_bytes",
    "all_gather_object", "all_reduce", "all_reduce_dict", "all_reduce_params", "barrier",
    "broadcast", "broadcast_object_list", "cast_data_device", "collect_results",
    "collect_results_cpu", "collect_results_gpu", "destroy", "gather", "gather_object", "get_backend",
    "get_comm_device", "get_data_device", "get_default_group", "get_dist_info",
    "get_global_rank", "get_group_rank",
    "get_local_group", "get_local_rank", "get_local_size", "get_rank", "get_world_size",
    "grow_group", "grow_pending", "infer_launcher", "init_dist", "init_local_group", "is_distributed", "is_main_process",
    "launcher_info",
    "master_only", "new_group", "reduce", "shrink_group", "sync_random_seed", "transport",
]
