package main

import (
	"errors"
	"flag"
	"strings"

	"github.com/idemkit/idem/internal/secretfile"
)

// maxDSNFile bounds a --db-file.
const maxDSNFile = 64 << 10

// usageError is an error of the command line itself (exit 2).
type usageError string

func (e usageError) Error() string { return string(e) }

// db registers --db (default def, usage its help) and --db-file on f and
// returns where the DSN will be once f is parsed: the value of --db, or
// the one line of the --db-file FILE, so that a DSN holding a password
// need never be on the command line (where ps shows it to every user).
// The file is a secret file, refused (exit 1) when its group or others
// may read it (internal/secretfile). Both flags together are a usage
// error (exit 2).
func (f *flags) db(def, usage string) *string {
	dsn := f.String("db", def, usage)
	file := f.String("db-file", "", "`FILE` holding the database DSN on one line, mode 0600, instead of --db: keeps a password off the command line")
	f.after = append(f.after, func() error {
		if *file == "" {
			return nil
		}
		given := false
		f.Visit(func(fl *flag.Flag) { given = given || fl.Name == "db" })
		if given {
			return usageError("give --db or --db-file, not both")
		}
		v, err := readDSN(*file)
		if err != nil {
			return err
		}
		*dsn = v
		return nil
	})
	return dsn
}

// readDSN reads a --db-file: one non-empty line.
func readDSN(path string) (string, error) {
	b, err := secretfile.Read(path, "DSN file", maxDSNFile)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" || strings.ContainsAny(s, "\r\n") {
		return "", errors.New("DSN file " + path + ": want the DSN on one line")
	}
	return s, nil
}
