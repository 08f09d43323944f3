package secretfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/secretfile"
)

// TestRead: a file for its owner only (0600, 0400) is read; one its
// group or others may read or write (0640, 0604, 0620, 0644) is refused
// with a *LooseModeError naming the file and its mode, and so is a
// symbolic link to one; a file over the bound is refused.
// threat:secret-file-readable
func TestRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, mode := range []os.FileMode{0o600, 0o400, 0o640, 0o604, 0o620, 0o644} {
		p := filepath.Join(dir, "s"+mode.String())
		if err := os.WriteFile(p, []byte("secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		b, err := secretfile.Read(p, "key ring", 100)
		var loose *secretfile.LooseModeError
		switch {
		case mode&0o077 == 0 && (err != nil || string(b) != "secret"):
			t.Errorf("mode %04o: %q, %v; want it read", uint32(mode), b, err)
		case mode&0o077 != 0 && !errors.As(err, &loose):
			t.Errorf("mode %04o: %q, %v; want a LooseModeError", uint32(mode), b, err)
		case mode&0o077 != 0 && !strings.Contains(err.Error(), p) || mode&0o077 != 0 && !strings.Contains(err.Error(), "key ring") ||
			mode == 0o644 && !strings.Contains(err.Error(), "mode 0644"):
			t.Errorf("mode %04o: error %q does not name the file, what it holds and its mode", uint32(mode), err)
		}
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(filepath.Join(dir, "s"+os.FileMode(0o644).String()), link); err != nil {
		t.Fatal(err)
	}
	if _, err := secretfile.Read(link, "key ring", 100); err == nil {
		t.Error("a link to a 0644 file was read")
	}
	if _, err := secretfile.Read(filepath.Join(dir, "s"+os.FileMode(0o600).String()), "key ring", 3); err == nil {
		t.Error("a file over the bound was read")
	}
}
