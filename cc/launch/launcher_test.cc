#include "cc/launch/launcher.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

using ::testing::AllOf;
using ::testing::Field;
using ::testing::Matcher;

Environment Env(std::map<std::string, std::string> vars) {
  return Environment(std::move(vars));
}

// A RendezvousInfo that places this process at `rank` of `world_size`,
// `local_rank` of `local_world_size` on node `node_rank` (failures name the
// field).
Matcher<const RendezvousInfo&> PlacedAt(int rank, int world_size,
                                        int local_rank, int local_world_size,
                                        int node_rank) {
  return AllOf(Field("rank", &RendezvousInfo::rank, rank),
               Field("world_size", &RendezvousInfo::world_size, world_size),
               Field("local_rank", &RendezvousInfo::local_rank, local_rank),
               Field("local_world_size", &RendezvousInfo::local_world_size,
                     local_world_size),
               Field("node_rank", &RendezvousInfo::node_rank, node_rank));
}

TEST(LauncherTest, InferFollowsMmenginePrecedence) {
  EXPECT_EQ(InferLauncher(Env({})), Launcher::kNone);
  EXPECT_EQ(InferLauncher(Env({{"OMPI_COMM_WORLD_LOCAL_RANK", "0"}})),
            Launcher::kMpi);
  EXPECT_EQ(InferLauncher(Env(
                {{"SLURM_NTASKS", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}})),
            Launcher::kSlurm);
  EXPECT_EQ(InferLauncher(Env({{"WORLD_SIZE", "2"}, {"SLURM_NTASKS", "2"}})),
            Launcher::kPytorch);
}

TEST(LauncherTest, NamesRoundTrip) {
  for (Launcher l : {Launcher::kNone, Launcher::kPytorch, Launcher::kSlurm,
                     Launcher::kMpi, Launcher::kDistrun}) {
    EXPECT_EQ(*ParseLauncher(LauncherName(l)), l);
  }
  EXPECT_EQ(ParseLauncher("k8s").status().message(),
            "Invalid launcher type: k8s");
}

TEST(LauncherTest, NoneIsRankZeroOfOne) {
  RendezvousInfo info = *ParseRendezvous(Launcher::kNone, Env({}));
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_TRUE(info.store_address.empty());
}

TEST(LauncherTest, Pytorch) {
  auto env = Env({{"RANK", "3"},
                  {"WORLD_SIZE", "4"},
                  {"LOCAL_RANK", "1"},
                  {"LOCAL_WORLD_SIZE", "2"},
                  {"GROUP_RANK", "1"},
                  {"MASTER_ADDR", "10.0.0.1"},
                  {"MASTER_PORT", "29400"}});
  RendezvousInfo info = *ParseRendezvous(Launcher::kPytorch, env);
  EXPECT_THAT(info, PlacedAt(/*rank=*/3, /*world_size=*/4, /*local_rank=*/1,
                             /*local_world_size=*/2, /*node_rank=*/1));
  EXPECT_EQ(info.store_address, "10.0.0.1:29400");
  EXPECT_FALSE(info.host_store);
  env.Set("RANK", "0");
  EXPECT_TRUE(ParseRendezvous(Launcher::kPytorch, env)->host_store);
  // torchrun's agent store holds MASTER_PORT; distkit's goes one above.
  env.Set("TORCHELASTIC_USE_AGENT_STORE", "True");
  EXPECT_EQ(ParseRendezvous(Launcher::kPytorch, env)->store_address,
            "10.0.0.1:29401");
}

