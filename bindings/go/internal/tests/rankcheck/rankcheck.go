// Package rankcheck is how the Go collective checks (internal/tests/
// collectives and gpusim) report a failure: under the rank's name, ending
// the process, so that distrun stops the other ranks and fails the job.
package rankcheck

import (
	"fmt"
	"os"
)

// Rank names this process in the reports; the program sets it after Init.
var Rank int

// Fail reports a failed check and exits 1.
func Fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rank %d: FAILED: %s\n", Rank, fmt.Sprintf(format, args...))
	os.Exit(1)
}

// Must fails, naming what, unless err is nil.
func Must(err error, what string) {
	if err != nil {
		Fail("%s: %v", what, err)
	}
}
