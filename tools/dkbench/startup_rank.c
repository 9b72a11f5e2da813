/* One rank of tools/dkbench/startup_bench.py, distkit's side: joins the job
 * (dk_init("pytorch"): RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; rank 0
 * hosts the store), all-reduces one float, checks it, and prints the wall
 * clock (CLOCK_REALTIME, ns) at which that first all_reduce ended, and when
 * main() began and dk_init returned (the phases of start-up), and how many
 * TCP connections it holds to other ranks (not the store) at that point. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "distkit/distkit.h"
#include "testing/c/host_tensor.h"
#include "testing/c/own_sockets.h"

/* Whether `fd` is a connected TCP socket to anything but the store's port
 * (*arg): a connection between ranks. */
static int IsPeerConnection(int fd, const void* arg) {
  const unsigned store_port = *(const unsigned*)arg;
  struct sockaddr_storage local, peer;
  socklen_t llen = sizeof(local), plen = sizeof(peer);
  return getsockname(fd, (struct sockaddr*)&local, &llen) == 0 &&
         getpeername(fd, (struct sockaddr*)&peer, &plen) == 0 &&
         dk_test_port_of(&local) != 0 &&
         dk_test_port_of(&local) != store_port &&
         dk_test_port_of(&peer) != store_port;
}

/* This process's connections to other ranks, leaving out those to and from
 * the store's port (MASTER_PORT). */
static long PeerConnections(void) {
  const char* master = getenv("MASTER_PORT");
  const unsigned store_port = master != NULL ? (unsigned)atoi(master) : 0;
  return dk_test_count_own_fds(IsPeerConnection, &store_port);
}

static long long NowNs(void) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

int main(void) {
  const long long main_ns = NowNs();
  dk_init_config_t cfg;
  dk_init_config_init(&cfg);
  cfg.timeout_ms = 600000;
  dk_group_t* world = NULL;
  dk_error_t* err = NULL;
  if (dk_init("pytorch", &cfg, &world, &err) != DK_OK) {
    fprintf(stderr, "init failed: %s\n", dk_error_message(err));
    return 3;
  }
  const long long init_end_ns = NowNs();
  float x = 1.0f;
  int64_t n = 1;
  DLTensor t = dk_test_float_vector(&x, &n);
  if (dk_group_all_reduce(world, &t, DK_OP_SUM, NULL, &err) != DK_OK) {
    fprintf(stderr, "all_reduce failed: %s\n", dk_error_message(err));
    return 3;
  }
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  if (x != (float)dk_group_size(world)) {
    fprintf(stderr, "wrong sum %f\n", x);
    return 4;
  }
  printf("first_all_reduce_end_ns=%lld\n",
         (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
  printf("main_ns=%lld\ninit_end_ns=%lld\n", main_ns, init_end_ns);
  printf("peer_connections=%ld\n", PeerConnections());
  dk_group_destroy(world);
  dk_shutdown();
  return 0;
}
