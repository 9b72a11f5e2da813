/* DISTKIT_TEST_HOSTS=H in a C test program: the ranks declare H "hosts" of
 * consecutive ranks (DISTKIT_HOST_ID "test-host-<rank * H / size>", the rule
 * testing/cc/rank_env.cc follows for the C++ checks), so one machine runs the
 * path across hosts. Called before the job is joined. The including file
 * asks for POSIX first (_POSIX_C_SOURCE 200809L or _DEFAULT_SOURCE), for
 * setenv. */
#ifndef DISTKIT_TESTING_C_DECLARED_HOSTS_H_
#define DISTKIT_TESTING_C_DECLARED_HOSTS_H_

#include <stdio.h>
#include <stdlib.h>

/* H, or 0 when the variable is unset or not positive (nothing declared);
 * `rank` of `size` is this rank's world rank and the world's size. */
static inline int dk_test_declare_hosts(int rank, int size) {
  const char* value = getenv("DISTKIT_TEST_HOSTS");
  const int hosts = value != NULL ? atoi(value) : 0;
  if (hosts <= 0 || size <= 0) return 0;
  char id[32];
  snprintf(id, sizeof(id), "test-host-%d", rank * hosts / size);
  setenv("DISTKIT_HOST_ID", id, 1);
  return hosts;
}

#endif /* DISTKIT_TESTING_C_DECLARED_HOSTS_H_ */
