/* distkit.h — the stable C ABI of distkit.
 *
 * Conventions (every function below follows them):
 *  1. Handles are opaque structs passed by pointer (dk_group_t*). Every
 *     dk_X_create / dk_X_connect / dk_init has exactly one dk_X_destroy.
 *  2. Names are dk_<noun>_<verb>. Arguments go: subject handle, inputs,
 *     options, out-parameters, then the error out-parameter last.
 *  3. Every fallible call returns dk_status_t with the google.rpc numbering
 *     (DK_OK = 0 ... DK_UNAUTHENTICATED = 16). Treat unknown values as errors.
 *     "In progress" is never a status: it is a dk_work_state_t.
 *  4. Details come back through the last parameter, dk_error_t** err (NULL
 *     allowed; *err must be NULL on entry; untouched on success). There is no
 *     thread-local "last error".
 *  5. Tensors are DLPack DLTensor* (device, dtype, shape, strides, offset).
 *     A non-contiguous tensor is DK_INVALID_ARGUMENT, never a silent copy.
 *  6. Each function says: collective or local; blocking or not; who owns each
 *     pointer (owned: free it with dk_free or the handle's destroy; borrowed:
 *     valid until the named parent is destroyed; copied: the library copies
 *     the input before returning); which threads may call it.
 *  7. Memory the library returns is freed with dk_free (or a destroy).
 *  8. Config structs start with size_t struct_size; dk_X_init_sized(&c,
 *     sizeof c) (ABI 0.13) fills the defaults into the caller's struct as its
 *     header declares it, never a byte past it. Fields are only ever
 *     appended. The library reads the fields inside the caller's
 *     struct_size: an older, smaller struct gets the defaults for fields
 *     added since; a newer, larger one is accepted when the fields this
 *     library does not know are zero. A NULL config means all defaults
 *     (except where a field is required). dk_X_init(&c) without a size fills
 *     the struct as ABI 0.12 declared it (what binaries built before 0.13
 *     pass), so fields added since keep their defaults through it. (A binary
 *     built against a header older than a struct's last growth before 0.13,
 *     as dk_init_config_t's at 0.9, must not call its unsized dk_X_init:
 *     that writes the larger struct.)
 *  9. dk_init_version(DK_ABI_MAJOR, DK_ABI_MINOR, err) rejects a header the
 *     library is incompatible with. Only dk_* symbols are exported.
 * 10. Asynchronous calls return a dk_work_t* (dk_work_test, dk_work_wait with
 *     a timeout, dk_work_destroy). A NULL work out-parameter means "run
 *     synchronously". Buffers given to asynchronous calls are lent until the
 *     work completes.
 * 11. dk_group_destroy is local; dk_group_abort (local, any thread) cancels
 *     in-flight work and is the only legal follow-up after DK_UNAVAILABLE or
 *     DK_DEADLINE_EXCEEDED; dk_group_async_error reports that state.
 *     Destroy never waits on peers: a group still running work that no
 *     handle waits for is aborted, so destroy returns within milliseconds.
 *     Destroyed handles stay reserved: calls through them are -1, NULL or
 *     DK_FAILED_PRECONDITION, never another handle's values.
 * 12. No C++ exception crosses this boundary, also when memory runs out: a
 *     call with a status returns DK_RESOURCE_EXHAUSTED (or its own error,
 *     whose *err may then be a static error of that code with the message
 *     "out of memory"); a call without one answers as for a bad argument
 *     (-1, 0 or NULL), and dk_group_abort and dk_shutdown do what they can.
 * 13. Threads: every function may be called from any thread. A group's
 *     collectives form one sequence that every rank must issue in the same
 *     order, so they come from one thread at a time: a collective issued
 *     while another thread's collectives on the same group are in flight is
 *     DK_FAILED_PRECONDITION (it could otherwise be paired with a different
 *     call on another rank). Handing a group to another thread when it is
 *     idle is allowed if every rank does it in the same order. Use one group
 *     per thread for concurrent collectives. A caller whose one sequence of
 *     calls moves between OS threads while collectives are in flight (a
 *     goroutine, a fiber) names one issuer for them (dk_issuer_set, ABI
 *     0.14). Sends and receives are exempt (matched by peer and tag).
 * 14. Sizes: a tensor or byte count over 2^47 bytes, or whose byte size
 *     overflows, and a count larger than any array can be, are
 *     DK_INVALID_ARGUMENT before anything is read. Store values are limited
 *     to DISTKIT_STORE_MAX_REQUEST_BYTES (default 256 MiB); store keys are
 *     UTF-8.
 */
#ifndef DISTKIT_DISTKIT_H_
#define DISTKIT_DISTKIT_H_

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DK_EXPORT __attribute__((visibility("default")))
#else
#define DK_EXPORT
#endif

/* ---- Versions ------------------------------------------------------------ */

#define DK_ABI_MAJOR 0
#define DK_ABI_MINOR 14

/* Local. Checks that this header (major, minor) can use the loaded library:
 * same major, and a minor no newer than the library's. DK_FAILED_PRECONDITION
 * names both versions otherwise. Bindings call it once at load time. */
typedef int32_t dk_status_t;
typedef struct dk_error dk_error_t;
DK_EXPORT dk_status_t dk_init_version(int32_t major, int32_t minor,
                                      dk_error_t** err);

/* Local. The library's ABI version. Any thread. */
DK_EXPORT void dk_get_version(int32_t* major, int32_t* minor);

/* ---- Status codes and errors --------------------------------------------- */

/* Numerically equal to absl::StatusCode and grpc_status_code. */
#define DK_OK 0
#define DK_CANCELLED 1
#define DK_UNKNOWN 2
#define DK_INVALID_ARGUMENT 3
#define DK_DEADLINE_EXCEEDED 4 /* a timeout */
#define DK_NOT_FOUND 5
#define DK_ALREADY_EXISTS 6
#define DK_PERMISSION_DENIED 7
#define DK_RESOURCE_EXHAUSTED 8
#define DK_FAILED_PRECONDITION 9 /* misuse, e.g. a call on an aborted group */
#define DK_ABORTED 10
#define DK_OUT_OF_RANGE 11
#define DK_UNIMPLEMENTED 12
#define DK_INTERNAL 13
#define DK_UNAVAILABLE 14 /* a peer or link failed: the group is poisoned */
#define DK_DATA_LOSS 15
#define DK_UNAUTHENTICATED 16 /* wrong or missing job token */

/* Local, any thread. The error's code and its message (borrowed until
 * dk_error_free). The message is for humans: do not parse it. */
DK_EXPORT dk_status_t dk_error_code(const dk_error_t* err);
DK_EXPORT const char* dk_error_message(const dk_error_t* err);
/* Frees an error; NULL is allowed (so is a static one, convention 12). */
DK_EXPORT void dk_error_free(dk_error_t* err);

/* Frees memory the library returned (strings, byte buffers); NULL allowed. */
DK_EXPORT void dk_free(void* ptr);

/* ---- Data types and reductions ------------------------------------------- */

/* Element types; the values equal distkit::DataType. */
typedef int32_t dk_dtype_t;
#define DK_FLOAT16 0
#define DK_BFLOAT16 1
#define DK_FLOAT32 2
#define DK_FLOAT64 3
#define DK_INT8 4
#define DK_UINT8 5
#define DK_INT32 6
#define DK_INT64 7
/* One byte per element, any non-zero byte true. Every operation leaves each
   host (CPU) bool buffer it writes holding 0 or 1 only (a peer's 2 or 255
   arrives as 1), so a Rust, C++ or Go bool can hold it; CUDA tensors are
   passed as they are (not normalised). */
#define DK_BOOL 8

/* Reductions, mmengine's names; DK_OP_MEAN on integers truncates toward 0. */
typedef int32_t dk_reduce_op_t;
#define DK_OP_SUM 0
#define DK_OP_PRODUCT 1
#define DK_OP_MIN 2
#define DK_OP_MAX 3
#define DK_OP_BAND 4
#define DK_OP_BOR 5
#define DK_OP_BXOR 6
#define DK_OP_MEAN 7

/* ---- Store --------------------------------------------------------------- */

/* A byte string. Lists of them returned by the library are one allocation
 * (the array, then the bytes): free the array with one dk_free. */
typedef struct dk_bytes {
  const void* data;
  size_t size;
} dk_bytes_t;

typedef struct dk_store dk_store_t;

