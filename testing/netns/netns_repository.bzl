"""local_netns: whether this machine can run the tests whose hosts are network
namespaces (testing/netns).

It builds two namespace-hosts joined by a bridge, and rate-limits one link,
with testing/netns/netns_hosts.sh itself, in processes that exit at once (the
namespaces go with them: nothing is left behind). @local_netns//:defs.bzl
then says CAN_CREATE_HOSTS, CAN_LIMIT_RATES and REASON; testing/netns/netns.bzl
marks the tests incompatible where the answer is no, so `bazel test //...`
reports them SKIPPED, never passed, and the fetch prints why.
"""

def _probe(rctx, bash, lib, function):
    res = rctx.execute(
        [bash, "-c", 'source "$1" && "$2"', "probe", str(lib), function],
        timeout = 60,
    )
    why = (res.stdout.strip() or res.stderr.strip() or
           "%s failed (exit %d)" % (function, res.return_code))
    return res.return_code == 0, why

def _local_netns_impl(rctx):
    lib = rctx.path(Label("//testing/netns:netns_hosts.sh"))
    bash = rctx.which("bash")
    hosts, rates = False, False
    reason, rate_reason = "bash not found", "bash not found"
    if bash:
        hosts, reason = _probe(rctx, bash, lib, "netns_can_create_hosts")
        if hosts:
            reason = ""
            rates, rate_reason = _probe(rctx, bash, lib, "netns_can_limit_rates")
            if rates:
                rate_reason = ""
        else:
            rate_reason = reason
    if not hosts:
        print("distkit: tests over namespace-hosts (tag netns) will be SKIPPED: " + reason)
    elif not rates:
        print("distkit: tests that rate-limit namespace-hosts' links will be SKIPPED: " + rate_reason)
    rctx.file("BUILD.bazel", "")
    rctx.file("defs.bzl", "\n".join([
        "CAN_CREATE_HOSTS = %r" % hosts,
        "REASON = %r" % reason,
        "CAN_LIMIT_RATES = %r" % rates,
        "RATE_REASON = %r" % rate_reason,
        "",
    ]))

local_netns = repository_rule(
    implementation = _local_netns_impl,
    local = True,
    doc = "Whether network-namespace hosts (and tbf rates) can be made here.",
)
