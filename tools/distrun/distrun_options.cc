#include "tools/distrun/distrun_options.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace distkit {
namespace {

absl::Status Bad(absl::string_view flag, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("distrun: ", flag, ": ", why));
}

absl::StatusOr<int> ParseInt(absl::string_view flag, const std::string& v,
                             int lo, int hi) {
  int n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < lo || n > hi) {
    return Bad(flag, absl::StrCat("'", v, "' is not an integer in [", lo, ", ",
                                  hi, "]"));
  }
  return n;
}

absl::StatusOr<absl::Duration> ParseSeconds(absl::string_view flag,
                                            const std::string& v) {
  double s = 0;
  // `s < 0` alone lets nan through (every comparison with it is false).
  if (!absl::SimpleAtod(v, &s) || !std::isfinite(s) || s < 0) {
    return Bad(flag, absl::StrCat("'", v,
                                  "' is not a finite, non-negative number "
                                  "of seconds"));
  }
  return absl::Seconds(s);
}

// Whether `host` is an IPv4 or IPv6 address rather than a name.
bool IsAddressLiteral(std::string host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// The first address `host` resolves to as the store's listener resolves it
// (cc/store/internal/socket.cc: the one it binds), if it is a loopback one.
std::optional<std::string> LoopbackAddressOf(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), "0", &hints, &found) != 0) return std::nullopt;
  std::optional<std::string> loopback;
  char text[INET6_ADDRSTRLEN] = {};
  if (found->ai_family == AF_INET) {
    const in_addr a =
        reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr;
    if ((ntohl(a.s_addr) >> 24) == 127 &&
        inet_ntop(AF_INET, &a, text, sizeof(text)) != nullptr) {
      loopback = text;
    }
  } else if (found->ai_family == AF_INET6) {
    const in6_addr& a =
        reinterpret_cast<const sockaddr_in6*>(found->ai_addr)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a) ||
        (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127)) {
      if (inet_ntop(AF_INET6, &a, text, sizeof(text)) != nullptr) {
        loopback = text;
      }
    }
  }
  freeaddrinfo(found);
  return loopback;
}

}  // namespace

absl::Status CheckMasterAddress(const DistrunOptions& o) {
  // A loopback address typed as one (127.0.0.1, ::1, the default) says the
  // nodes share this host, as tests and benchmarks run them; a name is
  // meant for the other hosts, which cannot reach a store listening on
  // loopback (and would retry "connection refused" for their whole
  // connect timeout).
  if (o.nnodes <= 1 || o.node_rank != 0 || IsAddressLiteral(o.master_addr)) {
    return absl::OkStatus();
  }
  if (std::optional<std::string> loopback = LoopbackAddressOf(o.master_addr)) {
    return Bad("--master-addr",
               absl::StrCat("'", o.master_addr, "' resolves to the loopback ",
                            "address ", *loopback,
                            " on this host: with --nnodes ", o.nnodes,
                            " the store would listen there, where no other "
                            "host reaches it; give an address of this host "
                            "the other nodes reach (for nodes all on this "
                            "host, 127.0.0.1)"));
  }
  return absl::OkStatus();
}

const char* DistrunUsage() {
  return "usage: distrun --nproc-per-node N [--nnodes M --node-rank I]\n"
         "               [--master-addr A] [--master-port P] [--log-dir D]\n"
         "               [--timeout SECONDS] [--grace-period SECONDS]\n"
         "               [--exit-barrier-timeout SECONDS]\n"
         "               [--cpu-bind none|core] [--max-replacements K]\n"
         "               [--min-ranks M]\n"
         "               -- program args... [: program2 args... ...]\n"
         "Starts N ranks of `program` on this node with torchrun's variables\n"
         "(RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR\n"
         "MASTER_PORT) plus DISTKIT_STORE and DISTKIT_TOKEN; node 0 hosts the\n"
         "job's store at DISTKIT_STORE, MASTER_ADDR:P (--master-port P; 0: a\n"
         "free port), and MASTER_PORT is P + 1, left free for\n"
         "torch.distributed's env:// (as torchrun's agent store and distkit's\n"
         "are apart, at MASTER_PORT and MASTER_PORT + 1). Ranks read stdin\n"
         "from /dev/null. With several nodes, export the same DISTKIT_TOKEN\n"
         "on every node; node 0 keeps the store until every node's ranks are\n"
         "done (at most\n"
         "--exit-barrier-timeout, 300 s by default, and within --timeout).\n"
         "Programs separated by ':' run one per local rank.\n"
         "A failing rank stops the job, unless --max-replacements K (default\n"
         "0) allows a replacement: that rank alone is started again, with\n"
         "DISTKIT_REPLACEMENT=<n> (n-th replacement of the job), at most K\n"
         "times per job; with --min-ranks M, a rank killed by a signal that\n"
         "is not replaced leaves the job to go on without it while at least\n"
         "M ranks remain (the survivors may shrink); an error exit still\n"
         "stops the job. Ranks see the two numbers as\n"
         "DISTKIT_MAX_REPLACEMENTS and DISTKIT_MIN_RANKS.\n";
}

