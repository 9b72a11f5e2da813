"""The tests every language's training example passes (examples/go,
examples/rust): the same program, data parallel and sharded."""

load("//testing:multirank.bzl", "dk_multirank_test")

def dk_train_tests(binary):
    """train_test: the loss must fall tenfold and every rank end with
    identical parameters; train_sharded_test: the same training with the
    parameters sharded across the ranks (FSDP)."""
    for name, extra_args in [("train_test", []), ("train_sharded_test", ["--sharded"])]:
        dk_multirank_test(
            name = name,
            args = ["--steps", "100"] + extra_args,
            binary = binary,
            timeout_s = 55,
        )
