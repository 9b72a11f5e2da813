"""Repository rules that find distkit's system dependencies.

Each rule looks for a library where Debian (or the CUDA installer) puts it and
writes a BUILD file exposing it as a cc_library. A required library that is
missing fails the build with a message that names the package to install
(tools/bootstrap.sh installs them all). An optional one (CUDA, NCCL) that is
missing yields a repository whose `FOUND` constant is False and whose `REASON`
says why, so `bazel test //...` still passes and GPU targets report the skip.
"""

_BOOTSTRAP_HINT = "run tools/bootstrap.sh (it installs every package distkit needs)"

def _fail_missing(what, package):
    fail("distkit: %s not found; install the Debian package %s, or %s" %
         (what, package, _BOOTSTRAP_HINT))

def _pkg_config_libs(rctx, modules, package):
    res = rctx.execute(["pkg-config", "--libs"] + modules)
    if res.return_code != 0:
        _fail_missing("pkg-config modules %s" % ", ".join(modules), package)
    return [flag for flag in res.stdout.strip().split(" ") if flag]

def _linkopts_literal(opts):
    return "[" + ", ".join(['"%s"' % o for o in opts]) + "]"

# --- Abseil -------------------------------------------------

_ABSL_MODULES = [
    "absl_status",
    "absl_statusor",
    "absl_strings",
    "absl_str_format",
    "absl_synchronization",
    "absl_time",
    "absl_flat_hash_map",
    "absl_flat_hash_set",
    "absl_random_random",
    "absl_flags",
    "absl_flags_parse",
    "absl_flags_usage",
    "absl_cleanup",
]

def _system_absl_impl(rctx):
    if not rctx.path("/usr/include/absl/status/status.h").exists:
        _fail_missing("Abseil headers", "libabsl-dev")
    absl = _pkg_config_libs(rctx, _ABSL_MODULES, "libabsl-dev")
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

# Headers live in /usr/include (a built-in include directory of the toolchain).
cc_library(
    name = "absl",
    linkopts = {absl},
)
""".format(absl = _linkopts_literal(absl)))

system_absl = repository_rule(
    implementation = _system_absl_impl,
    local = True,
    doc = "Abseil from Debian: @system_absl//:absl.",
)

# --- Gloo --------------------------------------------------------------------

def _system_gloo_impl(rctx):
    if not rctx.path("/usr/include/gloo/allreduce.h").exists:
        _fail_missing("Gloo headers", "libgloo-dev")
    lib = None
    for candidate in ["/usr/lib/libgloo.so", "/usr/lib/libgloo.so.0",
                      "/usr/lib/x86_64-linux-gnu/libgloo.so"]:
        if rctx.path(candidate).exists:
            lib = candidate
            break
    if lib == None:
        _fail_missing("libgloo.so", "libgloo-dev")
    libdir = lib.rsplit("/", 1)[0]
    name = lib.rsplit("/", 1)[1]
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "gloo",
    linkopts = ["-L{libdir}", "-Wl,-rpath,{libdir}", "-l:{name}", "-lpthread"],
)
""".format(libdir = libdir, name = name))

system_gloo = repository_rule(
    implementation = _system_gloo_impl,
    local = True,
    doc = "Gloo (TCP transport) from Debian's libgloo-dev.",
)

# --- OpenMPI -----------------------------------------------------------------

def _system_mpi_impl(rctx):
    mpicc = rctx.which("mpicc")
    if mpicc == None:
        _fail_missing("mpicc", "libopenmpi-dev")
    compile = rctx.execute([mpicc, "-showme:compile"]).stdout.strip().split(" ")
    link = rctx.execute([mpicc, "-showme:link"]).stdout.strip().split(" ")
    incdirs = [f[2:] for f in compile if f.startswith("-I")]
    if not incdirs:
        _fail_missing("MPI include directory", "libopenmpi-dev")
    rctx.symlink(incdirs[0], "include")
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

