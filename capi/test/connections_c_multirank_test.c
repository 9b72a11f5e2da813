/* Connections on demand, counted from /proc in a real job: on one host,
 * where shared memory carries the collectives, a group opens no TCP
 * connection between ranks until something needs one. A send / recv
 * connects that pair only; collectives of any size (a gather larger than a
 * shared-memory slot here) connect nothing more. Nor does such a group
 * listen on a TCP port (Gloo 0.5 listens per pair, until the pair connects)
 * or run Gloo's event-loop thread ("dk-gloo-loop") before its first send /
 * recv; after it, the ranks that sent or received have the thread, the others
 * still not. With DISTKIT_SHM=0 (every
 * collective over TCP) the full mesh is there from the start. Connections to
 * the job's store (DISTKIT_STORE's port) are not counted. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "distkit/distkit.h"
#include "testing/c/declared_hosts.h"
#include "testing/c/host_tensor.h"
#include "testing/c/own_sockets.h"
#include "testing/c/rank_check.h"

/* dk_test_check, with the numbers it compared. */
static void check_count(int ok, const char* what, long got, long want) {
  if (!ok) {
    fprintf(stderr, "rank %d: %s: got %ld, want %ld\n", dk_test_rank, what, got,
            want);
  }
  dk_test_check(ok, what);
}

/* Whether `fd` is a TCP socket of this process's that counts as `kind`,
 * leaving out the store's port: an established connection, or a socket
 * that listens. */
enum socket_kind { ESTABLISHED, LISTENING };
struct counted {
  enum socket_kind kind;
  unsigned store_port;
};

static int is_counted(int fd, const void* arg) {
  const enum socket_kind kind = ((const struct counted*)arg)->kind;
  const unsigned store_port = ((const struct counted*)arg)->store_port;
  int type = 0;
  socklen_t len = sizeof(type);
  struct sockaddr_storage local, peer;
  socklen_t llen = sizeof(local), plen = sizeof(peer);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
      type != SOCK_STREAM ||
      getsockname(fd, (struct sockaddr*)&local, &llen) != 0 ||
      dk_test_port_of(&local) == 0 || dk_test_port_of(&local) == store_port) {
    return 0; /* not TCP, or the store's */
  }
  if (kind == LISTENING) {
    int listening = 0;
    socklen_t alen = sizeof(listening);
    return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &alen) == 0 &&
           listening;
  }
  struct tcp_info info;
  socklen_t ilen = sizeof(info);
  return getpeername(fd, (struct sockaddr*)&peer, &plen) == 0 &&
         dk_test_port_of(&peer) != store_port &&
         getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &ilen) == 0 &&
         info.tcpi_state == TCP_ESTABLISHED;
}

/* This process's TCP sockets of `kind` (read from its own descriptors,
 * exactly), except those to, from or of the store's port. */
static long tcp_sockets(enum socket_kind kind, unsigned store_port) {
  const struct counted what = {kind, store_port};
  return dk_test_count_own_fds(is_counted, &what);
}

static long peer_connections(unsigned store_port) {
  return tcp_sockets(ESTABLISHED, store_port);
}

static long listening_sockets(unsigned store_port) {
  return tcp_sockets(LISTENING, store_port);
}