typedef struct dk_store_config {
  size_t struct_size;         /* sizeof(dk_store_config_t) */
  const char* address;        /* "host:port"; copied */
  const char* token;          /* the job token; copied; NULL = none */
  int64_t timeout_ms;         /* blocking calls; default (or <= 0) 300000 */
  int64_t connect_timeout_ms; /* waiting for the server; the same */
} dk_store_config_t;

/* Local. Fills the defaults (address NULL, token NULL, 300 s timeouts) into
 * `size` bytes (sizeof *config; convention 8). _init: the ABI 0.12 struct. */
DK_EXPORT void dk_store_config_init_sized(dk_store_config_t* config,
                                          size_t size);
DK_EXPORT void dk_store_config_init(dk_store_config_t* config);

/* Local, blocking (up to connect_timeout_ms). Connects to a job's store;
 * *out is owned (dk_store_destroy). Any thread. */
DK_EXPORT dk_status_t dk_store_connect(const dk_store_config_t* config,
                                       dk_store_t** out, dk_error_t** err);

/* Local. Starts a store server in this process bound to config->address
 * ("127.0.0.1:0" picks a port) and connects to it; dk_store_address gives the
 * bound address. The server stops at dk_store_destroy. */
DK_EXPORT dk_status_t dk_store_serve(const dk_store_config_t* config,
                                     dk_store_t** out, dk_error_t** err);

/* Local. The job's store (the one dk_init or dk_init_with_store joined
 * through), so other components rendezvous in it (distkit's backend for
 * torch.distributed keeps torch's keys there); *out is owned: dk_store_destroy
 * closes this handle only. DK_FAILED_PRECONDITION when not distributed. */
DK_EXPORT dk_status_t dk_default_store(dk_store_t** out, dk_error_t** err);

/* Local. "host:port" the store is reached at (borrowed until destroy). */
DK_EXPORT const char* dk_store_address(const dk_store_t* store);

/* Local. Closes the connection (and the server if dk_store_serve made it). */
DK_EXPORT void dk_store_destroy(dk_store_t* store);

/* Local, blocking on the server round trip; any thread. `value` is copied. */
DK_EXPORT dk_status_t dk_store_set(dk_store_t* store, const char* key,
                                   const void* value, size_t size,
                                   dk_error_t** err);

/* Local, blocks until `key` exists or the timeout passes
 * (DK_DEADLINE_EXCEEDED naming the key). *value_out is owned (dk_free). */
DK_EXPORT dk_status_t dk_store_get(dk_store_t* store, const char* key,
                                   void** value_out, size_t* size_out,
                                   dk_error_t** err);

/* Local. Atomically adds `delta` to the integer at `key`; *out = new value. */
DK_EXPORT dk_status_t dk_store_add(dk_store_t* store, const char* key,
                                   int64_t delta, int64_t* out,
                                   dk_error_t** err);

/* Local, blocks until every key exists or timeout_ms passes (< 0: the store
 * timeout). */
DK_EXPORT dk_status_t dk_store_wait(dk_store_t* store, const char* const* keys,
                                    size_t num_keys, int64_t timeout_ms,
                                    dk_error_t** err);

/* Local, non-blocking check that every key exists; *out is 0 or 1. */
DK_EXPORT dk_status_t dk_store_check(dk_store_t* store, const char* const* keys,
                                     size_t num_keys, int32_t* out,
                                     dk_error_t** err);

/* Local. *out is 1 if the key existed. */
DK_EXPORT dk_status_t dk_store_delete_key(dk_store_t* store, const char* key,
                                          int32_t* out, dk_error_t** err);

/* Local. Atomically: if `key` holds `expected` (or is absent and expected is
 * empty), sets `desired`. *value_out (owned, dk_free) is then `desired`, else
 * the current value (or `expected` when absent), as in torch's compare_set. */
DK_EXPORT dk_status_t dk_store_compare_set(
    dk_store_t* store, const char* key, const void* expected,
    size_t expected_size, const void* desired, size_t desired_size,
    void** value_out, size_t* size_out, dk_error_t** err);

/* Local. Appends `value` (copied) to the value of `key`, creating it. */
DK_EXPORT dk_status_t dk_store_append(dk_store_t* store, const char* key,
                                      const void* value, size_t size,
                                      dk_error_t** err);

/* Local. Sets several keys at once (values copied). */
DK_EXPORT dk_status_t dk_store_multi_set(dk_store_t* store,
                                         const char* const* keys,
                                         const dk_bytes_t* values,
                                         size_t num_keys, dk_error_t** err);

/* Local, blocks until every key exists or the store timeout passes. The
 * values, in key order, come back as one owned list (*values_out, dk_free). */
DK_EXPORT dk_status_t dk_store_multi_get(dk_store_t* store,
                                         const char* const* keys,
                                         size_t num_keys,
                                         dk_bytes_t** values_out,
                                         dk_error_t** err);

/* Local. The number of keys in the store. */
DK_EXPORT dk_status_t dk_store_num_keys(dk_store_t* store, int64_t* out,
                                        dk_error_t** err);

/* ---- Launcher (ABI 0.4) -------------------------------------------------- */

/* Local, any thread. The launcher the environment names, by mmengine's
 * infer_launcher: "pytorch" when WORLD_SIZE is set, else "slurm"
 * (SLURM_NTASKS), else "mpi" (OMPI_COMM_WORLD_LOCAL_RANK), else "none".
 * A static string (never freed). */
DK_EXPORT const char* dk_launcher_infer(void);

/* This process's place in the job, as dk_init reads it from the launcher.
 * The library allocates it: fields are only ever appended, so read a field
 * only when struct_size (what this library filled) covers it. The job token
 * (DISTKIT_TOKEN) is not in it: a secret is not handed out for display. */
typedef struct dk_launcher_info {
  size_t struct_size;   /* sizeof the library's dk_launcher_info_t */
  const char* launcher; /* "none", "pytorch", "slurm", "mpi" or "distrun" */
  int32_t rank;
  int32_t world_size;
  int32_t local_rank;
  int32_t local_world_size;
  int32_t node_rank;         /* GROUP_RANK, SLURM_NODEID; mpirun: rank / local
                              * world size where ranks lie in one block per node
                              * (its default mapping), else -1 (unknown) */
  int32_t master_port;       /* 0 when the launcher names none */
  const char* master_addr;   /* "" when none */
  const char* store_address; /* "host:port" dk_init joins through; "" none */
  int32_t hosts_store;       /* 1: dk_init makes this rank serve the store */
  int32_t reserved;          /* 0 */
} dk_launcher_info_t;

/* Local, any thread. Reads `launcher`'s variables ("pytorch", "slurm",
 * "mpi", "distrun", "none"; NULL: dk_launcher_infer's) as dk_init does, so
 * every binding sees the job as the library joins it. *out is owned: one
 * allocation (the struct, then its strings), one dk_free. A variable that
 * is missing or malformed is DK_INVALID_ARGUMENT naming it and the
 * launcher; another launcher name is "Invalid launcher type: <name>".
 * Slurm: master_addr is MASTER_ADDR, else the first host of SLURM_NODELIST
 * ("node[01-03]" -> "node01"); the port MASTER_PORT, else 29500; without
 * SLURM_LOCALID the local rank is the rank modulo the GPUs (mmengine's rule;
 * counting them opens the CUDA runtime). "mpi" without MASTER_ADDR (unset,
 * as dk_init's mpi backend tests it) gives mpirun's placement only (no
 * store address: there dk_init's mpi backend has rank 0 serve the store and
 * finds it through MPI). "none": rank 0 of 1. */
DK_EXPORT dk_status_t dk_launcher_info(const char* launcher,
                                       dk_launcher_info_t** out,
                                       dk_error_t** err);

/* ---- Groups -------------------------------------------------------------- */

typedef struct dk_group dk_group_t;

typedef struct dk_init_config {
  size_t struct_size;  /* sizeof(dk_init_config_t) */
  const char* backend; /* "gloo" (default); copied */
  int64_t timeout_ms;  /* per collective; default 1800000 (30 min) */
  /* ABI 0.9: how long init waits for the job's ranks to join and connect
   * (init as a whole, and each group init makes); <= 0, the default:
   * timeout_ms. A job may start slowly and still fail its collectives fast. */
  int64_t connect_timeout_ms;
} dk_init_config_t;

/* Local. Fills the defaults into `size` bytes (sizeof *config; convention
 * 8). _init: the ABI 0.12 struct. */
DK_EXPORT void dk_init_config_init_sized(dk_init_config_t* config, size_t size);
DK_EXPORT void dk_init_config_init(dk_init_config_t* config);

