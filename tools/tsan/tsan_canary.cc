// Proves tools/tsan/run_tsan.sh's configuration before it is trusted:
//   tsan_canary race   two threads write one int unguarded: TSan must report
//   tsan_canary mutex  the same writes under absl::Mutex: TSan must not (it
//                      does with Debian's uninstrumented Abseil, which is why
//                      run_tsan.sh loads a TSan build of it)
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/synchronization/mutex.h"

namespace {

int counter = 0;
absl::Mutex mu;

void Bump(bool locked) {
  for (int i = 0; i < 100000; ++i) {
    if (locked) {
      absl::MutexLock lock(&mu);
      ++counter;
    } else {
      ++counter;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || (std::strcmp(argv[1], "race") != 0 &&
                    std::strcmp(argv[1], "mutex") != 0)) {
    std::fprintf(stderr, "usage: tsan_canary race|mutex\n");
    return 2;
  }
  const bool locked = std::strcmp(argv[1], "mutex") == 0;
  std::thread a(Bump, locked), b(Bump, locked);
  a.join();
  b.join();
  std::printf("counter %d\n", counter);
  return 0;
}
