// Gloo's TCP device, made so that its event-loop thread cannot stall the
// thread that runs this rank's operations.
//
// Gloo's loop thread (one per device) handles a pair's events only when it
// gets the pair's lock without waiting (tcp::Pair::handleEvents tries it and
// returns), and its epoll is level-triggered: a loop thread woken by incoming
// data while the op thread holds that lock (every send writes in place under
// it) returns to epoll_wait at once, again and again. On the core the op
// thread was preempted from, it spins until the scheduler's tick ends its
// slice, then the op thread gets the core back and lets go of the lock. Where
// a rank has one core (distrun --cpu-bind core, or a busy host) that is a
// tick (4 ms at HZ=250) on most steps of a ring: a 4 MiB all_gather over
// loopback TCP at world size 2 took 4.0 ms, and 1.0-1.4 ms without the stall.
//
// So the loop thread runs as SCHED_BATCH: a woken batch thread does not
// preempt the thread running on its core, so the op thread finishes its
// write and lets go of the lock first. The loop thread still runs at once on
// an idle core and when the op thread blocks (it waits for the loop thread's
// completions). The cost: where every core is busy with other threads
// (compute beside asynchronous collectives), a woken loop thread waits for
// one of them to block or for the tick, up to 4 ms, where before it took the
// core at once; TCP keeps the data flowing into the socket's buffers
// meanwhile. DDP over TCP on two busy cores did not get slower
// (tools/dkbench/RESULTS.md). DISTKIT_GLOO_LOOP_BATCH=0 keeps Gloo's
// default policy. The thread is named "dk-gloo-loop" for top -H and
// debuggers. Where the policy cannot be set (a seccomp filter), the device
// is made as Gloo makes it.

#ifndef DISTKIT_CC_COMM_GLOO_TCP_DEVICE_H_
#define DISTKIT_CC_COMM_GLOO_TCP_DEVICE_H_

#include <gloo/transport/device.h>
#include <gloo/transport/tcp/attr.h>

#include <memory>

namespace distkit {

// As gloo::transport::tcp::CreateDevice (which it calls; its exceptions
// pass through), with the loop thread as above.
std::shared_ptr<gloo::transport::Device> CreateTcpDevice(
    const gloo::transport::tcp::attr& attr);

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_GLOO_TCP_DEVICE_H_