/* Collective over the job: every rank calls it. Blocking until all ranks
 * connect. Joins the job described by the launcher's environment: "pytorch"
 * (torchrun, and distrun), "slurm", "mpi" or "distrun"; anything else is
 * DK_INVALID_ARGUMENT "Invalid launcher type: ...". *world_out is owned
 * (dk_group_destroy) and is also the process's default group until
 * dk_shutdown. It also makes the node-local group where the launcher's
 * layout gives one (dk_init_local_group_from_launcher). Until dk_shutdown a
 * thread of the library watches the job: when the launcher that started
 * this rank (torchrun, srun, mpirun) dies, or the store another process
 * hosts stops answering for DISTKIT_STORE_HEARTBEAT_TIMEOUT seconds (default
 * 60) without having announced that it closes, the default groups are
 * aborted and the process gets SIGTERM (the README's "Failures").
 * With DISTKIT_REPLACEMENT=<n> (n > 0; distrun --max-replacements sets it
 * in a process started in place of a lost rank), dk_init joins the
 * survivors' dk_group_grow instead of the world's rendezvous and returns the
 * grown group as the world (ABI 0.7); it waits up to connect_timeout_ms
 * for them (its store calls may take up to 2 s more, to record that the
 * grow failed), and when they do not come it is DK_DEADLINE_EXCEEDED naming
 * the ranks that did not arrive; calling dk_init again joins their next
 * grow. */
DK_EXPORT dk_status_t dk_init(const char* launcher,
                              const dk_init_config_t* config,
                              dk_group_t** world_out, dk_error_t** err);

/* Collective, like dk_init, with an explicit rank, size and store (borrowed:
 * it must outlive the group). */
DK_EXPORT dk_status_t dk_init_with_store(dk_store_t* store, int32_t rank,
                                         int32_t size,
                                         const dk_init_config_t* config,
                                         dk_group_t** world_out,
                                         dk_error_t** err);

/* Local. Forgets the default group (handles stay valid until destroyed).
 * dk_init may be called again afterwards: each world this process joins
 * rendezvouses under its own keys, so a job can shut down and re-form on the
 * same store. */
DK_EXPORT void dk_shutdown(void);

/* Local, any thread: 1 once dk_init succeeded (until dk_shutdown). */
DK_EXPORT int32_t dk_is_distributed(void);

/* Local queries; `group` NULL means the default group. Not distributed: rank
 * 0 and size 1. A rank outside `group`: rank -1. */
DK_EXPORT int32_t dk_group_rank(const dk_group_t* group);
DK_EXPORT int32_t dk_group_size(const dk_group_t* group);
/* Backend ("gloo") and name ("world", "world/1"): static strings, valid
 * until the process exits (also after dk_shutdown or the group's destroy;
 * each distinct one is kept once). NULL when not distributed, for a
 * destroyed handle, or when out of memory. */
DK_EXPORT const char* dk_group_backend(const dk_group_t* group);
/* Local. The default group's rank of `group`'s rank `group_rank` (ranks
 * passed to this ABI are always ranks of the group called; bindings that
 * take torch's global ranks translate with this); -1 when out of range. */
DK_EXPORT int32_t dk_group_global_rank(const dk_group_t* group,
                                       int32_t group_rank);
DK_EXPORT const char* dk_group_name(const dk_group_t* group);

/* Collective over `parent` (NULL: the default group): every member calls it
 * with the same ranks (ranks of `parent`). Members get a working group;
 * the others a handle whose operations fail with DK_FAILED_PRECONDITION.
 * *out is owned (dk_group_destroy). */
DK_EXPORT dk_status_t dk_group_new(dk_group_t* parent, const int32_t* ranks,
                                   size_t num_ranks, dk_group_t** out,
                                   dk_error_t** err);

/* Collective over the members only: every rank of `ranks` (ranks of
 * `parent`) calls it with the same ranks and `name`; the other ranks of
 * `parent` need not (torch.distributed's backends are created on members
 * only), and a rank not in `ranks` gets DK_INVALID_ARGUMENT. `name` (no '/')
 * keys the group's rendezvous: unique among `parent`'s named subgroups.
 * Every backend: MPI makes it with MPI_Comm_create_group, NCCL with a new
 * communicator among the members. *out is owned (dk_group_destroy). */
DK_EXPORT dk_status_t dk_group_new_named(dk_group_t* parent,
                                         const int32_t* ranks, size_t num_ranks,
                                         const char* name, dk_group_t** out,
                                         dk_error_t** err);

/* ABI 0.11: what a subgroup sets apart from its parent (torch's
 * new_group(ranks, timeout=...)). Versioned like dk_init_config_t. */
typedef struct dk_group_options {
  size_t struct_size; /* sizeof(dk_group_options_t) */
  /* NULL: collective over `parent`, as dk_group_new. Else only the members
   * call it, as dk_group_new_named with this name (same rules). Copied. */
  const char* name;
  /* Per collective of the new group; <= 0, the default: the parent's. */
  int64_t timeout_ms;
  /* How long creating it waits for its members to connect; <= 0, the
   * default: the new group's timeout_ms. */
  int64_t connect_timeout_ms;
} dk_group_options_t;

/* Local. Fills the defaults (name NULL, timeouts 0: the parent's) into
 * `size` bytes (sizeof *options; convention 8). _init: the ABI 0.12 struct. */
DK_EXPORT void dk_group_options_init_sized(dk_group_options_t* options,
                                           size_t size);
DK_EXPORT void dk_group_options_init(dk_group_options_t* options);

/* Collective as dk_group_new (options->name NULL) or dk_group_new_named
 * (options->name set), with the new group's own timeouts (ABI 0.11).
 * options NULL: the defaults, i.e. dk_group_new. A creation that outwaits
 * connect_timeout_ms is DK_DEADLINE_EXCEEDED naming the group. */
DK_EXPORT dk_status_t dk_group_new_with_options(
    dk_group_t* parent, const int32_t* ranks, size_t num_ranks,
    const dk_group_options_t* options, dk_group_t** out, dk_error_t** err);

/* Local, never blocks on peers. Releases the group; a work handle keeps what
 * it needs alive (the group is released when the last one is destroyed).
 * Work still running that no handle holds is aborted (CANCELLED) rather than
 * waited for. The handle itself stays reserved, so a call through it after
 * destroy is a clean DK_FAILED_PRECONDITION (rank and size -1, name and
 * backend NULL) rather than a use of freed memory. */
DK_EXPORT void dk_group_destroy(dk_group_t* group);

/* Local, any thread, returns at once. Cancels in-flight work, sends and
 * receives included (it completes with DK_CANCELLED), and makes every later
 * call fail. */
DK_EXPORT void dk_group_abort(dk_group_t* group);

/* Collective over the survivors (ABI 0.3): after a failure poisoned `group`
 * (NULL: the default group), every surviving member calls it. It aborts the
 * group here, waits until every member has reported alive or `settle_ms`
 * passed (< 0: 5000), agrees on the survivors through the store, and gives
 * them a new group of their own (*out, owned; ranks renumbered 0..n-1 in the
 * old order) to go on training at the smaller size. With NULL the result
 * also becomes the default group. A rank that reports after the others
 * agreed gets DK_FAILED_PRECONDITION naming them. Gloo and NCCL groups
 * ("gloo", "nccl", "cpu:gloo,cuda:nccl"); DK_UNIMPLEMENTED otherwise. */
DK_EXPORT dk_status_t dk_group_shrink(dk_group_t* group, int64_t settle_ms,
                                      dk_group_t** out, dk_error_t** err);

/* Collective over the survivors and the replacements (ABI 0.7): the way
 * back to the job's size once a new process takes a lost rank's place
 * (distrun --max-replacements starts it with DISTKIT_REPLACEMENT=<n>).
 * Every survivor calls it on the group it holds (`group`: the shrunk group,
 * or the poisoned one itself; NULL: the default group, which the result then
 * replaces); it is aborted first, unless the call is refused before
 * anything happens (DK_INVALID_ARGUMENT when this rank's world rank is not
 * below `world_size`: the group stays as it was). Errors begin "grow of
 * group '<name>' (world rank <r>)". A replacement does not call it: its
 * dk_init, seeing DISTKIT_REPLACEMENT, joins this grow instead of the
 * world's rendezvous, and returns the same new group as its world (no
 * node-local group is made on either side). They agree through the store on
 * the members and a generation g: *out (owned) is a group of `world_size`
 * ranks (0: the size dk_init joined with), ranks in the original world
 * order, named "world@g<g>"; its keys and connections are its own, so no
 * message of the old group can reach it. Blocking, at most `timeout_ms`
 * (0 or less: `group`'s operation timeout) for the agreement and the new
 * group's connections: DK_DEADLINE_EXCEEDED naming the ranks that never came,
 * on every participant alike. Gloo and NCCL groups ("gloo", "nccl",
 * "cpu:gloo,cuda:nccl": a new communicator); DK_UNIMPLEMENTED otherwise. A
 * replacement of rank 0 needs a store that outlived rank 0 (distrun's). */
