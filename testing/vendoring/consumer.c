/* A program in another Bazel workspace that vendors distkit: it links the C
 * ABI through @distkit//capi and uses it (a store it serves itself). */
#include <stdio.h>
#include <string.h>

#include "distkit/distkit.h"

int main(void) {
  dk_error_t* err = NULL;
  if (dk_init_version(DK_ABI_MAJOR, DK_ABI_MINOR, &err) != DK_OK) return 1;
  dk_store_config_t config;
  dk_store_config_init(&config);
  config.address = "127.0.0.1:0";
  config.token = "vendored";
  dk_store_t* store = NULL;
  if (dk_store_serve(&config, &store, &err) != DK_OK) {
    fprintf(stderr, "%s\n", dk_error_message(err));
    return 1;
  }
  void* value = NULL;
  size_t size = 0;
  int ok = dk_store_set(store, "greeting", "hello", 5, &err) == DK_OK &&
           dk_store_get(store, "greeting", &value, &size, &err) == DK_OK &&
           size == 5 && memcmp(value, "hello", 5) == 0;
  dk_free(value);
  dk_store_destroy(store);
  printf("vendored distkit ABI %d.%d: %s\n", DK_ABI_MAJOR, DK_ABI_MINOR,
         ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
