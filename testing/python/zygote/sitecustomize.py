"""Loaded by Python's start-up in every process whose path has this folder
(the programs of //bindings/python's multi-rank tests, and the Python
processes they start): nothing happens unless testing/run_multirank.sh
asked for its fork server (rank_zygote.py says what it does)."""
import os

if os.environ.get("DISTKIT_RANK_ZYGOTE_SERVE"):
    import rank_zygote
    try:
        rank_zygote.serve(os.environ["DISTKIT_RANK_ZYGOTE_SERVE"])  # returns in a rank only
    except BaseException as e:  # the zygote itself must never run the program
        import sys
        print(f"rank_zygote: the zygote failed: {e!r}", file=sys.stderr, flush=True)
        os._exit(1)
elif os.environ.get("DISTKIT_RANK_ZYGOTE"):
    import rank_zygote
    rank_zygote.stand_in(os.environ["DISTKIT_RANK_ZYGOTE"])