DK_EXPORT dk_status_t dk_group_grow(dk_group_t* group, int32_t world_size,
                                    int64_t timeout_ms, dk_group_t** out,
                                    dk_error_t** err);

/* Local (one look at the store), for survivors that shrank: *pending = 1 when
 * a process (a replacement that came after the survivors stopped waiting)
 * waits to join the next dk_group_grow of the world `group` (NULL: the
 * default group) belongs to, else 0. Ranks may see it at different moments:
 * agree (e.g. an all_reduce of max) before all call dk_group_grow (ABI 0.8).
 */
DK_EXPORT dk_status_t dk_group_grow_pending(dk_group_t* group, int32_t* pending,
                                            dk_error_t** err);

/* Local, non-blocking. DK_OK, or the error that poisoned the group. */
DK_EXPORT dk_status_t dk_group_async_error(const dk_group_t* group,
                                           dk_error_t** err);

/* ---- Work ---------------------------------------------------------------- */

typedef struct dk_work dk_work_t;

typedef int32_t dk_work_state_t;
#define DK_WORK_PENDING 0
#define DK_WORK_SUCCEEDED 1
#define DK_WORK_FAILED 2

/* Local, non-blocking, any thread. */
DK_EXPORT dk_status_t dk_work_test(const dk_work_t* work,
                                   dk_work_state_t* state_out,
                                   dk_error_t** err);

/* Local, blocking up to timeout_ms (< 0: no limit). Returns the operation's
 * status, or DK_DEADLINE_EXCEEDED if it has not finished (it goes on). */
DK_EXPORT dk_status_t dk_work_wait(dk_work_t* work, int64_t timeout_ms,
                                   dk_error_t** err);

/* Local. Frees the handle; the operation itself is not cancelled. */
DK_EXPORT void dk_work_destroy(dk_work_t* work);

/* Called once when a work's operation finishes: `arg` as given, and the
 * operation's status (DK_OK, or its error: dk_work_wait(work, 0, err) then
 * returns it with its message). */
typedef void (*dk_work_callback_t)(void* arg, dk_status_t status);

/* Local, any thread, non-blocking (ABI 0.6). Arranges for `callback(arg,
 * status)` to run once when `work`'s operation finishes: on the thread that
 * finishes it (the group's worker), after dk_work_test and dk_work_wait see
 * the result; or at once on this thread when it has finished already.
 * Several callbacks on one work run in the order given. A callback must be
 * quick and must not wait for the group's later operations, which run after
 * it returns; nor destroy `work` or the group (hand that to another thread).
 * For frameworks that complete their own futures (torch's c10d Work) without
 * a thread that waits. */
DK_EXPORT dk_status_t dk_work_on_complete(dk_work_t* work,
                                          dk_work_callback_t callback,
                                          void* arg, dk_error_t** err);

/* ---- Collectives --------------------------------------------------------- */
/* All collective over `group` (NULL: the default group): every member calls
 * them in the same order with matching sizes; otherwise every rank gets
 * DK_INVALID_ARGUMENT naming what each rank called. `work_out` NULL: blocking;
 * else non-blocking and *work_out is owned (dk_work_destroy). Tensors are
 * borrowed (lent until the work completes). Every `root`, `src` and `dst` is
 * a rank of `group` (torch.distributed takes default-group ranks instead;
 * dk_group_global_rank translates). */

DK_EXPORT dk_status_t dk_group_all_reduce(dk_group_t* group, DLTensor* data,
                                          dk_reduce_op_t op,
                                          dk_work_t** work_out,
                                          dk_error_t** err);
DK_EXPORT dk_status_t dk_group_broadcast(dk_group_t* group, DLTensor* data,
                                         int32_t root, dk_work_t** work_out,
                                         dk_error_t** err);
DK_EXPORT dk_status_t dk_group_reduce(dk_group_t* group, DLTensor* data,
                                      dk_reduce_op_t op, int32_t root,
                                      dk_work_t** work_out, dk_error_t** err);
/* `output` holds size * numel(input) elements, in rank order. */
DK_EXPORT dk_status_t dk_group_all_gather(dk_group_t* group,
                                          const DLTensor* input,
                                          DLTensor* output,
                                          dk_work_t** work_out,
                                          dk_error_t** err);
/* `output` (size * numel(input)) is used on `root` only; NULL elsewhere. */
DK_EXPORT dk_status_t dk_group_gather(dk_group_t* group, const DLTensor* input,
                                      DLTensor* output, int32_t root,
                                      dk_work_t** work_out, dk_error_t** err);
/* `input` (size * numel(output)) is used on `root` only; NULL elsewhere. */
DK_EXPORT dk_status_t dk_group_scatter(dk_group_t* group, const DLTensor* input,
                                       DLTensor* output, int32_t root,
                                       dk_work_t** work_out, dk_error_t** err);
/* `input` holds size * numel(output) elements. */
DK_EXPORT dk_status_t dk_group_reduce_scatter(
    dk_group_t* group, const DLTensor* input, DLTensor* output,
    dk_reduce_op_t op, dk_work_t** work_out, dk_error_t** err);
/* Splits NULL: equal parts; else `num_splits` == size entries each (copied). */
DK_EXPORT dk_status_t dk_group_all_to_all(
    dk_group_t* group, const DLTensor* input, const int64_t* input_splits,
    DLTensor* output, const int64_t* output_splits, size_t num_splits,
    dk_work_t** work_out, dk_error_t** err);
DK_EXPORT dk_status_t dk_group_barrier(dk_group_t* group, dk_work_t** work_out,
                                       dk_error_t** err);
/* Point to point (not collective): only the two ranks take part. */
DK_EXPORT dk_status_t dk_group_send(dk_group_t* group, const DLTensor* data,
                                    int32_t dst, int32_t tag,
                                    dk_work_t** work_out, dk_error_t** err);
DK_EXPORT dk_status_t dk_group_recv(dk_group_t* group, DLTensor* data,
                                    int32_t src, int32_t tag,
                                    dk_work_t** work_out, dk_error_t** err);

/* ---- Local group --------------------------------------------------------- */

/* Collective over the default group: creates this node's group, ranks
 * [node_rank * n, (node_rank + 1) * n) (mmengine's init_local_group).
 * DK_INVALID_ARGUMENT (naming node_rank, n and the world size) when those
 * ranks do not fit in the default group. DK_FAILED_PRECONDITION if it
 * exists already. */
DK_EXPORT dk_status_t dk_init_local_group(int32_t node_rank,
                                          int32_t num_per_node,
                                          dk_error_t** err);

/* Collective over the default group: creates the local group from where the
 * launcher placed the ranks (GROUP_RANK and LOCAL_WORLD_SIZE as torchrun
 * and distrun set them, without communication; else SLURM_NODEID or the
 * host name, compared in one all_gather). dk_init does this on every rank,
 * so the local group exists right after it (mmengine's users call
 * get_local_rank() then); call it after dk_init_with_store. On one node the
 * local group is the default group. DK_FAILED_PRECONDITION, and no group,
 * when the nodes do not hold consecutive blocks of one size; a later
 * dk_init_local_group may replace the group it made. */
DK_EXPORT dk_status_t dk_init_local_group_from_launcher(dk_error_t** err);

/* Local. The local group (owned handle; dk_group_destroy), or
 * DK_FAILED_PRECONDITION with mmengine's message when there is none. Not
 * distributed: *out = NULL and DK_OK. */
DK_EXPORT dk_status_t dk_local_group(dk_group_t** out, dk_error_t** err);

/* ---- Several tensors, objects, results ----------------------------------- */

/* Collective, blocking. mmengine's all_reduce_params: coalesce != 0 groups the
 * tensors into buckets by dtype (bucket_size_mb <= 0: one bucket per dtype;
 * else buckets of at most that many MiB), all-reduces each bucket flattened,
 * and writes the results back; coalesce == 0: one all_reduce per tensor. */
DK_EXPORT dk_status_t dk_group_all_reduce_coalesced(
    dk_group_t* group, DLTensor* const* tensors, size_t num_tensors,
    dk_reduce_op_t op, int32_t coalesce, int64_t bucket_size_mb,
    dk_error_t** err);

