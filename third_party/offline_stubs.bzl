"""Offline stand-ins for repositories Bazel 4.2.3's embedded tools fetch.

Its tools load @rules_cc//cc:defs.bzl and @rules_java//java:defs.bzl and want
@remote_coverage_tools; with no network those fetches fail. These repository
rules write tiny local versions instead, so they work the same in distkit's
own workspace and in a workspace that vendors distkit.
"""

def _rules_cc_impl(rctx):
    rctx.file("WORKSPACE", 'workspace(name = "rules_cc")\n')
    rctx.file("BUILD.bazel", "")
    rctx.file("cc/BUILD.bazel", 'exports_files(["defs.bzl"])\n')
    rctx.file("cc/defs.bzl", "\n".join([
        '"""Bazel\'s native C++ rules under @rules_cc\'s names (offline stand-in)."""',
        "cc_binary = native.cc_binary",
        "cc_import = native.cc_import",
        "cc_library = native.cc_library",
        "cc_proto_library = native.cc_proto_library",
        "cc_test = native.cc_test",
        "cc_toolchain = native.cc_toolchain",
        "cc_toolchain_suite = native.cc_toolchain_suite",
        "fdo_prefetch_hints = native.fdo_prefetch_hints",
        "fdo_profile = native.fdo_profile",
        "objc_library = native.objc_library",
        "objc_import = native.objc_import",
        "",
    ]))

_rules_cc = repository_rule(implementation = _rules_cc_impl)

def _rules_java_impl(rctx):
    rctx.file("WORKSPACE", 'workspace(name = "rules_java")\n')
    rctx.file("BUILD.bazel", "")
    rctx.file("java/BUILD.bazel", 'exports_files(["defs.bzl"])\n')
    rctx.file("java/defs.bzl", "\n".join([
        '"""Bazel\'s native Java rules under @rules_java\'s names (offline stand-in)."""',
        "java_binary = native.java_binary",
        "java_import = native.java_import",
        "java_library = native.java_library",
        "java_plugin = native.java_plugin",
        "java_test = native.java_test",
        "java_package_configuration = native.java_package_configuration",
        "java_runtime = native.java_runtime",
        "java_toolchain = native.java_toolchain",
        "",
    ]))

_rules_java = repository_rule(implementation = _rules_java_impl)

def _coverage_tools_impl(rctx):
    rctx.file("WORKSPACE", 'workspace(name = "remote_coverage_tools")\n')
    rctx.file("coverage_report_generator.sh",
              "#!/bin/sh\necho 'coverage reports are not supported in this offline build' >&2\nexit 1\n",
              executable = True)
    rctx.file("BUILD.bazel", "\n".join([
        "# distkit does not run `bazel coverage`; this only satisfies the dependency.",
        'package(default_visibility = ["//visibility:public"])',
        "sh_binary(",
        '    name = "coverage_report_generator",',
        '    srcs = ["coverage_report_generator.sh"],',
        ")",
        "",
    ]))

_coverage_tools = repository_rule(implementation = _coverage_tools_impl)

def distkit_offline_stubs():
    _rules_cc(name = "rules_cc")
    _rules_java(name = "rules_java")
    _coverage_tools(name = "remote_coverage_tools")
