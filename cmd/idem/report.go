package main

import (
	"encoding/json"
	"io"
)

// tableWriter is a report that can print itself for humans.
type tableWriter interface {
	WriteTable(w io.Writer) error
}

// writeReport prints rep as indented JSON when asJSON is set, else as its
// table: the two output forms of "idem bench" and "idem check".
func writeReport(w io.Writer, rep tableWriter, asJSON bool) error {
	if !asJSON {
		return rep.WriteTable(w)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