/* Collective, blocking. Rank 0's random seed in [0, 2^31), on every rank. */
DK_EXPORT dk_status_t dk_group_sync_random_seed(dk_group_t* group, int32_t* out,
                                                dk_error_t** err);

/* Collective, blocking. Every rank's bytes (any size), in rank order:
 * *items_out (owned, dk_free) holds *count_out == size entries. */
DK_EXPORT dk_status_t dk_group_all_gather_object(dk_group_t* group,
                                                 const void* data, size_t size,
                                                 dk_bytes_t** items_out,
                                                 size_t* count_out,
                                                 dk_error_t** err);

/* Collective, blocking. On `dst` as dk_group_all_gather_object; elsewhere
 * *items_out = NULL and *count_out = 0. */
DK_EXPORT dk_status_t dk_group_gather_object(
    dk_group_t* group, const void* data, size_t size, int32_t dst,
    dk_bytes_t** items_out, size_t* count_out, dk_error_t** err);

/* Collective, blocking. Every rank receives `src`'s list (`items` and `count`
 * are read on `src` only) as *items_out (owned, dk_free). */
DK_EXPORT dk_status_t dk_group_broadcast_object_list(
    dk_group_t* group, const dk_bytes_t* items, size_t count, int32_t src,
    dk_bytes_t** items_out, size_t* count_out, dk_error_t** err);

/* Collective, blocking. mmengine's collect_results on byte items (an empty
 * item stands for None): rank r holds dataset indices r, r + W, ...; rank 0
 * gets the results in dataset order, empty items dropped, at most `size` of
 * them (*items_out owned, *count_out entries); other ranks get NULL / 0.
 * device: "cpu" (through `tmpdir`, or a fresh directory when NULL; removed
 * afterwards), "gpu" or "npu" (through the backend; tmpdir must be NULL).
 * A negative size is DK_INVALID_ARGUMENT. */
DK_EXPORT dk_status_t dk_group_collect_results(
    dk_group_t* group, const dk_bytes_t* part, size_t part_count, int64_t size,
    const char* device, const char* tmpdir, dk_bytes_t** items_out,
    size_t* count_out, dk_error_t** err);

/* ---- Parallel state (modelopt) ------------------------------------------- */

/* modelopt's ParallelState: the data-, tensor- and expert-parallel groups.
 * Each is a group (borrowed: it must outlive the state), NULL for the world,
 * or DK_GROUP_UNUSED for "not used" (modelopt's -1). */
typedef struct dk_parallel_state dk_parallel_state_t;
#define DK_GROUP_UNUSED ((dk_group_t*)(intptr_t)-1)
#define DK_PARALLEL_DATA 0
#define DK_PARALLEL_TENSOR 1
#define DK_PARALLEL_EXPERT 2

/* Local. *out is owned (dk_parallel_state_destroy). */
DK_EXPORT dk_status_t dk_parallel_state_create(dk_group_t* data_parallel,
                                               dk_group_t* tensor_parallel,
                                               dk_group_t* expert_parallel,
                                               dk_parallel_state_t** out,
                                               dk_error_t** err);
/* Local. The handle stays reserved: afterwards rank and size are -1 and
 * describe is DK_FAILED_PRECONDITION. Destroying twice is harmless. Any
 * thread, also beside other threads' calls on the same handle: each of
 * those answers from the whole state or as destroyed. */
DK_EXPORT void dk_parallel_state_destroy(dk_parallel_state_t* state);

/* Local. Rank and size in group `which` (DK_PARALLEL_*); -1 when that group is
 * unused or distkit is not initialized (modelopt's DistributedProcessGroup). */
DK_EXPORT int32_t dk_parallel_state_rank(const dk_parallel_state_t* state,
                                         int32_t which);
DK_EXPORT int32_t dk_parallel_state_size(const dk_parallel_state_t* state,
                                         int32_t which);

/* Local. modelopt's text form, "data_parallel_group: group: None,
 * initialized: True, world size: 4, tensor_parallel_group: ..."; *out is
 * owned (dk_free). */
DK_EXPORT dk_status_t dk_parallel_state_describe(
    const dk_parallel_state_t* state, char** out, dk_error_t** err);

/* ---- Issuers (ABI 0.14) ------------------------------------------------- */

/* Local, any thread. A group's collectives come from one issuer at a time
 * (convention 13): by default the calling OS thread. A caller whose one
 * sequence of calls runs on several OS threads in an order it fixes itself
 * (the Go runtime moves a goroutine between threads whenever it blocks)
 * takes an issuer of its own from dk_issuer_new (never 0, and never one a
 * thread has) and makes each of its calls under it: dk_issuer_set makes the
 * calling thread's later calls count as `issuer` (0: as the thread itself)
 * and returns the issuer it replaces, to be set back after the call. The
 * library then cannot tell two threads that use one issuer at once apart:
 * the caller must not overlap calls made under one issuer. */
DK_EXPORT uint32_t dk_issuer_new(void);
DK_EXPORT uint32_t dk_issuer_set(uint32_t issuer);

/* ---- Devices (ABI 0.2) --------------------------------------------------- */

/* Local. This rank's device (mmengine's get_device): cuda:<local rank> when
 * this build has CUDA and the machine a usable GPU, else the CPU. */
DK_EXPORT void dk_get_device(DLDevice* out);

/* Local, any thread (ABI 0.4). Where `group`'s (NULL: the default group's)
 * collectives compute, as its backend says (mmengine's get_comm_device):
 * the CPU for gloo and mpi; cuda:<device> for nccl and for
 * "cpu:gloo,cuda:nccl" (its CUDA half is NCCL). Not distributed with NULL,
 * or a rank outside `group`: the CPU. A destroyed handle is
 * DK_FAILED_PRECONDITION. */
DK_EXPORT dk_status_t dk_group_comm_device(const dk_group_t* group,
                                           DLDevice* out, dk_error_t** err);

/* Local, the issuing thread (ABI 0.5). The CUDA stream (a cudaStream_t;
 * NULL, the default: the legacy default stream) that the caller's work on
 * `group`'s (NULL: the default group's) device runs on. Every CUDA operation
 * issued on the group afterwards follows the work issued on that stream
 * before it (torch's ProcessGroupNCCL does the same with its current
 * stream), and its wait returns once its device work is done. A stream of
 * another device fails the next CUDA operation with DK_INVALID_ARGUMENT.
 * Ignored by groups without a CUDA device; not distributed with NULL, or a
 * rank outside `group`: nothing to set, DK_OK. */
DK_EXPORT dk_status_t dk_group_set_cuda_stream(dk_group_t* group, void* stream,
                                               dk_error_t** err);

/* Local, blocking, any thread. Copies src into dst, which may be on different
 * devices (host <-> CUDA and CUDA <-> CUDA through cudaMemcpy): the same
 * dtype and element count, both contiguous. A CUDA device this build or
 * machine lacks is DK_FAILED_PRECONDITION naming it. */
DK_EXPORT dk_status_t dk_tensor_copy(const DLTensor* src, DLTensor* dst,
                                     dk_error_t** err);

/* ---- Gradient reducer (data parallel; ABI 0.2) --------------------------- */

/* The engine of distributed data parallel, for trainers without one (Rust,
 * Go, C): parameters registered in order, gradients marked ready as backward
 * produces them, bucket all_reduces started at once so they overlap the rest
 * of backward, then averaged gradients written back. The averages equal
 * torch DDP's. Per iteration: [dk_reducer_prepare], dk_reducer_mark_ready for
 * every parameter, dk_reducer_finalize (dk_reducer_abandon instead when
 * backward failed). One thread at a time per reducer. */
typedef struct dk_reducer dk_reducer_t;

#define DK_COMM_HOOK_NONE 0
#define DK_COMM_HOOK_FP16 1 /* torch's fp16_compress_hook */
#define DK_COMM_HOOK_BF16 2 /* torch's bf16_compress_hook */

typedef struct dk_reducer_config {
  size_t struct_size;              /* sizeof(dk_reducer_config_t) */
  double bucket_cap_mb;            /* default 25 */
  double first_bucket_cap_mb;      /* default 1 */
  int32_t find_unused_parameters;  /* default 0 */
  int32_t gradient_as_bucket_view; /* default 0 */
  int32_t broadcast_buffers;       /* default 1 */
  int32_t comm_hook;               /* DK_COMM_HOOK_*; default NONE */
} dk_reducer_config_t;

/* Local. Fills the defaults into `size` bytes (sizeof *config; convention
 * 8). _init: the ABI 0.12 struct. */
