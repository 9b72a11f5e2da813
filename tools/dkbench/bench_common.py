"""What the dkbench drivers share: their tools' paths in the runfiles,
distrun's command line and running a job. Imported by the drivers beside it
(their own folder is first on sys.path, under Bazel or run directly)."""
import os
import subprocess
import sys

# The driver's folder in its runfiles. Not this file's: Python puts the
# driver's resolved folder (the source tree) first on sys.path, so this
# module may be imported from there.
DRIVER = os.path.abspath(sys.argv[0])
HERE = os.path.dirname(DRIVER)


def tool(*parts):
    """A built tool's path, beside the driver; exits saying how to run the
    driver when it is not there."""
    path = os.path.join(HERE, *parts)
    if not os.path.exists(path):
        bench = os.path.splitext(os.path.basename(DRIVER))[0]
        sys.exit(f"{path} not found; run through bazel run //tools/dkbench:{bench}")
    return path


def distrun(world_size, *options):
    """distrun's command line up to the program: world_size ranks on this
    host, a free port, then `options`."""
    return [tool("..", "distrun", "distrun"), "--nproc-per-node", str(world_size),
            "--master-port", "0", *options, "--"]


def run_job(cmd, timeout):
    """cmd's output lines without distrun's rank prefix; exits with the end
    of its output when it fails."""
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return [line.split("]: ", 1)[-1] for line in out.stdout.splitlines()]


def result_fields(line):
    """The key=value fields of a RESULT line."""
    return dict(f.split("=") for f in line.split()[1:])
