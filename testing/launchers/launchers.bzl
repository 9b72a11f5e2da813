"""The launcher tests: launchers_test.sh in one of its modes (torchrun,
mpirun, mpirun_torch, slurm), given the rank programs it starts."""

_PORTS = "//testing:free_port_pair.py"

def launchers_test(name, mode, programs):
    """launchers_test.sh `mode` followed by the paths of `programs`."""
    native.sh_test(
        name = name,
        size = "medium",
        srcs = ["launchers_test.sh"],
        args = [mode] + ["$(rootpath %s)" % p for p in programs],
        data = programs + [_PORTS],
        env = {"FREE_PORT_PAIR": "$(rootpath %s)" % _PORTS},
    )