DK_EXPORT void dk_reducer_config_init_sized(dk_reducer_config_t* config,
                                            size_t size);
DK_EXPORT void dk_reducer_config_init(dk_reducer_config_t* config);

/* Collective over `group` (NULL: the default group): broadcasts rank 0's
 * parameters and buffers into every rank's tensors, then assigns buckets.
 * The tensors are borrowed for the reducer's lifetime (buffers are written
 * again by dk_reducer_broadcast_buffers). Parameters must be floating point.
 * *out is owned (dk_reducer_destroy). */
DK_EXPORT dk_status_t dk_reducer_create(
    dk_group_t* group, DLTensor* const* params, size_t num_params,
    DLTensor* const* buffers, size_t num_buffers,
    const dk_reducer_config_t* config, dk_reducer_t** out, dk_error_t** err);

/* Local. Waits for in-flight buckets, then frees. */
DK_EXPORT void dk_reducer_destroy(dk_reducer_t* reducer);

/* Local. Starts an iteration (implicit at the first mark_ready). `unused`:
 * indices of parameters this rank's forward did not use
 * (find_unused_parameters only); they count as zero gradients. A parameter
 * this iteration does not use but that holds a gradient accumulated under
 * no_sync is not unused: mark it ready with that gradient (as torch's DDP
 * contributes it), or it is lost from the average. */
DK_EXPORT dk_status_t dk_reducer_prepare(dk_reducer_t* reducer,
                                         const int32_t* unused,
                                         size_t num_unused, dk_error_t** err);

/* Parameter `index`'s gradient is final for this iteration; may start a
 * bucket's all_reduce (non-blocking). `grad` (same dtype and size as the
 * parameter) is borrowed until dk_reducer_finalize, which writes it. */
DK_EXPORT dk_status_t dk_reducer_mark_ready(dk_reducer_t* reducer,
                                            int32_t index, const DLTensor* grad,
                                            dk_error_t** err);

/* Blocking. Waits for every bucket and writes the averaged gradients. A
 * parameter without gradient (and find_unused_parameters off) is
 * DK_FAILED_PRECONDITION naming it. */
DK_EXPORT dk_status_t dk_reducer_finalize(dk_reducer_t* reducer,
                                          dk_error_t** err);

/* Local, blocking (ABI 0.12). Ends an iteration that will not be finalized
 * because this rank's backward failed (an exception inside autograd): waits
 * for the buckets already launched (each all_reduce needs every rank to have
 * launched that bucket), then forgets the gradients marked ready (no longer
 * borrowed), so that the next iteration starts afresh instead of failing
 * with "marked ready twice" or writing into freed gradients. Not
 * collective: every rank whose backward failed calls it; a peer whose
 * backward succeeded is left waiting in dk_reducer_finalize for buckets the
 * failed ranks will not launch, as in torch's DDP, so a backward that fails
 * on one rank only is the caller's to resolve (abort the group). A no-op
 * outside an iteration (nothing marked ready or prepared since the last
 * finalize). Any thread, one at a time per reducer. */
DK_EXPORT dk_status_t dk_reducer_abandon(dk_reducer_t* reducer,
                                         dk_error_t** err);

/* Local. require_sync 0: no_sync (mark_ready and finalize do nothing;
 * gradients accumulate in the caller's buffers until it is 1 again). */
DK_EXPORT void dk_reducer_set_require_sync(dk_reducer_t* reducer,
                                           int32_t require_sync);

/* Collective, blocking. Broadcasts rank 0's buffers (before each forward
 * when broadcast_buffers). */
DK_EXPORT dk_status_t dk_reducer_broadcast_buffers(dk_reducer_t* reducer,
                                                   dk_error_t** err);

/* Local. gradient_as_bucket_view: where parameter `index`'s gradient must be
 * written (borrowed; valid while dk_reducer_view_generation is unchanged,
 * which it is except once, after the first finalize). */
DK_EXPORT dk_status_t dk_reducer_grad_view(dk_reducer_t* reducer, int32_t index,
                                           void** data_out, dk_error_t** err);
DK_EXPORT int64_t dk_reducer_view_generation(const dk_reducer_t* reducer);

/* Local. After finalize: parameter `index`'s averaged gradient (borrowed until
 * the next iteration) and, with find_unused_parameters, whether any rank
 * used it (1) or none did (0: its gradient was not written). */
DK_EXPORT dk_status_t dk_reducer_reduced_grad(dk_reducer_t* reducer,
                                              int32_t index, void** data_out,
                                              dk_error_t** err);
DK_EXPORT int32_t dk_reducer_globally_used(const dk_reducer_t* reducer,
                                           int32_t index);

/* Local. The number of buckets. */
DK_EXPORT int32_t dk_reducer_num_buckets(const dk_reducer_t* reducer);

/* ---- Sharded units (fully sharded data parallel; ABI 0.3) ---------------- */

/* FSDP's engine, for trainers without one (Rust, Go, C) and for the
 * framework wrappers: a unit's parameters flattened per dtype, padded and
 * split 1/N across the group; each rank keeps its shard (master values) and
 * the shard's gradient. Per iteration: dk_shard_unshard (or _start, compute,
 * _wait) before using dk_shard_full_param; dk_shard_reshard to free the full
 * parameters; dk_shard_accumulate_grad (or write dk_shard_full_grad) for
 * every parameter; dk_shard_reduce_grads; then the optimizer steps the
 * shards (dk_shard_local) and calls dk_shard_zero_grads. Averages are over
 * every rank holding a replica, as torch's FSDP computes them. Collective
 * calls must be made in the same order on every rank of the group. One
 * thread at a time per unit. */
typedef struct dk_shard dk_shard_t;

/* Strategies (torch's ShardingStrategy). */
#define DK_SHARD_FULL_SHARD 0    /* free the full parameters after forward */
#define DK_SHARD_SHARD_GRAD_OP 1 /* keep them until after backward */
#define DK_SHARD_NO_SHARD 2      /* no sharding: all_reduce, as DDP */
#define DK_SHARD_HYBRID_SHARD 3  /* shard in the group, replicate across */
#define DK_SHARD_HYBRID_SHARD_ZERO2 4
#define DK_DTYPE_UNSET (-1) /* a mixed-precision dtype left to the default */

typedef struct dk_shard_config {
  size_t struct_size;          /* sizeof(dk_shard_config_t) */
  int32_t strategy;            /* DK_SHARD_*; default FULL_SHARD */
  int32_t param_dtype;         /* gather/compute dtype; default UNSET (own) */
  int32_t reduce_dtype;        /* gradient reduction; default UNSET (param) */
  int32_t offload_params;      /* shard and its gradient in host memory */
  int32_t sync_module_states;  /* broadcast rank 0's values first; default 0 */
  int32_t reserved;            /* 0 */
  dk_group_t* replicate_group; /* HYBRID_*: one rank per node; else NULL */
  /* ABI 0.13 (set it after dk_shard_config_init_sized). NULL, or a flag per
   * parameter of dk_shard_create: nonzero marks one that takes no gradient
   * (torch's requires_grad=False). Those are sharded and gathered as the
   * others but in flat buffers of their own, which have no gradient
   * (dk_shard_local's *grad_out NULL) and are never reduced, so an
   * optimizer stepping the shards does not move them (weight decay would);
   * their dk_shard_full_grad and dk_shard_accumulate_grad are
   * DK_FAILED_PRECONDITION. Read by dk_shard_create only. */
  const int32_t* frozen;
} dk_shard_config_t;

/* Local. Fills the defaults into `size` bytes (sizeof *config; convention
 * 8). _init: the ABI 0.12 struct, without `frozen` (read as NULL). */
DK_EXPORT void dk_shard_config_init_sized(dk_shard_config_t* config,
                                          size_t size);
DK_EXPORT void dk_shard_config_init(dk_shard_config_t* config);

/* Collective over `group` (NULL: the default group) and the replicate group.
 * Every rank registers the same parameters (count, dtype, element count),
 * else DK_INVALID_ARGUMENT on every rank naming the first difference.
 * `params` are read (rank 0's with sync_module_states), not kept: the caller
 * may free them. `names` (NULL allowed) name parameters in errors. *out is
 * owned (dk_shard_destroy). */
DK_EXPORT dk_status_t dk_shard_create(dk_group_t* group,
                                      DLTensor* const* params,
                                      size_t num_params,
                                      const char* const* names,
                                      const dk_shard_config_t* config,
                                      dk_shard_t** out, dk_error_t** err);

