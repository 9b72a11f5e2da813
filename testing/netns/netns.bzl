"""Tests whose ranks run on real "hosts": network and UTS namespaces with their
own addresses and hostnames, joined by a bridge (testing/netns/netns_hosts.sh).

    load("//testing/netns:netns.bzl", "dk_netns_job_test", "dk_netns_test")

    # One distrun per host (--nnodes H --node-rank I), no address variable:
    dk_netns_job_test(
        name = "collectives_netns_test",      # -> _h2, _h3
        binary = "//cc/group:collectives_tests_program",
        hosts = [2, 3],
        ranks_per_host = 2,
        rate = "1gbit",                       # optional: tbf on every link
    )

    # A job whose ranks run different programs (rank r: binaries[r]):
    dk_netns_job_test(
        name = "mixed_job_netns_test",        # -> _h2
        binaries = [":rank_c", ":rank_py", ":rank_rs", ":rank_go"],
        hosts = [2],
    )

    # A script that sources netns_hosts.sh itself ($1 is its path):
    dk_netns_test(name = "my_test", srcs = ["my_test.sh"])

Where the machine cannot make namespaces (@local_netns, probed at fetch), the
tests are incompatible with it, so `bazel test //...` reports them SKIPPED
and the fetch prints why; a test that asks for rates is skipped likewise where
tc cannot add a tbf qdisc. Every test is tagged "netns" (`bazel test
--test_tag_filters=-netns` leaves them out).
"""

load("@local_netns//:defs.bzl", "CAN_CREATE_HOSTS", "CAN_LIMIT_RATES")
load("//testing:multirank.bzl", "dk_test_size")

# A constraint no platform has: targets that require it are skipped.
_INCOMPATIBLE = ["//testing/netns:can_create_hosts"]

_LIB = "//testing/netns:netns_hosts.sh"
_JOB = "//testing/netns:netns_job.sh"
_DISTRUN = "//tools/distrun"

def _compatible(needs_rates):
    if not CAN_CREATE_HOSTS or (needs_rates and not CAN_LIMIT_RATES):
        return _INCOMPATIBLE
    return []

def dk_netns_test(name, srcs, args = [], data = [], needs_rates = False,
                  size = "small", tags = [], **kwargs):
    """An sh_test given the harness library's path as its first argument."""
    native.sh_test(
        name = name,
        srcs = srcs,
        args = ["$(rootpath %s)" % _LIB] + args,
        data = [_LIB] + data,
        size = size,
        tags = ["netns"] + tags,
        target_compatible_with = _compatible(needs_rates),
        **kwargs
    )

def dk_netns_job_test(name, binary = None, hosts = [2, 3], ranks_per_host = 2,
                      args = [], rank_env = {}, rate = None, timeout_s = 60,
                      data = [], env = {}, tags = [], binaries = None,
                      distrun_args = [], **kwargs):
    """One test per host count (`<name>_h<H>`, and a test_suite `name`): the
    job `binary args` over H namespace-hosts x ranks_per_host, through
    testing/netns/netns_job.sh. `rank_env` is set in the ranks' environment
    (after the address variables are cleared); `env` in the runner's, which
    distrun passes on. `binaries = [a, b, c, d]` instead of `binary`: rank r
    runs binaries[r] (with `args`), hosts x ranks_per_host of them, so host
    I runs binaries[I * ranks_per_host:(I + 1) * ranks_per_host].
    `distrun_args` go to every host's distrun (--max-replacements, --min-ranks)."""
    if (binary == None) == (binaries == None):
        fail("dk_netns_job_test %s: give binary or binaries" % name)
    if binaries != None:
        for h in hosts:
            if h * ranks_per_host != len(binaries):
                fail("dk_netns_job_test %s: %d binaries for %d hosts x %d ranks" %
                     (name, len(binaries), h, ranks_per_host))
        programs = []
        for i, b in enumerate(binaries):
            programs += ([":"] if i > 0 else []) + ["$(rootpath %s)" % b] + args
        programs_data = depset(binaries).to_list()
    else:
        programs = ["$(rootpath %s)" % binary] + args
        programs_data = [binary]
    tests = []
    extra = []
    if rate:
        extra += ["--rate", rate]
    for k, v in rank_env.items():
        extra += ["--rank-env", "%s=%s" % (k, v)]
    for a in distrun_args:
        extra += ["--distrun-arg", a]
    for h in hosts:
        test_name = "%s_h%d" % (name, h)
        native.sh_test(
            name = test_name,
            srcs = [_JOB],
            args = [
                "--hosts-lib",
                "$(rootpath %s)" % _LIB,
                "--distrun",
                "$(rootpath %s)" % _DISTRUN,
                "--hosts",
                str(h),
                "--ranks-per-host",
                str(ranks_per_host),
                "--timeout",
                str(timeout_s),
            ] + extra + ["--"] + programs,
            data = [_LIB, _DISTRUN] + programs_data + data,
            env = env,
            size = dk_test_size(timeout_s),
            tags = ["netns"] + tags,
            target_compatible_with = _compatible(rate != None),
            **kwargs
        )
        tests.append(test_name)
    native.test_suite(name = name, tests = tests, tags = ["netns"] + tags)
