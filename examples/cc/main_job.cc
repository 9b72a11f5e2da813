// The main job: every rank joins the job's Store, announces itself, waits for
// the others (a store barrier), and checks that all ranks agree on the roster.
// Launch: tools/run_main_job.sh (distrun, 4 local ranks). As distkit grows,
// this job grows with it.

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cc/launch/launcher.h"
#include "cc/store/grpc_store.h"
#include "cc/store/prefix_store.h"
#include "cc/store/store_server.h"

namespace {

int Fail(const absl::Status& s, int rank) {
  fprintf(stderr, "main_job rank %d: %s\n", rank, s.ToString().c_str());
  return 1;
}

}  // namespace

int main() {
  using namespace distkit;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const absl::Time start = absl::Now();
  Environment env = Environment::FromProcess();
  absl::StatusOr<RendezvousInfo> info =
      ParseRendezvous(InferLauncher(env), env);
  if (!info.ok()) return Fail(info.status(), -1);
  const int rank = info->rank;
  if (info->world_size == 1 && info->store_address.empty()) {
    printf("main_job: not distributed (launch with tools/run_main_job.sh)\n");
    return 0;
  }
  // Without distrun, rank 0 hosts the store itself.
  std::unique_ptr<StoreServer> server;
  if (info->host_store) {
    absl::StatusOr<std::unique_ptr<StoreServer>> s =
        StoreServer::Start({info->store_address, info->token});
    if (!s.ok()) return Fail(s.status(), rank);
    server = *std::move(s);
  }
  absl::StatusOr<std::unique_ptr<GrpcStore>> connected = GrpcStore::Connect(
      {info->store_address, info->token, absl::Seconds(60), absl::Seconds(60)});
  if (!connected.ok()) return Fail(connected.status(), rank);
  auto store = std::make_shared<PrefixStore>(
      "main_job", std::shared_ptr<Store>(*std::move(connected)));

  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::string me =
      absl::StrCat("rank ", rank, " on ", host, " pid ", getpid());
  if (absl::Status s = store->Set(absl::StrCat("member/", rank), me); !s.ok()) {
    return Fail(s, rank);
  }
  // Barrier: count arrivals, then wait for the last one's flag.
  absl::StatusOr<int64_t> arrived = store->Add("arrived", 1);
  if (!arrived.ok()) return Fail(arrived.status(), rank);
  if (*arrived == info->world_size) (void)store->Set("all_arrived", "1");
  if (absl::Status s = store->Wait({"all_arrived"}); !s.ok())
    return Fail(s, rank);

  std::vector<std::string> keys;
  for (int r = 0; r < info->world_size; ++r)
    keys.push_back(absl::StrCat("member/", r));
  absl::StatusOr<std::vector<std::string>> roster = store->MultiGet(keys);
  if (!roster.ok()) return Fail(roster.status(), rank);
  const std::string digest = absl::StrJoin(*roster, "|");
  // Every rank publishes what it saw; rank 0 checks they all agree.
  (void)store->Set(absl::StrCat("seen/", rank), digest);
  if (rank == 0) {
    printf("main_job: %d ranks joined the store at %s\n", info->world_size,
           info->store_address.c_str());
    for (const std::string& m : *roster) printf("  %s\n", m.c_str());
    std::vector<std::string> seen_keys;
    for (int r = 0; r < info->world_size; ++r)
      seen_keys.push_back(absl::StrCat("seen/", r));
    absl::StatusOr<std::vector<std::string>> seen = store->MultiGet(seen_keys);
    if (!seen.ok()) return Fail(seen.status(), rank);
    for (int r = 0; r < info->world_size; ++r) {
      if ((*seen)[r] != digest) {
        fprintf(stderr, "main_job: rank %d saw a different roster\n", r);
        return 1;
      }
    }
    printf("main_job: every rank saw the same roster; done in %.2f s\n",
           absl::ToDoubleSeconds(absl::Now() - start));
    (void)store->Set("verified", "1");
  }
  if (absl::Status s = store->Wait({"verified"}); !s.ok()) return Fail(s, rank);
  return 0;
}
