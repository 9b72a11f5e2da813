"""One call that sets up everything distkit needs, in distkit's own WORKSPACE
and in a workspace that vendors it:

    local_repository(name = "distkit", path = "/path/to/distkit")
    load("@distkit//third_party:workspace.bzl", "distkit_workspace")
    distkit_workspace()

then depend on "@distkit//capi" (the C ABI; #include "distkit/distkit.h").
"""

load("//third_party:offline_stubs.bzl", "distkit_offline_stubs")
load("//third_party:system_libs.bzl", "distkit_system_dependencies")
load("//testing/netns:netns_repository.bzl", "local_netns")

def distkit_workspace():
    distkit_offline_stubs()
    distkit_system_dependencies()
    # Whether the tests over namespace-hosts can run here (testing/netns).
    local_netns(name = "local_netns")
    native.register_toolchains("@distkit//third_party/python:debian_python_toolchain")
