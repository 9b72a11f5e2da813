// store_bench_client: measures distkit Store round trips. Hosts a StoreServer
// in this process (as torch's TCPStore master does) and runs --clients
// threads, each with its own TcpStore connection, each doing --ops calls of
// --op (set, get or add). Prints one line: "<op> <clients> <ops_per_second>".

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/store/store_server.h"
#include "cc/store/tcp_store.h"

int main(int argc, char** argv) {
  std::string op = "set";
  int clients = 1, ops = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--op") op = argv[i + 1];
    if (flag == "--clients") clients = atoi(argv[i + 1]);
    if (flag == "--ops") ops = atoi(argv[i + 1]);
  }
  auto server = distkit::StoreServer::Start({"127.0.0.1:0", "bench-token"});
  if (!server.ok()) {
    fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  std::vector<std::unique_ptr<distkit::TcpStore>> conns;
  for (int c = 0; c < clients; ++c) {
    auto s = distkit::TcpStore::Connect({(*server)->address(), "bench-token"});
    if (!s.ok()) return 1;
    (void)(*s)->Set(absl::StrCat("key", c), "value-of-some-bytes");
    conns.push_back(*std::move(s));
  }
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      distkit::TcpStore& s = *conns[c];
      const std::string key = absl::StrCat("key", c);
      for (int i = 0; i < ops; ++i) {
        bool ok = true;
        if (op == "set") ok = s.Set(key, "value-of-some-bytes").ok();
        if (op == "get") ok = s.Get(key).ok();
        if (op == "add") ok = s.Add("counter", 1).ok();
        if (!ok) std::abort();
      }
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  printf("%s %d %.0f\n", op.c_str(), clients, clients * ops / seconds);
  return 0;
}