TEST(LauncherTest, DistrunStoreWins) {
  auto env = Env({{"RANK", "1"},
                  {"WORLD_SIZE", "2"},
                  {"LOCAL_RANK", "1"},
                  {"DISTKIT_STORE", "127.0.0.1:4000"},
                  {"DISTKIT_TOKEN", "t0k"}});
  for (Launcher l : {Launcher::kPytorch, Launcher::kDistrun}) {
    RendezvousInfo info = *ParseRendezvous(l, env);
    EXPECT_EQ(info.store_address, "127.0.0.1:4000");
    EXPECT_EQ(info.token, "t0k");
    EXPECT_FALSE(info.host_store);
  }
  env = Env({{"RANK", "0"},
             {"WORLD_SIZE", "1"},
             {"LOCAL_RANK", "0"},
             {"MASTER_ADDR", "h"},
             {"MASTER_PORT", "1"}});
  absl::Status s = ParseRendezvous(Launcher::kDistrun, env).status();
  EXPECT_NE(s.message().find("DISTKIT_STORE"), absl::string_view::npos) << s;
}

TEST(LauncherTest, PytorchErrorsNameTheVariable) {
  absl::Status s =
      ParseRendezvous(Launcher::kPytorch, Env({{"WORLD_SIZE", "2"}})).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "launcher 'pytorch': environment variable RANK is not set");
  s = ParseRendezvous(
          Launcher::kPytorch,
          Env({{"RANK", "x1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}))
          .status();
  EXPECT_EQ(
      s.message(),
      "launcher 'pytorch': environment variable RANK='x1' is not an integer");
  s = ParseRendezvous(Launcher::kPytorch, Env({{"RANK", "2"},
                                               {"WORLD_SIZE", "2"},
                                               {"LOCAL_RANK", "0"},
                                               {"MASTER_ADDR", "a"},
                                               {"MASTER_PORT", "1"}}))
          .status();
  EXPECT_NE(s.message().find("rank 2 is outside [0, 2)"),
            absl::string_view::npos)
      << s;
  s = ParseRendezvous(Launcher::kPytorch, Env({{"RANK", "0"},
                                               {"WORLD_SIZE", "2"},
                                               {"LOCAL_RANK", "0"},
                                               {"MASTER_PORT", "1"}}))
          .status();
  EXPECT_NE(s.message().find("MASTER_ADDR is not set"), absl::string_view::npos)
      << s;
}

// A value beyond int is an error naming it, not read modulo 2^32.
TEST(LauncherTest, OutOfRangeIntegersNameTheVariable) {
  auto env = Env({{"RANK", "4294967297"},
                  {"WORLD_SIZE", "2"},
                  {"LOCAL_RANK", "0"},
                  {"MASTER_ADDR", "a"},
                  {"MASTER_PORT", "29500"}});
  absl::Status s = ParseRendezvous(Launcher::kPytorch, env).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("RANK=4294967297 is out of range"),
            absl::string_view::npos)
      << s;
  env.Set("RANK", "1");
  env.Set("MASTER_PORT", "4294996796");
  s = ParseRendezvous(Launcher::kPytorch, env).status();
  EXPECT_NE(s.message().find("MASTER_PORT=4294996796 is out of range"),
            absl::string_view::npos)
      << s;
  // torchrun's agent store on the last port leaves none for distkit's.
  env.Set("MASTER_PORT", "65535");
  EXPECT_TRUE(ParseRendezvous(Launcher::kPytorch, env).ok());
  env.Set("TORCHELASTIC_USE_AGENT_STORE", "True");
  s = ParseRendezvous(Launcher::kPytorch, env).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("MASTER_PORT=65535"), absl::string_view::npos)
      << s;
  // Unless distrun's store is used instead.
  env.Set("DISTKIT_STORE", "127.0.0.1:4000");
  EXPECT_EQ(ParseRendezvous(Launcher::kPytorch, env)->store_address,
            "127.0.0.1:4000");
}

TEST(LauncherTest, SlurmParsesHostlistNatively) {
  auto env = Env({{"SLURM_PROCID", "5"},
                  {"SLURM_NTASKS", "8"},
                  {"SLURM_LOCALID", "1"},
                  {"SLURM_NODELIST", "node[03-06]"},
                  {"SLURM_NTASKS_PER_NODE", "2(x4)"},
                  {"SLURM_NODEID", "2"}});
  RendezvousInfo info = *ParseRendezvous(Launcher::kSlurm, env);
  EXPECT_THAT(info, PlacedAt(/*rank=*/5, /*world_size=*/8, /*local_rank=*/1,
                             /*local_world_size=*/2, /*node_rank=*/2));
  EXPECT_EQ(info.master_addr, "node03");
  EXPECT_EQ(info.master_port, 29500);
  EXPECT_EQ(info.store_address, "node03:29500");
  // Port: MASTER_PORT, then the explicit argument wins.
  env.Set("MASTER_PORT", "1234");
  EXPECT_EQ(ParseRendezvous(Launcher::kSlurm, env)->master_port, 1234);
  ParseOptions with_port;
  with_port.port = 4321;
  EXPECT_EQ(ParseRendezvous(Launcher::kSlurm, env, with_port)->master_port,
            4321);
  // An existing MASTER_ADDR is kept.
  env.Set("MASTER_ADDR", "head");
  EXPECT_EQ(ParseRendezvous(Launcher::kSlurm, env)->store_address, "head:1234");
}

TEST(LauncherTest, SlurmLocalRankFallsBackToDevices) {
  auto env = Env({{"SLURM_PROCID", "5"},
                  {"SLURM_NTASKS", "8"},
                  {"SLURM_NODELIST", "a,b"}});
  ParseOptions opts;
  opts.num_devices = 4;
  EXPECT_EQ(ParseRendezvous(Launcher::kSlurm, env, opts)->local_rank, 1);
  EXPECT_EQ(ParseRendezvous(Launcher::kSlurm, env)->local_rank, 0);
  env.Set("SLURM_NODELIST", "a[1-");
  absl::Status s = ParseRendezvous(Launcher::kSlurm, env).status();
  EXPECT_NE(s.message().find("SLURM_NODELIST"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("malformed hostlist"), absl::string_view::npos)
      << s;
}

// Nodes with different task counts: LOCAL_WORLD_SIZE is this node's
// (SLURM_NODEID's), not the first node's.
TEST(LauncherTest, SlurmLocalWorldSizeIsThisNodes) {
  auto env = Env({{"SLURM_PROCID", "6"},
                  {"SLURM_NTASKS", "7"},
                  {"SLURM_LOCALID", "0"},
                  {"SLURM_NODELIST", "n[1-4]"},
                  {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                  {"SLURM_NODEID", "3"}});
  EXPECT_THAT(*ParseRendezvous(Launcher::kSlurm, env),
              PlacedAt(/*rank=*/6, /*world_size=*/7, /*local_rank=*/0,
                       /*local_world_size=*/1, /*node_rank=*/3));
  env.Set("SLURM_NODEID", "1");
  env.Set("SLURM_PROCID", "3");
  env.Set("SLURM_LOCALID", "1");
  EXPECT_EQ(ParseRendezvous(Launcher::kSlurm, env)->local_world_size, 2);
  env = Env({{"SLURM_PROCID", "4"},
             {"SLURM_NTASKS", "5"},
             {"SLURM_LOCALID", "0"},
             {"SLURM_NODELIST", "a,b"},
             {"SLURM_TASKS_PER_NODE", "4,1"},
             {"SLURM_NODEID", "1"}});
  EXPECT_THAT(*ParseRendezvous(Launcher::kSlurm, env),
              PlacedAt(/*rank=*/4, /*world_size=*/5, /*local_rank=*/0,
                       /*local_world_size=*/1, /*node_rank=*/1));
  // A local rank beyond this node's tasks, a node beyond the list, or
  // unequal nodes without SLURM_NODEID: errors naming the variables.
  env.Set("SLURM_LOCALID", "1");
  absl::Status s = ParseRendezvous(Launcher::kSlurm, env).status();
  EXPECT_NE(s.message().find("SLURM_LOCALID=1"), absl::string_view::npos) << s;
  env.Set("SLURM_LOCALID", "0");
  env.Set("SLURM_NODEID", "2");
  s = ParseRendezvous(Launcher::kSlurm, env).status();
  EXPECT_NE(s.message().find("SLURM_NODEID=2"), absl::string_view::npos) << s;
  env = Env({{"SLURM_PROCID", "4"},
             {"SLURM_NTASKS", "5"},
             {"SLURM_NODELIST", "a,b"},
             {"SLURM_TASKS_PER_NODE", "4,1"}});
  s = ParseRendezvous(Launcher::kSlurm, env).status();
  EXPECT_NE(s.message().find("SLURM_NODEID is not set"),
            absl::string_view::npos)
      << s;
  env.Set("SLURM_TASKS_PER_NODE", "4(x");
  s = ParseRendezvous(Launcher::kSlurm, env).status();
  EXPECT_NE(s.message().find("SLURM_TASKS_PER_NODE='4(x' is malformed"),
            absl::string_view::npos)
      << s;
}

TEST(LauncherTest, Mpi) {
  auto env = Env({{"OMPI_COMM_WORLD_RANK", "2"},
                  {"OMPI_COMM_WORLD_SIZE", "3"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}});
  absl::Status s = ParseRendezvous(Launcher::kMpi, env).status();
  EXPECT_EQ(s.message(),
            "launcher 'mpi': The environment variable MASTER_ADDR is not set");
  env.Set("MASTER_ADDR", "127.0.0.1");
  RendezvousInfo info = *ParseRendezvous(Launcher::kMpi, env);
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.world_size, 3);
  EXPECT_EQ(info.local_rank, 2);
  EXPECT_EQ(info.store_address, "127.0.0.1:29500");
  // PMI variables (MPICH, Hydra).
  auto pmi = Env({{"PMI_RANK", "1"},
                  {"PMI_SIZE", "2"},
                  {"MPI_LOCALRANKID", "1"},
                  {"MPI_LOCALNRANKS", "2"},
                  {"MASTER_ADDR", "h"},
                  {"MASTER_PORT", "7"}});
  info = *ParseRendezvous(Launcher::kMpi, pmi);
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.world_size, 2);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 2);
  EXPECT_EQ(info.store_address, "h:7");
}

