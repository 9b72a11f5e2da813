/* Prints the constants, struct sizes and field offsets of distkit.h as
 * "NAME VALUE" lines; tests/layout.rs compares them with the Rust
 * declarations in src/lib.rs. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "distkit/distkit.h"

#define VALUE(x) printf("%s %lld\n", #x, (long long)(x))
#define SIZE(t) printf("sizeof(%s) %zu\n", #t, sizeof(t))
#define OFFSET(t, f) printf("offsetof(%s.%s) %zu\n", #t, #f, offsetof(t, f))

int main(void) {
  VALUE(DK_ABI_MAJOR);
  VALUE(DK_ABI_MINOR);
  VALUE(DK_OK);
  VALUE(DK_CANCELLED);
  VALUE(DK_UNKNOWN);
  VALUE(DK_INVALID_ARGUMENT);
  VALUE(DK_DEADLINE_EXCEEDED);
  VALUE(DK_NOT_FOUND);
  VALUE(DK_ALREADY_EXISTS);
  VALUE(DK_PERMISSION_DENIED);
  VALUE(DK_RESOURCE_EXHAUSTED);
  VALUE(DK_FAILED_PRECONDITION);
  VALUE(DK_ABORTED);
  VALUE(DK_OUT_OF_RANGE);
  VALUE(DK_UNIMPLEMENTED);
  VALUE(DK_INTERNAL);
  VALUE(DK_UNAVAILABLE);
  VALUE(DK_DATA_LOSS);
  VALUE(DK_UNAUTHENTICATED);
  VALUE(DK_FLOAT16);
  VALUE(DK_BFLOAT16);
  VALUE(DK_FLOAT32);
  VALUE(DK_FLOAT64);
  VALUE(DK_INT8);
  VALUE(DK_UINT8);
  VALUE(DK_INT32);
  VALUE(DK_INT64);
  VALUE(DK_BOOL);
  VALUE(DK_OP_SUM);
  VALUE(DK_OP_PRODUCT);
  VALUE(DK_OP_MIN);
  VALUE(DK_OP_MAX);
  VALUE(DK_OP_BAND);
  VALUE(DK_OP_BOR);
  VALUE(DK_OP_BXOR);
  VALUE(DK_OP_MEAN);
  VALUE(DK_WORK_PENDING);
  VALUE(DK_WORK_SUCCEEDED);
  VALUE(DK_WORK_FAILED);
  VALUE((intptr_t)DK_GROUP_UNUSED);
  VALUE(DK_PARALLEL_DATA);
  VALUE(DK_PARALLEL_TENSOR);
  VALUE(DK_PARALLEL_EXPERT);
  VALUE(kDLCPU);
  VALUE(kDLCUDA);
  VALUE(kDLInt);
  VALUE(kDLUInt);
  VALUE(kDLFloat);
  VALUE(kDLBfloat);
  VALUE(DK_COMM_HOOK_NONE);
  VALUE(DK_COMM_HOOK_FP16);
  VALUE(DK_COMM_HOOK_BF16);
  VALUE(DK_SHARD_FULL_SHARD);
  VALUE(DK_SHARD_SHARD_GRAD_OP);
  VALUE(DK_SHARD_NO_SHARD);
  VALUE(DK_SHARD_HYBRID_SHARD);
  VALUE(DK_SHARD_HYBRID_SHARD_ZERO2);
  VALUE(DK_SHARD_EVENT_UNSHARD_START);
  VALUE(DK_SHARD_EVENT_UNSHARD_DONE);
  VALUE(DK_SHARD_EVENT_RESHARD);
  VALUE(DK_SHARD_EVENT_REDUCE_START);
  VALUE(DK_SHARD_EVENT_REDUCE_DONE);
  VALUE(DK_DTYPE_UNSET);
  VALUE(sizeof(dk_status_t));
  VALUE(sizeof(dk_dtype_t));
  VALUE(sizeof(dk_reduce_op_t));
  VALUE(sizeof(dk_work_state_t));
  SIZE(DLDevice);
  OFFSET(DLDevice, device_type);
  OFFSET(DLDevice, device_id);
  SIZE(DLDataType);
  OFFSET(DLDataType, code);
  OFFSET(DLDataType, bits);
  OFFSET(DLDataType, lanes);
  SIZE(DLTensor);
  OFFSET(DLTensor, data);
  OFFSET(DLTensor, device);
  OFFSET(DLTensor, ndim);
  OFFSET(DLTensor, dtype);
  OFFSET(DLTensor, shape);
  OFFSET(DLTensor, strides);
  OFFSET(DLTensor, byte_offset);
  SIZE(dk_bytes_t);
  OFFSET(dk_bytes_t, data);
  OFFSET(dk_bytes_t, size);
  SIZE(dk_store_config_t);
  OFFSET(dk_store_config_t, struct_size);
  OFFSET(dk_store_config_t, address);
  OFFSET(dk_store_config_t, token);
  OFFSET(dk_store_config_t, timeout_ms);
  OFFSET(dk_store_config_t, connect_timeout_ms);
  SIZE(dk_init_config_t);
  OFFSET(dk_init_config_t, struct_size);
  OFFSET(dk_init_config_t, backend);
  OFFSET(dk_init_config_t, timeout_ms);
  OFFSET(dk_init_config_t, connect_timeout_ms);
  SIZE(dk_group_options_t);
  OFFSET(dk_group_options_t, struct_size);
  OFFSET(dk_group_options_t, name);
  OFFSET(dk_group_options_t, timeout_ms);
  OFFSET(dk_group_options_t, connect_timeout_ms);
  SIZE(dk_reducer_config_t);
  OFFSET(dk_reducer_config_t, struct_size);
  OFFSET(dk_reducer_config_t, bucket_cap_mb);
  OFFSET(dk_reducer_config_t, first_bucket_cap_mb);
  OFFSET(dk_reducer_config_t, find_unused_parameters);
  OFFSET(dk_reducer_config_t, gradient_as_bucket_view);
  OFFSET(dk_reducer_config_t, broadcast_buffers);
  OFFSET(dk_reducer_config_t, comm_hook);
  SIZE(dk_shard_config_t);
  OFFSET(dk_shard_config_t, struct_size);
  OFFSET(dk_shard_config_t, strategy);
  OFFSET(dk_shard_config_t, param_dtype);
  OFFSET(dk_shard_config_t, reduce_dtype);
  OFFSET(dk_shard_config_t, offload_params);
  OFFSET(dk_shard_config_t, sync_module_states);
  OFFSET(dk_shard_config_t, reserved);
  OFFSET(dk_shard_config_t, replicate_group);
  OFFSET(dk_shard_config_t, frozen);
  SIZE(dk_shard_event_t);
  OFFSET(dk_shard_event_t, unix_ns);
  OFFSET(dk_shard_event_t, kind);
  OFFSET(dk_shard_event_t, reserved);
  SIZE(dk_launcher_info_t);
  OFFSET(dk_launcher_info_t, struct_size);
  OFFSET(dk_launcher_info_t, launcher);
  OFFSET(dk_launcher_info_t, rank);
  OFFSET(dk_launcher_info_t, world_size);
  OFFSET(dk_launcher_info_t, local_rank);
  OFFSET(dk_launcher_info_t, local_world_size);
  OFFSET(dk_launcher_info_t, node_rank);
  OFFSET(dk_launcher_info_t, master_port);
  OFFSET(dk_launcher_info_t, master_addr);
  OFFSET(dk_launcher_info_t, store_address);
  OFFSET(dk_launcher_info_t, hosts_store);
  OFFSET(dk_launcher_info_t, reserved);
  return 0;
}