/* Local. Waits for a gather in flight, then frees. */
DK_EXPORT void dk_shard_destroy(dk_shard_t* shard);

/* Collective. _start begins the all-gather of the full parameters (returns
 * at once: compute meanwhile); _wait waits for it; dk_shard_unshard does
 * both. No-ops while the unit is already unsharded. */
DK_EXPORT dk_status_t dk_shard_unshard_start(dk_shard_t* shard,
                                             dk_error_t** err);
DK_EXPORT dk_status_t dk_shard_unshard_wait(dk_shard_t* shard,
                                            dk_error_t** err);
DK_EXPORT dk_status_t dk_shard_unshard(dk_shard_t* shard, dk_error_t** err);

/* Local. Frees the full parameters (their pointers become invalid). */
DK_EXPORT dk_status_t dk_shard_reshard(dk_shard_t* shard, dk_error_t** err);

/* Local. Parameter `index`'s full values (the unit's param dtype, the
 * parameter's element count), borrowed until dk_shard_reshard; before
 * dk_shard_unshard it is DK_FAILED_PRECONDITION. */
DK_EXPORT dk_status_t dk_shard_full_param(dk_shard_t* shard, int32_t index,
                                          void** data_out, dk_error_t** err);

/* Local. Adds `grad` (parameter `index`'s gradient: floating point, its
 * element count) into the unit's full gradient; or write there directly:
 * dk_shard_full_grad (param dtype; zeroed per iteration; borrowed until
 * dk_shard_reduce_grads). */
DK_EXPORT dk_status_t dk_shard_accumulate_grad(dk_shard_t* shard, int32_t index,
                                               const DLTensor* grad,
                                               dk_error_t** err);
DK_EXPORT dk_status_t dk_shard_full_grad(dk_shard_t* shard, int32_t index,
                                         void** data_out, dk_error_t** err);

/* Collective, blocking. Averages every rank's full gradients into this
 * rank's shard gradient (which accumulates until dk_shard_zero_grads) and
 * frees the full gradients. With require_sync 0 (no_sync) it only keeps
 * them, to be reduced with the next synchronized call. */
DK_EXPORT dk_status_t dk_shard_reduce_grads(dk_shard_t* shard,
                                            dk_error_t** err);
/* dk_shard_reduce_grads in two halves, so the reduction overlaps the rest of
 * backward. Collective, returns at once: the full gradients are lent to an
 * asynchronous reduce-scatter (a second start while one is in flight is
 * DK_FAILED_PRECONDITION). _wait: adds the result into the shard gradient,
 * which is stale until then (a no-op when nothing is in flight). Start the
 * units' reductions and wait for them in the same order on every rank. */
DK_EXPORT dk_status_t dk_shard_reduce_grads_start(dk_shard_t* shard,
                                                  dk_error_t** err);
DK_EXPORT dk_status_t dk_shard_reduce_grads_wait(dk_shard_t* shard,
                                                 dk_error_t** err);
DK_EXPORT void dk_shard_set_require_sync(dk_shard_t* shard,
                                         int32_t require_sync);

/* Local. The unit's flat buffers (one per parameter dtype, in first-use
 * order; frozen parameters in buffers of their own) and flat buffer `flat`'s
 * shard: values and gradient (borrowed for the unit's lifetime; the
 * optimizer writes the values; the gradient NULL for frozen parameters'
 * buffers), element count and dtype. */
DK_EXPORT int32_t dk_shard_num_flat(const dk_shard_t* shard);
DK_EXPORT dk_status_t dk_shard_local(dk_shard_t* shard, int32_t flat,
                                     void** data_out, void** grad_out,
                                     int64_t* numel_out, dk_dtype_t* dtype_out,
                                     dk_error_t** err);
DK_EXPORT void dk_shard_zero_grads(dk_shard_t* shard);

/* Local. The part of parameter `index` this rank's shard holds: elements
 * [*offset_out, *offset_out + *numel_out) of the parameter, at *data_out
 * (values) and *grad_out (gradient); *numel_out 0 when none. */
DK_EXPORT dk_status_t dk_shard_piece(dk_shard_t* shard, int32_t index,
                                     int64_t* offset_out, int64_t* numel_out,
                                     void** data_out, void** grad_out,
                                     dk_error_t** err);

/* Collective. Full state dict: every parameter's full master values into
 * outs[i] (its dtype and element count); rank0_only: only the job's rank 0
 * writes (rank 0 of the group and, under a hybrid layout, of the replicate
 * group; others may pass NULL). */
DK_EXPORT dk_status_t dk_shard_gather_full(dk_shard_t* shard,
                                           DLTensor* const* outs, size_t n,
                                           int32_t rank0_only,
                                           dk_error_t** err);
/* Loads a full state dict (each rank keeps its slice). rank0_only: only rank
 * 0 passes values (collective: broadcast; the others' values are not read
 * and may be NULL), and an error in rank 0's values is every rank's error;
 * else every rank does (local). */
DK_EXPORT dk_status_t dk_shard_load_full(dk_shard_t* shard,
                                         DLTensor* const* values, size_t n,
                                         int32_t rank0_only, dk_error_t** err);

/* Local. Loads a sharded checkpoint saved by a group of `saved_world_size`
 * ranks: saved[flat * saved_world_size + rank] is that rank's dk_shard_local
 * values for flat buffer `flat` (host memory; entries this rank does not
 * need may be NULL). Another unit's checkpoint is DK_INVALID_ARGUMENT. */
DK_EXPORT dk_status_t dk_shard_load_sharded(dk_shard_t* shard,
                                            int32_t saved_world_size,
                                            const DLTensor* const* saved,
                                            size_t num_saved, dk_error_t** err);

/* Local. Bytes the unit holds now (shards, gradients, full buffers) and at
 * most since creation. */
DK_EXPORT int64_t dk_shard_held_bytes(const dk_shard_t* shard);
DK_EXPORT int64_t dk_shard_peak_held_bytes(const dk_shard_t* shard);

/* The unit's timeline: when each all-gather and reduction started and
 * ended, so a trainer can see prefetched gathers overlap its compute. */
#define DK_SHARD_EVENT_UNSHARD_START 0 /* an all-gather was started */
#define DK_SHARD_EVENT_UNSHARD_DONE 1  /* ... and waited for */
#define DK_SHARD_EVENT_RESHARD 2       /* the full parameters were freed */
#define DK_SHARD_EVENT_REDUCE_START 3  /* a gradient reduction was started */
#define DK_SHARD_EVENT_REDUCE_DONE 4   /* ... and added into the shard grad */
typedef struct dk_shard_event {
  int64_t unix_ns; /* when: ns since the Unix epoch (the system clock) */
  int32_t kind;    /* DK_SHARD_EVENT_* */
  int32_t reserved;
} dk_shard_event_t;

/* Local. Moves the oldest recorded events, at most `capacity`, into
 * out[0..*count) in the order they happened; the rest stay for the next
 * call. A unit keeps its newest 4096 events not yet taken (older ones are
 * dropped), so a trainer that never asks does not grow. */
DK_EXPORT dk_status_t dk_shard_take_events(dk_shard_t* shard,
                                           dk_shard_event_t* out,
                                           size_t capacity, size_t* count,
                                           dk_error_t** err);

/* ---- Elastic snapshots (ABI 0.8) ----------------------------------------- */

/* A trainer's state kept in memory, for recovery without a checkpoint file
 * (the pieces of an elastic loop: dk_group_shrink or dk_group_grow, then
 * dk_snapshot_sync). The trainer registers named host buffers (parameters,
 * optimizer state, a step counter, the data position), then commits at
 * points where every rank is at the same step: each commit copies every
 * buffer (data-parallel state: every rank holds a full copy), numbered 1,
 * 2, ..., and replaces the snapshot held only once the copy is complete.
 * After a failure the survivors shrink or grow and every member of the new
 * group, a replacement included (after its dk_init joined the grow), calls
 * dk_snapshot_sync: the newest commit any member holds is loaded into every
 * rank's buffers, so survivors that stepped further roll back and all redo
 * the steps since that commit. One thread at a time per snapshot. */
typedef struct dk_snapshot dk_snapshot_t;

/* Local. An empty snapshot: no buffers, none committed. *out is owned
 * (dk_snapshot_destroy). */
DK_EXPORT dk_status_t dk_snapshot_create(dk_snapshot_t** out, dk_error_t** err);

/* Local. Frees the snapshot's copies; the registered buffers are the
 * caller's and stay untouched. NULL allowed. */
DK_EXPORT void dk_snapshot_destroy(dk_snapshot_t* snapshot);