// PMI without MPI_LOCALRANKID: an error naming it, not local rank 0 on
// every rank (which put a node's ranks all on one device).
TEST(LauncherTest, PmiWithoutLocalRankIdNamesIt) {
  auto pmi = Env({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MASTER_ADDR", "h"}});
  for (absl::Status s : {ParseRendezvous(Launcher::kMpi, pmi).status(),
                         ParseMpiPlacement(pmi).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("MPI_LOCALRANKID"), absl::string_view::npos)
        << s;
  }
  // srun's PMI plugins give SLURM_LOCALID instead.
  auto srun = Env({{"PMI_RANK", "3"},
                   {"PMI_SIZE", "4"},
                   {"SLURM_LOCALID", "1"},
                   {"MASTER_ADDR", "h"}});
  absl::StatusOr<RendezvousInfo> info = ParseMpiPlacement(srun);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->local_rank, 1);
}

// An empty DISTKIT_STORE is no store address: the checks and the store's
// placement agree, and the error names what is missing.
TEST(LauncherTest, EmptyDistkitStoreCountsAsUnset) {
  auto env = Env({{"RANK", "0"},
                  {"WORLD_SIZE", "2"},
                  {"LOCAL_RANK", "0"},
                  {"DISTKIT_STORE", ""}});
  absl::Status s = ParseRendezvous(Launcher::kPytorch, env).status();
  EXPECT_NE(s.message().find("MASTER_ADDR"), absl::string_view::npos) << s;
  s = ParseRendezvous(Launcher::kDistrun, env).status();
  EXPECT_NE(s.message().find("DISTKIT_STORE is not set"),
            absl::string_view::npos)
      << s;
  env.Set("MASTER_ADDR", "h");
  env.Set("MASTER_PORT", "7");
  RendezvousInfo info = *ParseRendezvous(Launcher::kPytorch, env);
  EXPECT_EQ(info.store_address, "h:7");
  EXPECT_TRUE(info.host_store);
  auto mpi = Env({{"OMPI_COMM_WORLD_RANK", "0"},
                  {"OMPI_COMM_WORLD_SIZE", "2"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                  {"DISTKIT_STORE", ""}});
  s = ParseRendezvous(Launcher::kMpi, mpi).status();
  EXPECT_NE(s.message().find("MASTER_ADDR is not set"), absl::string_view::npos)
      << s;
}

// srun -n 6 --ntasks-per-node=4 on two nodes: SLURM_NTASKS_PER_NODE=4 is
// the request, SLURM_TASKS_PER_NODE=4,2 what the nodes got; node 1 has 2.
TEST(LauncherTest, SlurmTasksPerNodeWinsOverTheRequest) {
  auto env = Env({{"SLURM_PROCID", "5"},
                  {"SLURM_NTASKS", "6"},
                  {"SLURM_NODELIST", "n[1-2]"},
                  {"SLURM_LOCALID", "1"},
                  {"SLURM_NODEID", "1"},
                  {"SLURM_NTASKS_PER_NODE", "4"},
                  {"SLURM_TASKS_PER_NODE", "4,2"}});
  EXPECT_THAT(*ParseRendezvous(Launcher::kSlurm, env),
              PlacedAt(/*rank=*/5, /*world_size=*/6, /*local_rank=*/1,
                       /*local_world_size=*/2, /*node_rank=*/1));
  env.Set("SLURM_NODEID", "0");
  env.Set("SLURM_PROCID", "3");
  env.Set("SLURM_LOCALID", "3");
  EXPECT_EQ(ParseRendezvous(Launcher::kSlurm, env)->local_world_size, 4);
  // Only the request known: it is used.
  env = Env({{"SLURM_PROCID", "3"},
             {"SLURM_NTASKS", "8"},
             {"SLURM_NODELIST", "n[1-2]"},
             {"SLURM_LOCALID", "3"},
             {"SLURM_NODEID", "0"},
             {"SLURM_NTASKS_PER_NODE", "4"}});
  EXPECT_EQ(ParseRendezvous(Launcher::kSlurm, env)->local_world_size, 4);
}

// SLURM_NODEID outside the node list (or negative), and a negative
// GROUP_RANK: errors naming them, even where every node runs as many tasks.
TEST(LauncherTest, NodeRankOutOfRangeIsAnError) {
  auto env = Env({{"SLURM_PROCID", "1"},
                  {"SLURM_NTASKS", "4"},
                  {"SLURM_NODELIST", "n[1-2]"},
                  {"SLURM_LOCALID", "1"},
                  {"SLURM_TASKS_PER_NODE", "2(x2)"}});
  for (const char* id : {"-1", "2", "5"}) {
    env.Set("SLURM_NODEID", id);
    absl::Status s = ParseRendezvous(Launcher::kSlurm, env).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_NE(s.message().find(absl::StrCat("SLURM_NODEID=", id)),
              absl::string_view::npos)
        << s;
  }
  env.Set("SLURM_NODEID", "1");
  EXPECT_EQ(ParseRendezvous(Launcher::kSlurm, env)->node_rank, 1);
  auto torch = Env({{"RANK", "0"},
                    {"WORLD_SIZE", "2"},
                    {"LOCAL_RANK", "0"},
                    {"MASTER_ADDR", "h"},
                    {"MASTER_PORT", "1"},
                    {"GROUP_RANK", "-3"}});
  absl::Status s = ParseRendezvous(Launcher::kPytorch, torch).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("node rank -3"), absl::string_view::npos) << s;
}

TEST(LauncherTest, TorchrunVariablesAsMmengineExports) {
  auto env = Env({{"SLURM_PROCID", "5"},
                  {"SLURM_NTASKS", "8"},
                  {"SLURM_LOCALID", "1"},
                  {"SLURM_NODELIST", "node[03-06]"},
                  {"SLURM_NTASKS_PER_NODE", "2(x4)"}});
  std::map<std::string, std::string> vars =
      TorchrunVariables(*ParseRendezvous(Launcher::kSlurm, env));
  std::map<std::string, std::string> want = {{"RANK", "5"},
                                             {"WORLD_SIZE", "8"},
                                             {"LOCAL_RANK", "1"},
                                             {"LOCAL_WORLD_SIZE", "2"},
                                             {"MASTER_ADDR", "node03"},
                                             {"MASTER_PORT", "29500"}};
  EXPECT_EQ(vars, want);
  // The mpi backend's own placement has no store: no address to export.
  auto mpi = Env({{"OMPI_COMM_WORLD_RANK", "2"},
                  {"OMPI_COMM_WORLD_SIZE", "3"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}});
  vars = TorchrunVariables(*ParseMpiPlacement(mpi));
  EXPECT_EQ(vars.count("MASTER_ADDR"), 0u);
  EXPECT_EQ(vars["RANK"], "2");
  EXPECT_EQ(vars["WORLD_SIZE"], "3");
  EXPECT_EQ(vars["LOCAL_RANK"], "0");
}

// Open MPI's OMPI_COMM_WORLD_NODE_RANK is a rank among the node's processes
// (rank 1 of `mpirun -np 2` on one host has 1), not the node's index: read
// as one, init_local_group(node_rank, local_world_size) asked rank 1 for
// ranks [2, 4) of 2. The node is derived from the block of ranks instead.
TEST(LauncherTest, MpiNodeRankIsNotOmpisNodeRank) {
  // Rank 1 of `mpirun -np 2` on one host: its real variables.
  auto env = Env({{"OMPI_COMM_WORLD_RANK", "1"},
                  {"OMPI_COMM_WORLD_SIZE", "2"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                  {"OMPI_COMM_WORLD_NODE_RANK", "1"},
                  {"MASTER_ADDR", "h"}});
  EXPECT_THAT(*ParseMpiPlacement(env),
              PlacedAt(/*rank=*/1, /*world_size=*/2, /*local_rank=*/1,
                       /*local_world_size=*/2, /*node_rank=*/0));
  EXPECT_EQ(ParseRendezvous(Launcher::kMpi, env)->node_rank, 0);
  // Rank 5 of 3 nodes x 2 (by slot): node 2, whatever NODE_RANK says.
  env = Env({{"OMPI_COMM_WORLD_RANK", "5"},
             {"OMPI_COMM_WORLD_SIZE", "6"},
             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
             {"OMPI_COMM_WORLD_NODE_RANK", "1"},
             {"MASTER_ADDR", "h"}});
  EXPECT_EQ(ParseMpiPlacement(env)->node_rank, 2);
  // --map-by node: rank 1 is local rank 0 of node 1, its node's ranks are
  // 1 and 3; no block holds them, so the node is unknown, and the rest of
  // the placement still parses.
  env.Set("OMPI_COMM_WORLD_RANK", "1");
  env.Set("OMPI_COMM_WORLD_SIZE", "4");
  env.Set("OMPI_COMM_WORLD_LOCAL_RANK", "0");
  env.Set("OMPI_COMM_WORLD_NODE_RANK", "0");
  absl::StatusOr<RendezvousInfo> info = ParseRendezvous(Launcher::kMpi, env);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_THAT(*info, PlacedAt(/*rank=*/1, /*world_size=*/4, /*local_rank=*/0,
                              /*local_world_size=*/2,
                              /*node_rank=*/kUnknownNodeRank));
  // PMI (Hydra) names no node either: the same derivation.
  auto pmi = Env({{"PMI_RANK", "3"},
                  {"PMI_SIZE", "4"},
                  {"MPI_LOCALRANKID", "1"},
                  {"MPI_LOCALNRANKS", "2"}});
  EXPECT_EQ(ParseMpiPlacement(pmi)->node_rank, 1);
}

// An IPv6 master address is bracketed in the store's address: unbracketed,
// "fd00::1:8080" reads as the address fd00::1:8080 without a port.
TEST(LauncherTest, Ipv6StoreAddressIsBracketed) {
  auto env = Env({{"RANK", "1"},
                  {"WORLD_SIZE", "2"},
                  {"LOCAL_RANK", "1"},
                  {"MASTER_ADDR", "fd00::1"},
                  {"MASTER_PORT", "8080"}});
  RendezvousInfo info = *ParseRendezvous(Launcher::kPytorch, env);
  EXPECT_EQ(info.store_address, "[fd00::1]:8080");
  EXPECT_EQ(info.master_addr, "fd00::1");  // MASTER_ADDR as torch reads it
  auto mpi = Env({{"OMPI_COMM_WORLD_RANK", "0"},
                  {"OMPI_COMM_WORLD_SIZE", "1"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                  {"MASTER_ADDR", "::1"}});
  EXPECT_EQ(ParseRendezvous(Launcher::kMpi, mpi)->store_address, "[::1]:29500");
  EXPECT_EQ(JoinHostPort("fd00::1", 8080), "[fd00::1]:8080");
  EXPECT_EQ(JoinHostPort("[fd00::1]", 8080), "[fd00::1]:8080");
  EXPECT_EQ(JoinHostPort("10.0.0.1", 7), "10.0.0.1:7");
  EXPECT_EQ(JoinHostPort("node03", 29500), "node03:29500");
}

// srun --mpi=pmi2 sets PMI_RANK and SLURM_LOCALID but no MPI_LOCALNRANKS:
// the node's task count and index are Slurm's, not the world size and 0.
TEST(LauncherTest, PmiUnderSrunTakesSlurmsNode) {
  auto srun = Env({{"PMI_RANK", "5"},
                   {"PMI_SIZE", "6"},
                   {"SLURM_LOCALID", "1"},
                   {"SLURM_NODEID", "1"},
                   {"SLURM_NTASKS_PER_NODE", "4"},
                   {"SLURM_TASKS_PER_NODE", "4,2"},
                   {"MASTER_ADDR", "h"}});
  EXPECT_THAT(*ParseMpiPlacement(srun),
              PlacedAt(/*rank=*/5, /*world_size=*/6, /*local_rank=*/1,
                       /*local_world_size=*/2, /*node_rank=*/1));
  EXPECT_EQ(ParseRendezvous(Launcher::kMpi, srun)->local_world_size, 2);
  srun.Set("SLURM_TASKS_PER_NODE", "3(x2)");
  srun.Set("PMI_RANK", "4");
  EXPECT_THAT(*ParseMpiPlacement(srun),
              PlacedAt(/*rank=*/4, /*world_size=*/6, /*local_rank=*/1,
                       /*local_world_size=*/3, /*node_rank=*/1));
  // Uneven counts without SLURM_NODEID: an error naming both.
  srun = Env({{"PMI_RANK", "1"},
              {"PMI_SIZE", "6"},
              {"SLURM_LOCALID", "1"},
              {"SLURM_TASKS_PER_NODE", "4,2"}});
  absl::Status s = ParseMpiPlacement(srun).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("SLURM_NODEID is not set, and "
                             "SLURM_TASKS_PER_NODE='4,2'"),
            absl::string_view::npos)
      << s;
  // MPI_LOCALNRANKS, where set, still wins.
  srun.Set("MPI_LOCALNRANKS", "4");
  EXPECT_EQ(ParseMpiPlacement(srun)->local_world_size, 4);
}

TEST(EnvironmentTest, FromProcessAndInts) {
  setenv("DISTKIT_TEST_VAR", "42", 1);
  Environment env = Environment::FromProcess();
  EXPECT_EQ(*env.GetInt("DISTKIT_TEST_VAR"), 42);
  EXPECT_EQ(env.GetInt("DISTKIT_UNSET_VAR").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(*env.GetInt("DISTKIT_UNSET_VAR", 7), 7);
}

}  // namespace
}  // namespace distkit
