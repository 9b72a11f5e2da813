/* One rank of tools/dkbench/startup_bench.py, distkit's side: joins the job
 * (dk_init("pytorch"): RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; rank 0
 * hosts the store), all-reduces one float, checks it, and prints the wall
 * clock (CLOCK_REALTIME, ns) at which that first all_reduce ended, and when
 * main() began and dk_init returned (the phases of start-up), and how many
 * TCP connections it holds to other ranks (not the store) at that point. */
#define _DEFAULT_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "distkit/distkit.h"
#include "testing/c/host_tensor.h"

static unsigned PortOf(const struct sockaddr_storage* a) {
  if (a->ss_family == AF_INET)
    return ntohs(((const struct sockaddr_in*)a)->sin_port);
  if (a->ss_family == AF_INET6)
    return ntohs(((const struct sockaddr_in6*)a)->sin6_port);
  return 0;
}

/* This process's connected TCP sockets to anything but the store's port
 * (MASTER_PORT): the connections between ranks. */
static long PeerConnections(void) {
  const char* master = getenv("MASTER_PORT");
  const unsigned store_port = master != NULL ? (unsigned)atoi(master) : 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  long count = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    const int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == dirfd(d)) continue;
    struct sockaddr_storage local, peer;
    socklen_t llen = sizeof(local), plen = sizeof(peer);
    if (getsockname(fd, (struct sockaddr*)&local, &llen) != 0 ||
        getpeername(fd, (struct sockaddr*)&peer, &plen) != 0 ||
        PortOf(&local) == 0 || PortOf(&local) == store_port ||
        PortOf(&peer) == store_port) {
      continue;
    }
    ++count;
  }
  closedir(d);
  return count;
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