/* Local. Adds `bytes` of host memory at `data` (borrowed until
 * dk_snapshot_destroy; NULL only when bytes is 0) under `name` (copied;
 * 1-1024 bytes, unique). Every rank registers the same names and sizes in
 * the same order. DK_INVALID_ARGUMENT for a missing, repeated or too long
 * name, NULL memory, or a snapshot past 2^47 bytes; DK_FAILED_PRECONDITION
 * after the first commit or sync (register every buffer before). */
DK_EXPORT dk_status_t dk_snapshot_register(dk_snapshot_t* snapshot,
                                           const char* name, void* data,
                                           size_t bytes, dk_error_t** err);

/* Local, blocking (a memory copy). Copies every registered buffer into a new
 * snapshot, which then replaces the one held (a failed allocation,
 * DK_RESOURCE_EXHAUSTED, keeps it); its number is the held one's + 1. */
DK_EXPORT dk_status_t dk_snapshot_commit(dk_snapshot_t* snapshot,
                                         dk_error_t** err);

/* Collective over `group` (NULL: the default group), blocking: every member
 * calls it on a group made after the failure (the shrunk or grown group; a
 * replacement on the world its dk_init returned). The members agree on the
 * newest commit any of them holds (an all_gather of commit numbers and
 * registrations), it is broadcast from the first member holding it, and
 * every member, the sender included, copies it into its registered buffers
 * and holds it from then on; *commit_out (NULL allowed) is its number.
 * DK_INVALID_ARGUMENT on every member, naming the buffer and the ranks, when
 * the registrations differ; DK_FAILED_PRECONDITION when no member holds a
 * snapshot. A failure of the group during the broadcast (another lost rank)
 * leaves this rank's snapshot and buffers as they were: recover again and
 * sync on the next group. */
DK_EXPORT dk_status_t dk_snapshot_sync(dk_snapshot_t* snapshot,
                                       dk_group_t* group, int64_t* commit_out,
                                       dk_error_t** err);

/* Local. Copies the snapshot held back into the registered buffers
 * (DK_FAILED_PRECONDITION when none is held). */
DK_EXPORT dk_status_t dk_snapshot_restore(dk_snapshot_t* snapshot,
                                          dk_error_t** err);

/* Local, any thread (waits while a commit, restore or sync runs: a sync
 * for as long as its collectives). The number of the snapshot held (1 for
 * the first commit; after a sync, the commit loaded), 0 when none is held;
 * -1 for a NULL snapshot. */
DK_EXPORT int64_t dk_snapshot_commit_number(const dk_snapshot_t* snapshot);

/* Local, any thread (waits while a commit, restore or sync runs). The
 * bytes of host memory the snapshot held takes (0 when none; the registered
 * buffers' total once one is); -1 for NULL. */
DK_EXPORT int64_t dk_snapshot_bytes(const dk_snapshot_t* snapshot);

/* ---- Sharded elastic snapshots (ABI 0.10) -------------------------------- */

/* Sharded state kept in peers' memory, where each rank's shard exists once
 * (FSDP: dk_shard_local's values and the optimizer's per-element state of
 * each flat buffer). The trainer registers this rank's buffers, then commits
 * at points where every rank is at the same step: each commit, collective
 * over the group the shards are laid out on (its rank r holds shard r),
 * copies them and hands the copy to the left-hand neighbour, so rank r
 * holds shards r and r + 1 mod N (2/N of the state) and any one lost shard
 * survives. After a failure the survivors shrink or grow, and every member
 * of the new group (a replacement with a snapshot that holds nothing)
 * calls dk_sharded_snapshot_fetch: the newest commit whose every shard a
 * member still holds is chosen, and each member receives the shards it asks
 * for, to load (dk_shard_load_sharded for parameters) before committing a
 * new snapshot of the new layout. Plain state every rank holds in full (a
 * step counter, the data position) goes in a dk_snapshot_t, or in every
 * shard. One thread at a time per snapshot. */
typedef struct dk_sharded_snapshot dk_sharded_snapshot_t;

/* Local. An empty snapshot: no buffers, none committed. *out is owned
 * (dk_sharded_snapshot_destroy). */
DK_EXPORT dk_status_t dk_sharded_snapshot_create(dk_sharded_snapshot_t** out,
                                                 dk_error_t** err);

/* Local. Frees the snapshot's copies (the registered buffers stay the
 * caller's). NULL allowed. */
DK_EXPORT void dk_sharded_snapshot_destroy(dk_sharded_snapshot_t* snapshot);

/* Local. Adds `bytes` of host memory at `data` (borrowed until
 * dk_sharded_snapshot_destroy; NULL only when bytes is 0) under `name`
 * (copied; 1-1024 bytes, unique): this rank's part of a sharded state.
 * Every rank registers the same names in the same order; sizes may differ.
 * DK_INVALID_ARGUMENT for a missing, repeated or too long name or NULL
 * memory; DK_FAILED_PRECONDITION after the first commit or fetch (a new
 * layout takes a new snapshot). */
DK_EXPORT dk_status_t
dk_sharded_snapshot_register(dk_sharded_snapshot_t* snapshot, const char* name,
                             void* data, size_t bytes, dk_error_t** err);

/* Collective over `group` (NULL: the default group), blocking. Copies this
 * rank's buffers and exchanges the copies with the neighbours; the commit is
 * numbered one past the newest any member holds and comes into force once
 * every member holds its part (the one before stays until then: a failure
 * of the group during the commit leaves both to fetch from, and returns the
 * error). DK_INVALID_ARGUMENT on every member, naming the ranks, when the
 * registered names differ. */
DK_EXPORT dk_status_t dk_sharded_snapshot_commit(
    dk_sharded_snapshot_t* snapshot, dk_group_t* group, dk_error_t** err);

/* Collective over `group` (NULL: the default group), blocking: every member
 * of a group made after a change of membership. The members agree on the
 * newest commit whose every shard some member holds, and each receives the
 * shards it names in `wanted` (shard indices, i.e. ranks of the group that
 * committed; NULL: every shard, with num_wanted ignored) from the first
 * member holding each; its own held shards cost nothing. *commit_out and
 * *world_out (NULL allowed) receive the commit's number and its group's
 * size. The shards are then readable with dk_sharded_snapshot_shard until
 * the next commit or fetch, and the chosen commit is the one in force on the
 * members holding it (a commit of the same layout may follow on a snapshot
 * that registered its buffers before the fetch; a replacement's empty one
 * cannot, as a fetch ends registration, so it commits a new snapshot; after
 * a change of size, commit a new snapshot on the new group and destroy this
 * one only once that first commit succeeded). Until the members' next
 * commit, a shard a replacement fetched is held only by its neighbour. On
 * every member alike:
 * DK_FAILED_PRECONDITION
 * when no member holds a commit; DK_DATA_LOSS naming the shards and the
 * ranks that held them when neighbours were lost together with no older
 * commit whole; DK_INVALID_ARGUMENT for an index outside the commit's
 * group, or registered names that differ among the members holding
 * commits. */
DK_EXPORT dk_status_t dk_sharded_snapshot_fetch(
    dk_sharded_snapshot_t* snapshot, dk_group_t* group, const int32_t* wanted,
    size_t num_wanted, int64_t* commit_out, int32_t* world_out,
    dk_error_t** err);

/* Local, after dk_sharded_snapshot_fetch: buffer `buffer` (in registration
 * order) of shard `index`, as its rank committed it: *data_out (borrowed
 * until the next commit, fetch or destroy; 64-byte aligned) and *bytes_out.
 * DK_NOT_FOUND for a shard not fetched, DK_OUT_OF_RANGE for a buffer past
 * the shard's. */
DK_EXPORT dk_status_t dk_sharded_snapshot_shard(
    const dk_sharded_snapshot_t* snapshot, int32_t index, int32_t buffer,
    const void** data_out, size_t* bytes_out, dk_error_t** err);

/* Local, any thread (waits while a commit or fetch runs). The number of the
 * commit in force (0 when none); -1 for a NULL snapshot. */
DK_EXPORT int64_t
dk_sharded_snapshot_commit_number(const dk_sharded_snapshot_t* snapshot);

/* Local, any thread (waits while a commit or fetch runs). The bytes of host
 * memory the snapshot holds: the commit in force (this rank's shard and its
 * neighbour's), a pending one, and what the last fetch received; -1 for
 * NULL. */
DK_EXPORT int64_t
dk_sharded_snapshot_bytes(const dk_sharded_snapshot_t* snapshot);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DISTKIT_DISTKIT_H_ */