absl::StatusOr<DistrunOptions> ParseDistrunArgs(
    const std::vector<std::string>& args) {
  DistrunOptions o;
  // The numeric flags: where each goes (and an integer's range).
  struct IntFlag {
    const char* name;
    int* to;
    int lo, hi;
  };
  const IntFlag int_flags[] = {
      {"--nproc-per-node", &o.nproc_per_node, 1, 4096},
      {"--nnodes", &o.nnodes, 1, 100000},
      {"--node-rank", &o.node_rank, 0, 100000},
      {"--master-port", &o.master_port, 0, 65535},
      {"--max-replacements", &o.max_replacements, 0, 1000000},
      {"--min-ranks", &o.min_ranks, 0, 1000000},
  };
  const std::pair<const char*, absl::Duration*> seconds_flags[] = {
      {"--timeout", &o.timeout},
      {"--grace-period", &o.grace_period},
      {"--exit-barrier-timeout", &o.exit_barrier_timeout},
  };
  size_t i = 0;
  for (; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.rfind("--", 0) != 0) break;  // the program starts here
    std::string name = arg, value;
    const size_t eq = arg.find('=');
    bool has_value = false;
    if (eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    name = absl::StrReplaceAll(name, {{"_", "-"}});
    if (name == "--help") return absl::CancelledError(DistrunUsage());
    if (!has_value) {
      if (i + 1 >= args.size()) return Bad(name, "needs a value");
      value = args[++i];
    }
    const auto int_flag =
        std::find_if(std::begin(int_flags), std::end(int_flags),
                     [&name](const IntFlag& f) { return name == f.name; });
    const auto seconds_flag =
        std::find_if(std::begin(seconds_flags), std::end(seconds_flags),
                     [&name](const auto& f) { return name == f.first; });
    if (int_flag != std::end(int_flags)) {
      absl::StatusOr<int> n = ParseInt(name, value, int_flag->lo, int_flag->hi);
      if (!n.ok()) return n.status();
      *int_flag->to = *n;
    } else if (seconds_flag != std::end(seconds_flags)) {
      absl::StatusOr<absl::Duration> d = ParseSeconds(name, value);
      if (!d.ok()) return d.status();
      *seconds_flag->second = *d;
    } else if (name == "--master-addr") {
      if (value.empty()) return Bad(name, "empty address");
      o.master_addr = value;
    } else if (name == "--log-dir") {
      o.log_dir = value;
    } else if (name == "--cpu-bind") {
      if (value != "none" && value != "core") {
        return Bad(name, absl::StrCat("'", value, "' is not none or core"));
      }
      o.bind_cores = value == "core";
    } else {
      return Bad(name, "unknown flag");
    }
  }
  if (o.node_rank >= o.nnodes) {
    return Bad("--node-rank",
               absl::StrCat(o.node_rank, " is not below --nnodes ", o.nnodes));
  }
  if (absl::Status s = CheckMasterAddress(o); !s.ok()) return s;
  if (o.nnodes > 1 && o.master_port == 0) {
    return Bad("--master-port", "0 (a free port) only works with one node");
  }
  if (o.master_port == 65535) {
    return Bad("--master-port",
               "65535 leaves no port above it for torch.distributed's env:// "
               "(MASTER_PORT is --master-port + 1)");
  }
  std::vector<std::string> current;
  for (; i < args.size(); ++i) {
    if (args[i] == ":") {
      if (current.empty()) return Bad(":", "empty program before ':'");
      o.programs.push_back(std::move(current));
      current.clear();
    } else {
      current.push_back(args[i]);
    }
  }
  // "-- a :" would run `a` on every rank, as if no ':' were there.
  if (!o.programs.empty() && current.empty()) {
    return Bad(":", "empty program after ':'");
  }
  if (!current.empty()) o.programs.push_back(std::move(current));
  if (o.programs.empty()) return Bad("program", "no program given after --");
  if (o.programs.size() != 1 &&
      static_cast<int>(o.programs.size()) != o.nproc_per_node) {
    return Bad("program",
               absl::StrCat(o.programs.size(),
                            " programs separated by ':' for ", o.nproc_per_node,
                            " ranks per node; give one, or one per rank"));
  }
  return o;
}

}  // namespace distkit
