// rank_probe: a test program for distrun and the harness. Each rank does what
// its first argument says; see the modes below.

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "cc/launch/launcher.h"
#include "cc/store/tcp_store.h"

namespace {

std::string Var(const char* name) {
  const char* v = getenv(name);
  return v == nullptr ? "<unset>" : v;
}

int Rank() { return atoi(Var("RANK").c_str()); }

void WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// <dir>/pid, whole once it exists (written aside, then renamed).
void WritePidFile(const std::string& dir) {
  const std::string tmp = dir + "/pid.tmp";
  if (FILE* f = fopen(tmp.c_str(), "w")) {
    fprintf(f, "%d", static_cast<int>(getpid()));
    fclose(f);
    rename(tmp.c_str(), (dir + "/pid").c_str());
  }
}

// Waits up to 20 s for `path` to exist; false if it did not.
bool WaitForFile(const std::string& path) {
  for (int waited_ms = 0; waited_ms < 20000; waited_ms += 5) {
    if (access(path.c_str(), F_OK) == 0) return true;
    usleep(5 * 1000);
  }
  return false;
}

void OnAnySignal(int sig) {
  char msg[] = "got signal 00\n";
  msg[11] = static_cast<char>('0' + sig / 10);
  msg[12] = static_cast<char>('0' + sig % 10);
  (void)!write(1, msg, sizeof(msg) - 1);
  _exit(0);
}

// Forks a child that holds this rank's stdout and stderr open for a minute
// (in its process group: distrun kills it once the rank is reaped), so the
// rank's death does not wake distrun through its pipes.
void KeepPipesOpen() {
  if (fork() == 0) {
    sleep(60);
    _exit(0);
  }
}

void OnTerm(int) {
  const char msg[] = "got SIGTERM\n";
  (void)!write(1, msg, sizeof(msg) - 1);
  _exit(0);
}

// Every rank meets every other through the job's store. With `late_node`
// >= 0, that node's ranks use the store once more a second after the
// rendezvous, when the other nodes' ranks have long exited.
int Rendezvous(int late_node = -1) {
  using namespace distkit;
  Environment env = Environment::FromProcess();
  absl::StatusOr<RendezvousInfo> info =
      ParseRendezvous(InferLauncher(env), env);
  if (!info.ok()) {
    fprintf(stderr, "%s\n", info.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(
      {info->store_address, info->token, absl::Seconds(30), absl::Seconds(30)});
  if (!store.ok()) {
    fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  if (!(*store)
           ->Set(absl::StrCat("rank/", info->rank), absl::StrCat(info->rank))
           .ok()) {
    return 1;
  }
  std::vector<std::string> keys;
  for (int r = 0; r < info->world_size; ++r)
    keys.push_back(absl::StrCat("rank/", r));
  absl::StatusOr<std::vector<std::string>> values = (*store)->MultiGet(keys);
  if (!values.ok()) {
    fprintf(stderr, "%s\n", values.status().ToString().c_str());
    return 1;
  }
  long sum = 0;
  for (const std::string& v : *values) sum += atol(v.c_str());
  const long expected =
      static_cast<long>(info->world_size) * (info->world_size - 1) / 2;
  // A client with the wrong token is refused.
  absl::StatusOr<std::unique_ptr<TcpStore>> intruder = TcpStore::Connect(
      {info->store_address, "wrong", absl::Seconds(5), absl::Seconds(5)});
  const bool refused = intruder.ok() && (*intruder)->Set("x", "y").code() ==
                                            absl::StatusCode::kUnauthenticated;
  bool late_ok = true;
  if (late_node >= 0 && Var("GROUP_RANK") == std::to_string(late_node)) {
    usleep(1000 * 1000);
    late_ok = (*store)->Set(absl::StrCat("late/", info->rank), "1").ok();
  }
  printf(
      "rendezvous rank=%d world=%d sum=%ld expected=%ld intruder_refused=%d "
      "late_store_ok=%d\n",
      info->rank, info->world_size, sum, expected, refused ? 1 : 0,
      late_ok ? 1 : 0);
  return sum == expected && refused && late_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "env";
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (mode == "env") {
    printf(
        "RANK=%s LOCAL_RANK=%s WORLD_SIZE=%s LOCAL_WORLD_SIZE=%s GROUP_RANK=%s "
        "MASTER_ADDR=%s MASTER_PORT=%s STORE=%s TOKEN_LEN=%zu\n",
        Var("RANK").c_str(), Var("LOCAL_RANK").c_str(),
        Var("WORLD_SIZE").c_str(), Var("LOCAL_WORLD_SIZE").c_str(),
        Var("GROUP_RANK").c_str(), Var("MASTER_ADDR").c_str(),
        Var("MASTER_PORT").c_str(), Var("DISTKIT_STORE").c_str(),
        Var("DISTKIT_TOKEN").size());
    return 0;
  }
  if (mode == "rendezvous") {
    return Rendezvous(argc > 2 ? atoi(argv[2]) : -1);
  }
  if (mode == "cpus") {  // the CPUs this rank may run on
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return 1;
    std::string list;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed))
        absl::StrAppend(&list, list.empty() ? "" : ",", c);
    }
    printf("cpus=%s\n", list.c_str());
    return 0;
  }
  // Rank argv[2] exits with code argv[3] after argv[4] ms; the others ignore
  // SIGTERM (so that they run on until their SIGKILL).
  if (mode == "fail-ignoring-term" && argc == 5) {
    if (Rank() == atoi(argv[2])) {
      usleep(atoi(argv[4]) * 1000);
      fprintf(stderr, "rank %d failing on purpose\n", Rank());
      return atoi(argv[3]);
    }
    signal(SIGTERM, SIG_IGN);
    sleep(120);
    return 0;
  }
  // Rank 1 is killed by SIGKILL once rank 0 waits on it: rank 0 reads the
  // FIFO argv[2] whose only writer is rank 1, and exits 1 at its EOF, i.e.
  // just after rank 1's death. Neither rank's death closes its pipes, so
  // distrun sees both ended in one pass.
  if (mode == "killed-peer" && argc == 3) {
    KeepPipesOpen();
    if (Rank() == 1) {
      const int fd = open(argv[2], O_WRONLY | O_CLOEXEC);
      if (fd < 0) return 2;
      kill(getpid(), SIGKILL);
    }
    const int fd = open(argv[2], O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 2;
    char c;
    while (read(fd, &c, 1) > 0) {
    }
    return 1;
  }
  // Prints each named variable as NAME=value (or <unset>).
  if (mode == "var") {
    for (int i = 2; i < argc; ++i)
      printf("%s=%s\n", argv[i], Var(argv[i]).c_str());
    return 0;
  }
  if (mode == "fail" && argc == 4) {
    if (Rank() == atoi(argv[2])) {
      usleep(300 * 1000);
      fprintf(stderr, "rank %d failing on purpose\n", Rank());
      return atoi(argv[3]);
    }
    sleep(120);
    return 0;
  }
  // Rank argv[2] fails (code 5) as long as it is not yet the argv[3]-th
  // replacement; the others run 2 s, so a replacement finds them running.
  if (mode == "replaced" && argc == 4) {
    const char* set = getenv("DISTKIT_REPLACEMENT");
    const std::string n = set != nullptr ? set : "";
    printf("start RANK=%s LOCAL_RANK=%s REPLACEMENT=%s pid=%d\n",
           Var("RANK").c_str(), Var("LOCAL_RANK").c_str(),
           n.empty() ? "none" : n.c_str(), static_cast<int>(getpid()));
    if (Rank() != atoi(argv[2])) {
      sleep(2);
      printf("done pid=%d\n", static_cast<int>(getpid()));
      return 0;
    }
    if (atoi(n.c_str()) < atoi(argv[3])) {
      usleep(200 * 1000);
      fprintf(stderr, "rank %d failing on purpose\n", Rank());
      return 5;
    }
    return 0;
  }
  // Rank argv[2] is killed by SIGKILL (a lost rank, as a crashed host's);
  // rank argv[3] (-1: none) exits with code 5 (a program's own failure)
  // 0.5 s after that kill, marked by a file (this job's MASTER_PORT names
  // it), so the order holds however late either rank starts; the others
  // run 2 s.
  if (mode == "lost" && argc == 4) {
    const char* tmp = getenv("TEST_TMPDIR");
    const std::string mark = absl::StrCat(
        tmp != nullptr ? tmp : "/tmp", "/rank_probe_lost_", Var("MASTER_PORT"));
    if (Rank() == atoi(argv[2])) {
      usleep(200 * 1000);
      if (FILE* f = fopen(mark.c_str(), "w")) fclose(f);
      kill(getpid(), SIGKILL);
    }
    if (Rank() == atoi(argv[3])) {
      for (int waited_ms = 0;
           access(mark.c_str(), F_OK) != 0 && waited_ms < 30000;
           waited_ms += 10) {
        usleep(10 * 1000);
      }
      usleep(500 * 1000);
      fprintf(stderr, "rank %d failing on purpose\n", Rank());
      return 5;
    }
    sleep(2);
    printf("done pid=%d\n", static_cast<int>(getpid()));
    return 0;
  }
  if (mode == "hang") {
    printf("hanging\n");
    sleep(600);
    return 0;
  }
  if (mode == "pid") {  // prints its pid, then runs until stopped
    printf("pid=%d\n", static_cast<int>(getpid()));
    sleep(600);
    return 0;
  }
  if (mode == "ignore-term") {
    signal(SIGTERM, SIG_IGN);
    printf("ready\n");
    sleep(600);
    return 0;
  }
  // Says which signal came (of SIGINT, SIGTERM, SIGHUP, SIGQUIT) and exits 0.
  if (mode == "trap-signals") {
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) signal(sig, OnAnySignal);
    printf("ready\n");
    sleep(600);
    return 1;
  }
  if (mode == "trap-term") {
    signal(SIGTERM, OnTerm);
    printf("ready\n");
    sleep(600);
    return 1;
  }
  if (mode == "print") {
    printf("out line 1\nout line 2\n");
    fprintf(stderr, "err line\n");
    printf("partial");
    fflush(stdout);
    return 0;
  }
  // Rank 0 writes its pid to <dir>/pid, then two lines of argv[3] bytes each
  // in one write (distrun forwards the first and blocks on the second when
  // the test does not read its output); once <dir>/go exists, a last partial
  // line to stdout, a line to stderr, and it exits 3. Its replacement says
  // so and exits 0.
  if (mode == "last-words" && argc == 4) {
    if (getenv("DISTKIT_REPLACEMENT") != nullptr) {
      printf("replacement up\n");
      return 0;
    }
    const std::string dir = argv[2];
    WritePidFile(dir);
    std::string lines;
    for (int i = 0; i < 2; ++i) {
      lines.append(static_cast<size_t>(atoi(argv[3])) - 1, 'a' + i);
      lines.push_back('\n');
    }
    WriteAll(1, lines);
    WaitForFile(dir + "/go");
    WriteAll(1, "last words");
    WriteAll(2, "dying now\n");
    _exit(3);
  }
  // Writes "prompt> " (no newline), then waits up to 20 s for the file
  // argv[2]: "answered" if it came, else "no answer".
  if (mode == "prompt" && argc == 3) {
    WriteAll(1, "prompt> ");
    printf("%s\n", WaitForFile(argv[2]) ? "answered" : "no answer");
    return 0;
  }
  // With stderr closed, writes its pid to <dir>/pid, then argv[3] bytes
  // without a newline to stdout, and exits.
  if (mode == "partial-exit" && argc == 4) {
    close(2);
    WritePidFile(argv[2]);
    WriteAll(1, std::string(static_cast<size_t>(atoi(argv[3])), 'p'));
    _exit(0);
  }
  // A partial line to stdout, left quiet (distrun forwards it); a line to
  // stderr; then the rest of the stdout line and a last partial one.
  if (mode == "split") {
    WriteAll(1, "abc");
    usleep(500 * 1000);
    WriteAll(2, "warn\n");
    usleep(500 * 1000);
    WriteAll(1, "def\ntail");
    return 0;
  }
  // Writes a flight record (a collective it entered, as a distkit rank
  // does, so that a failed job's distrun has a summary to print), then
  // argv[2] bytes of numbered lines to stdout (blocking while nobody reads
  // them), then waits to be stopped.
  if (mode == "flood" && argc == 3) {
    const std::string traces = Var("DISTKIT_TRACE_DIR");
    if (!traces.empty()) {
      mkdir(traces.c_str(), 0755);  // as distkit makes it, on first record
      const std::string record =
          absl::StrCat("kind=collective group=world rank=", Rank(),
                       " seq=1 op=all_reduce state=started\n");
      const int fd = open(absl::StrCat(traces, "/r", Rank(), ".trace").c_str(),
                          O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        WriteAll(fd, record);
        close(fd);
      }
    }
    const long total = atol(argv[2]);
    std::string lines;
    for (long i = 0; static_cast<long>(lines.size()) < total; ++i) {
      absl::StrAppend(&lines, "flood line ", i, "\n");
    }
    WriteAll(1, lines);
    sleep(600);
    return 0;
  }
  // Its open descriptors above 2, as "fds: 3 7 " (what it inherited).
  if (mode == "fds") {
    std::string list;
    DIR* dir = opendir("/proc/self/fd");
    if (dir == nullptr) return 1;
    for (dirent* e; (e = readdir(dir)) != nullptr;) {
      const int fd = atoi(e->d_name);
      if (fd > 2 && fd != dirfd(dir)) absl::StrAppend(&list, fd, " ");
    }
    closedir(dir);
    printf("fds: %s\n", list.c_str());
    return 0;
  }
  if (mode == "tag" && argc == 3) {
    printf("tag=%s rank=%d\n", argv[2], Rank());
    return 0;
  }
  fprintf(stderr, "rank_probe: unknown mode %s\n", mode.c_str());
  return 2;
}
