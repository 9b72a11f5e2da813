package distkit

/*
#include <stdlib.h>
*/
import "C"

import (
	"fmt"
	"strings"
)

// cString is s as a C string for the caller to free, or InvalidArgument
// naming what when s holds a NUL byte: C would read only the part before
// it, so a store key, a group's name or a backend would silently become
// another one. Every string the package hands to the ABI goes through it.
func cString(what, s string) (*C.char, error) {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return nil, &Error{InvalidArgument, fmt.Sprintf("%s %q holds a NUL byte at %d (a C string would end there)", what, s, i)}
	}
	return C.CString(s), nil
}
