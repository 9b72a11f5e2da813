"""Rust under Bazel 4 without rules_rust (not reachable offline): rustc runs
in a genrule, found by find_tool.sh. Crates depend on each other through
`deps = {label_of_rlib: crate_name}`. Programs link //capi:libdistkit.so with
an $ORIGIN-relative rpath, so they run from bazel-bin and from runfiles.

    dk_rust_library(name = "distkit_sys", crate_name = "distkit_sys",
                    root = "src/lib.rs", srcs = glob(["src/**/*.rs"]))
    dk_rust_binary(name = "check", root = "tests/check.rs",
                   deps = {":distkit": "distkit"})
    dk_rust_binary(name = "unit", root = "tests/unit.rs", test = True, ...)
"""

_RUSTC = "//tools/build_defs:find_tool.sh"
_LIB = "//capi:libdistkit.so"

def _extern_flags(deps):
    flags = []
    for label, crate in deps.items():
        flags.append("--extern %s=$(location %s)" % (crate, label))
        flags.append("-L dependency=$$(dirname $(location %s))" % label)
    return " ".join(flags)

def _rustc(root, deps, rustc_env):
    env = " ".join(["%s=%s" % (k, v) for k, v in rustc_env.items()])
    return "%s $(location %s) rustc --edition 2021 -C opt-level=2 -C debuginfo=1 --cap-lints warn %s $(location %s)" % (
        env,
        _RUSTC,
        _extern_flags(deps),
        root,
    )

def dk_rust_library(name, crate_name, root, srcs, deps = {}, rustc_env = {}, **kwargs):
    """An rlib, lib<crate_name>.rlib."""
    native.genrule(
        name = name,
        srcs = srcs + deps.keys(),
        outs = ["lib%s.rlib" % crate_name],
        cmd = _rustc(root, deps, rustc_env) +
              " --crate-type rlib --crate-name %s -o $@" % crate_name,
        tools = [_RUSTC],
        **kwargs
    )

def dk_rust_binary(name, root, srcs = [], deps = {}, test = False, rustc_env = {}, **kwargs):
    """A program (test = True: the libtest harness of `root`) linked against
    libdistkit.so. Use it as a test's srcs or as dk_multirank_test's binary."""
    depth = len(native.package_name().split("/"))
    rpath = "$$ORIGIN/" + "/".join([".."] * depth) + "/capi"
    native.genrule(
        name = name,
        srcs = [root] + srcs + deps.keys() + [_LIB],
        outs = [name + ".bin"],
        cmd = _rustc(root, deps, rustc_env) +
              (" --test" if test else "") +
              " --crate-name %s -L native=$$(dirname $(location %s)) -l dylib=distkit" % (name, _LIB) +
              " -C link-arg=-Wl,-rpath,'%s' -o $@" % rpath,
        tools = [_RUSTC],
        executable = True,
        **kwargs
    )
