// Package secretfile reads files that hold secrets — key rings, webhook
// secrets, operator and API token files, database DSNs — and refuses one
// that anyone but its owner may read or change, the way ssh refuses a
// private key file: a secret that others can read is no longer one, and
// the mistake is better stopped at start than found in an incident.
package secretfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
)

// LooseModeError is the error of a secret file whose permission bits
// give its group or others any access.
type LooseModeError struct {
	Path string      // the file, as named
	What string      // what it holds: "key ring", "operators file", …
	Mode fs.FileMode // its permission bits
}

func (e *LooseModeError) Error() string {
	return fmt.Sprintf("%s %s has mode %04o: it may be read or changed by its group or others; a secret file must be for its owner only (chmod 600 %s)",
		e.What, e.Path, uint32(e.Mode.Perm()), e.Path)
}

// Read returns the contents of the secret file at path, which holds what
// (named in errors), at most max bytes. It refuses, with a
// *LooseModeError, a file whose mode gives its group or others any bit
// (mode & 0o077), checked on the opened file, so a file swapped after
// the check is not read; and a file over max bytes. The check is skipped
// on Windows, whose permissions are not mode bits. A symbolic link is
// followed: the mode checked is the target's.
func Read(path, what string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := check(path, what, st.Mode()); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s %s is over %d bytes", what, path, max)
	}
	return b, nil
}

func check(path, what string, mode fs.FileMode) error {
	if runtime.GOOS == "windows" || mode.Perm()&0o077 == 0 {
		return nil
	}
	return &LooseModeError{Path: path, What: what, Mode: mode}
}
