"""The Rust and Go programs of the cross-language tests, each on distkit's
binding for its language (the Go ones in the module under go/)."""

load("//tools/build_defs:go.bzl", "dk_go_binary")
load("//tools/build_defs:rust.bzl", "dk_rust_binary")

def mixed_rust_binary(name, root):
    dk_rust_binary(
        name = name,
        testonly = True,
        root = root,
        deps = {
            "//bindings/rust:distkit": "distkit",
            "//bindings/rust:distkit_sys": "distkit_sys",
        },
    )

def mixed_go_binary(name, package, main):
    """`main` is the package's source file, under go/."""
    dk_go_binary(
        name = name,
        testonly = True,
        module = "testing/mixed/go",
        package = package,
        srcs = [
            "go/go.mod",
            main,
            "//bindings/go:module",
        ],
    )
