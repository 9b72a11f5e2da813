package distkit

/*
#include <stdlib.h>
#include "distkit/distkit.h"
*/
import "C"

import "unsafe"

// LauncherInfo is this process's place in the job as its launcher
// (torchrun, Slurm, mpirun, distrun) describes it, read by the library
// exactly as Init reads it, so every language sees the same job.
type LauncherInfo struct {
	Launcher       string // "none", "pytorch", "slurm", "mpi" or "distrun"
	Rank           int
	WorldSize      int
	LocalRank      int
	LocalWorldSize int
	NodeRank       int // GROUP_RANK, SLURM_NODEID; mpirun: rank / local world size where ranks lie in one block per node, else -1
	// MasterAddr is empty when the launcher names none (Slurm: the first
	// host of SLURM_NODELIST unless MASTER_ADDR is set).
	MasterAddr string
	MasterPort int    // 0 when the launcher names none
	StoreAddr  string // "host:port" Init joins through; empty when none
	HostsStore bool   // Init makes this rank serve the store
}

// InferLauncher is the launcher the environment names (mmengine's
// infer_launcher): "pytorch" (WORLD_SIZE set), "slurm", "mpi" or "none".
func InferLauncher() string { return C.GoString(C.dk_launcher_infer()) }

// ReadLauncherInfo reads launcher's variables ("": InferLauncher's) as Init
// does. A missing or malformed variable is InvalidArgument naming it.
func ReadLauncherInfo(launcher string) (LauncherInfo, error) {
	var name *C.char
	if launcher != "" {
		var err error
		if name, err = cString("launcher", launcher); err != nil {
			return LauncherInfo{}, err
		}
		defer C.free(unsafe.Pointer(name))
	}
	var out *C.dk_launcher_info_t
	var cerr *C.dk_error_t
	if err := check(C.dk_launcher_info(name, &out, &cerr), cerr); err != nil {
		return LauncherInfo{}, err
	}
	// One allocation holds the struct and its strings: copy, then free once.
	defer C.dk_free(unsafe.Pointer(out))
	return LauncherInfo{
		Launcher:       C.GoString(out.launcher),
		Rank:           int(out.rank),
		WorldSize:      int(out.world_size),
		LocalRank:      int(out.local_rank),
		LocalWorldSize: int(out.local_world_size),
		NodeRank:       int(out.node_rank),
		MasterAddr:     C.GoString(out.master_addr),
		MasterPort:     int(out.master_port),
		StoreAddr:      C.GoString(out.store_address),
		HostsStore:     out.hosts_store != 0,
	}, nil
}