# What distkit's product code uses: OpenMPI's declarations alone, so that
# libdistkit.so never needs libmpi (cc/comm/mpi/mpi_library.h loads it).
cc_library(
    name = "headers",
    hdrs = glob(["include/*.h"]),
    includes = ["include"],
)

# Headers and libmpi, for programs that call MPI themselves (mpi_bench).
cc_library(
    name = "mpi",
    linkopts = {link},
    deps = [":headers"],
)
""".format(link = _linkopts_literal([f for f in link if f])))

system_mpi = repository_rule(
    implementation = _system_mpi_impl,
    local = True,
    doc = "OpenMPI, found through `mpicc -showme`.",
)

# --- LibTorch ----------------------------------------------------------------

def _system_torch_impl(rctx):
    api = "/usr/include/torch/csrc/api/include"
    if not rctx.path(api + "/torch/torch.h").exists:
        _fail_missing("LibTorch headers", "libtorch-dev")
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

# The C++ frontend headers sit below /usr/include/torch/csrc/api/include, which is
# not a default search path; dependants add it through TORCH_COPTS (torch.bzl).
cc_library(
    name = "torch",
    linkopts = ["-ltorch", "-ltorch_cpu", "-lc10"],
)
""")
    rctx.file("torch.bzl", 'TORCH_COPTS = ["-isystem", "%s"]\n' % api)

system_torch = repository_rule(
    implementation = _system_torch_impl,
    local = True,
    doc = "LibTorch (CPU) from Debian's libtorch-dev.",
)

# --- torch's Python extension API (pybind11) ----------------------------------

