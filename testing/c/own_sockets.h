/* This process's own sockets, for the C programs that count the connections
 * distkit holds (capi/test/connections_c, tools/dkbench/startup_rank): a
 * socket address's port, and a count of the process's open descriptors that
 * a predicate accepts, read from /proc/self/fd (exactly: no other process's,
 * no estimate). The program defines _DEFAULT_SOURCE before its first
 * include (dirfd). */
#ifndef DISTKIT_TESTING_C_OWN_SOCKETS_H_
#define DISTKIT_TESTING_C_OWN_SOCKETS_H_

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

/* The port of a socket address, or 0 if it is not an IP address. */
static inline unsigned dk_test_port_of(const struct sockaddr_storage* a) {
  if (a->ss_family == AF_INET)
    return ntohs(((const struct sockaddr_in*)a)->sin_port);
  if (a->ss_family == AF_INET6)
    return ntohs(((const struct sockaddr_in6*)a)->sin6_port);
  return 0;
}

/* How many of this process's open descriptors `counted(fd, arg)` accepts
 * (it returns 1 or 0), leaving out the one that reads the list; -1 when
 * /proc/self/fd cannot be read. */
static inline long dk_test_count_own_fds(int (*counted)(int fd,
                                                        const void* arg),
                                         const void* arg) {
  DIR* d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  long count = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    const int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == dirfd(d)) continue;
    count += counted(fd, arg);
  }
  closedir(d);
  return count;
}

#endif /* DISTKIT_TESTING_C_OWN_SOCKETS_H_ */