/* This process's threads named `name` (/proc/self/task/N/comm). */
static long threads_named(const char* name) {
  DIR* d = opendir("/proc/self/task");
  if (d == NULL) return -1;
  long count = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[300], comm[32] = {0};
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
    FILE* f = fopen(path, "r");
    if (f == NULL) continue; /* the thread has ended */
    if (fgets(comm, sizeof(comm), f) != NULL) {
      comm[strcspn(comm, "\n")] = '\0';
      count += strcmp(comm, name) == 0;
    }
    fclose(f);
  }
  closedir(d);
  return count;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char* store = getenv("DISTKIT_STORE");
  const char* colon = store != NULL ? strrchr(store, ':') : NULL;
  if (colon == NULL) {
    fprintf(stderr, "DISTKIT_STORE is not host:port (run under distrun)\n");
    return 1;
  }
  const unsigned store_port = (unsigned)atoi(colon + 1);
  const char* shm = getenv("DISTKIT_SHM");
  const int on_shm = shm == NULL || strcmp(shm, "0") != 0;
  /* DISTKIT_TEST_HOSTS=H: the ranks declare H "hosts" of consecutive ranks
   * (testing/c/declared_hosts.h). Across hosts each host's leader (its
   * lowest rank) connects to the other leaders at start; the rest connect on
   * demand, as on one host. One rank per host is flat TCP: the full mesh
   * from the start. */
  const int env_rank = atoi(getenv("RANK") ? getenv("RANK") : "0");
  const int env_size = atoi(getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "1");
  const int declared = dk_test_declare_hosts(env_rank, env_size);
  int hosts = 1, leader = env_rank == 0;
  if (declared > 0) {
    hosts = 0;
    for (int r = 0; r < env_size; ++r) {
      const int h = r * declared / env_size;
      const int first = r == 0 || (r - 1) * declared / env_size != h;
      hosts += first;
      if (r == env_rank) leader = first;
    }
  }
  const int flat = !on_shm || (hosts > 1 && hosts == env_size);
  const long leader_links = hosts > 1 && !flat && leader ? hosts - 1 : 0;
  dk_group_t* world = dk_test_init(NULL, 30000);
  dk_error_t* err = NULL;
  const int size = dk_group_size(world);

  float x = (float)(dk_test_rank + 1);
  int64_t one = 1;
  DLTensor t = dk_test_float_vector(&x, &one);
  if (dk_group_all_reduce(world, &t, DK_OP_SUM, NULL, &err) != DK_OK)
    dk_test_die("all_reduce", err);
  check_count(x == (float)(size * (size + 1) / 2), "all_reduce sum", (long)x,
              size * (size + 1) / 2);
  const long after_init = peer_connections(store_port);
  printf("rank %d of %d: %ld peer connections after init + all_reduce\n",
         dk_test_rank, size, after_init);
  const long want_init = flat ? size - 1 : leader_links;
  check_count(after_init == want_init,
              "peer connections after init + all_reduce", after_init,
              want_init);
  /* One host on shared memory: no Gloo device yet, so no loop thread, and
   * no pair, so no port. (Over TCP, or across hosts, Gloo is made at
   * init.) */
  const int same_host_shm = on_shm && hosts == 1 && size >= 2;
  if (same_host_shm) {
    check_count(listening_sockets(store_port) == 0,
                "TCP ports listened on after init + all_reduce",
                listening_sockets(store_port), 0);
    check_count(threads_named("dk-gloo-loop") == 0,
                "Gloo loop threads after init + all_reduce",
                threads_named("dk-gloo-loop"), 0);
  }

  if (size >= 2 && dk_test_rank <= 1) {
    float v = dk_test_rank == 0 ? 42.0f : 0.0f;
    DLTensor m = dk_test_float_vector(&v, &one);
    dk_status_t s = dk_test_rank == 0
                        ? dk_group_send(world, &m, 1, 7, NULL, &err)
                        : dk_group_recv(world, &m, 0, 7, NULL, &err);
    if (s != DK_OK) dk_test_die("send/recv", err);
    check_count(v == 42.0f, "the received value", (long)v, 42);
  }
  if (dk_group_barrier(world, NULL, &err) != DK_OK) dk_test_die("barrier", err);
  const long after_p2p = peer_connections(store_port);
  const long want_p2p =
      flat ? size - 1 : leader_links + (size >= 2 && dk_test_rank <= 1);
  check_count(after_p2p == want_p2p, "peer connections after one send/recv",
              after_p2p, want_p2p);
  if (same_host_shm) {
    /* Ranks 0 and 1 made their Gloo device for the send / recv. */
    const long sent = dk_test_rank <= 1;
    check_count(threads_named("dk-gloo-loop") == sent,
                "Gloo loop threads after one send/recv",
                threads_named("dk-gloo-loop"), sent);
  }

  /* Larger than a shared-memory slot (1 MiB): still no TCP on one host. */
  int64_t part = 300000;
  float* mine = malloc((size_t)part * sizeof(float));
  for (int64_t i = 0; i < part; ++i)
    mine[i] = (float)(dk_test_rank * 1000 + i % 97);
  float* all = calloc((size_t)(size * part), sizeof(float));
  int64_t n_all = size * part;
  DLTensor in = dk_test_float_vector(mine, &part),
           out = dk_test_float_vector(all, &n_all);
  if (dk_group_gather(world, &in, dk_test_rank == 0 ? &out : NULL, 0, NULL,
                      &err) != DK_OK)
    dk_test_die("gather", err);
  if (dk_test_rank == 0) {
    for (int r = 0; r < size; ++r) {
      for (int64_t i = 0; i < part; i += 4999) {
        const float want = (float)(r * 1000 + i % 97);
        check_count(all[r * part + i] == want, "gathered value",
                    (long)all[r * part + i], (long)want);
      }
    }
  }
  free(mine);
  free(all);
  const long after_gather = peer_connections(store_port);
  printf("rank %d of %d: %ld after one send/recv, %ld after a gather\n",
         dk_test_rank, size, after_p2p, after_gather);
  /* Across hosts a gather goes over the group of every rank: its pairs. */
  const long want_gather =
      flat ? size - 1 : (hosts > 1 ? leader_links + size - 1 : want_p2p);
  check_count(after_gather == want_gather, "peer connections after a gather",
              after_gather, want_gather);
  /* Nobody closes a connection before every rank has counted. */
  if (dk_group_barrier(world, NULL, &err) != DK_OK) dk_test_die("barrier", err);

  dk_group_destroy(world);
  dk_shutdown();
  return dk_test_failures == 0 ? 0 : 1;
}