def _system_torch_python_impl(rctx):
    python = "/usr/bin/python3"  # Debian's, the interpreter with torch
    res = rctx.execute([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"])
    include = res.stdout.strip()
    if res.return_code != 0 or not rctx.path(include + "/Python.h").exists:
        _fail_missing("Python.h for %s" % python, "python3-dev")
    if not rctx.path("/usr/include/pybind11/pybind11.h").exists:
        _fail_missing("pybind11 headers", "pybind11-dev")
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

# A torch extension module (e.g. a c10d backend): LibTorch, libtorch_python
# and pybind11 (its headers are in /usr/include); Python's headers through
# PYTHON_COPTS (defs.bzl). Python symbols resolve in the interpreter.
cc_library(
    name = "torch_python",
    linkopts = ["-ltorch_python"],
    deps = ["@system_torch//:torch"],
)
""")
    rctx.file("defs.bzl", 'PYTHON_COPTS = ["-isystem", "%s"]\n' % include)

system_torch_python = repository_rule(
    implementation = _system_torch_python_impl,
    local = True,
    doc = "Python's headers, pybind11 and libtorch_python (Debian's python3-dev, pybind11-dev, libtorch-dev).",
)

# --- GoogleTest, Google Benchmark, DLPack -----------------------------------

def _check_and_write(rctx, headers, build):
    for header, package in headers:
        if not rctx.path(header).exists:
            _fail_missing(header, package)
    rctx.file("BUILD.bazel", 'package(default_visibility = ["//visibility:public"])\n' + build)

def _system_gtest_impl(rctx):
    _check_and_write(rctx, [
        ("/usr/include/gtest/gtest.h", "libgtest-dev"),
        ("/usr/include/gmock/gmock.h", "libgmock-dev"),
    ], """
cc_library(
    name = "gtest",
    linkopts = ["-lgmock", "-lgtest", "-lpthread"],
)

cc_library(
    name = "gtest_main",
    linkopts = ["-lgmock_main"],
    deps = [":gtest"],
)
""")

system_gtest = repository_rule(
    implementation = _system_gtest_impl,
    local = True,
    doc = "GoogleTest and GoogleMock from Debian: :gtest, :gtest_main.",
)

def _system_benchmark_impl(rctx):
    _check_and_write(rctx, [("/usr/include/benchmark/benchmark.h", "libbenchmark-dev")], """
cc_library(
    name = "benchmark",
    linkopts = ["-lbenchmark", "-lpthread"],
)
""")

system_benchmark = repository_rule(
    implementation = _system_benchmark_impl,
    local = True,
    doc = "Google Benchmark from Debian.",
)

def _system_dlpack_impl(rctx):
    _check_and_write(rctx, [("/usr/include/dlpack/dlpack.h", "libdlpack-dev")], """
# Header-only; /usr/include/dlpack/dlpack.h.
cc_library(name = "dlpack")
""")

system_dlpack = repository_rule(
    implementation = _system_dlpack_impl,
    local = True,
    doc = "DLPack's header from Debian.",
)

# --- CUDA and NCCL (optional) ------------------------------------------------

# A GPU this machine can run on: nvidia-smi lists one (the driver's device
# files alone also exist in containers with no GPU or a mismatched driver),
# and CUDA_VISIBLE_DEVICES does not hide them all. Tests that need one are
# skipped (not passed) without.
def _usable_gpu(rctx):
    visible = rctx.os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible != None and visible.strip() in ["", "-1"]:
        return False
    smi = rctx.which("nvidia-smi")
    if not smi:
        return False
    listed = rctx.execute([smi, "-L"])
    return listed.return_code == 0 and "GPU" in listed.stdout

def _local_cuda_impl(rctx):
    home = rctx.os.environ.get("CUDA_HOME", "/usr/local/cuda")
    gpu = _usable_gpu(rctx)
    reason = ""
    if not rctx.path(home + "/include/cuda_runtime.h").exists:
        reason = "CUDA not found at %s (set CUDA_HOME)" % home
    elif not rctx.path(home + "/include/nccl.h").exists:
        reason = "NCCL header nccl.h not found in %s/include" % home
    if reason:
        rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

# Empty stand-ins: nothing may depend on them unless FOUND is True (defs.bzl).
cc_library(name = "headers")
cc_library(name = "cuda")
cc_library(name = "nccl")
""")
        rctx.file("defs.bzl", "FOUND = False\nREASON = %r\nGPU = %r\n" % (reason, gpu))
        return
    rctx.symlink(home + "/include", "include")
    libdirs = [d for d in [home + "/lib64", home + "/lib"] if rctx.path(d).exists]
    linkopts = []
    for d in libdirs:
        linkopts += ["-L" + d, "-Wl,-rpath," + d]
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

# Headers only: distkit's libraries open libcudart and libnccl with dlopen
# (cc/core/shared_library.h), so nothing they build needs them to load.
cc_library(
    name = "headers",
    # Every file: CUDA's headers include extension-less ones (<nv/target>).
    hdrs = glob(["include/**"]),
    includes = ["include"],
)

# Linked: for tests that call the CUDA runtime or NCCL directly.
cc_library(
    name = "cuda",
    linkopts = {linkopts} + ["-lcudart"],
    deps = [":headers"],
)

cc_library(
    name = "nccl",
    linkopts = ["-lnccl"],
    deps = [":cuda"],
)
""".format(linkopts = _linkopts_literal(linkopts)))
    rctx.file("defs.bzl", "FOUND = True\nREASON = \"\"\nGPU = %r\n" % gpu)

local_cuda = repository_rule(
    implementation = _local_cuda_impl,
    local = True,
    environ = ["CUDA_HOME", "CUDA_VISIBLE_DEVICES"],
    doc = "CUDA runtime and NCCL if installed (CUDA_HOME, default /usr/local/cuda).",
)

def distkit_system_dependencies():
    """Declares every system repository distkit uses. Call from WORKSPACE."""
    system_absl(name = "system_absl")
    system_gloo(name = "system_gloo")
    system_mpi(name = "system_mpi")
    system_torch(name = "system_torch")
    system_torch_python(name = "system_torch_python")
    system_gtest(name = "system_gtest")
    system_benchmark(name = "system_benchmark")
    system_dlpack(name = "system_dlpack")
    local_cuda(name = "local_cuda")
