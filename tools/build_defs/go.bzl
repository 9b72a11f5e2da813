"""Go under Bazel 4 without rules_go (not reachable offline): `go build` (or
`go test -c`) runs in a genrule, offline (GOPROXY=off), with a private cache.
cgo compiles against capi/include/distkit/distkit.h and links
//capi:libdistkit.so with an $ORIGIN-relative rpath.

    dk_go_binary(name = "check", module = "bindings/go",
                 package = "./internal/tests/check",
                 srcs = glob(["**/*.go", "go.mod"]))
    dk_go_binary(name = "unit", module = "bindings/go", package = ".",
                 test = True, srcs = ...)   # the package's `go test` binary

`module` is the folder (from the repository root) holding go.mod; `srcs` must
list every file the build reads, including modules reached by replace.
"""

_GO = "//tools/build_defs:find_tool.sh"
_LIB = "//capi:libdistkit.so"
_HEADER = "//capi:include/distkit/distkit.h"

def dk_go_binary(name, module, package, srcs, test = False, **kwargs):
    depth = len(native.package_name().split("/"))
    rpath = "\\$$ORIGIN/" + "/".join([".."] * depth) + "/capi"  # inside "..."
    build = "test -c" if test else "build"
    native.genrule(
        name = name,
        srcs = srcs + [_LIB, _HEADER],
        outs = [name + ".bin"],
        cmd = " && ".join([
            "root=$$PWD",
            "scratch=$$(mktemp -d)",
            "export GOCACHE=$$scratch/cache GOPATH=$$scratch/path HOME=$$scratch GOFLAGS=-mod=mod GOPROXY=off GO111MODULE=on CGO_ENABLED=1",
            "export CGO_LDFLAGS=\"-L$$root/$$(dirname $(location %s)) -Wl,-rpath,%s\"" % (_LIB, rpath),
            "cd %s" % module,
            # No -trimpath: it would rebuild the standard library in every
            # genrule (15 s of CPU against 4 s with GOROOT's own packages).
            "$$root/$(location %s) go %s -o $$root/$@ %s" % (_GO, build, package),
            "rm -rf $$scratch",
        ]),
        tools = [_GO],
        executable = True,
        **kwargs
    )
