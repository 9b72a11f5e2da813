#!/bin/sh
# Runs the program named by the first argument with the rest: a test whose
# program is also built on machines where the test itself is skipped.
program="$1"
shift
exec "$program" "$@"
