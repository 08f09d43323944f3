package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
)

// buildVersion is what "idem version" prints, read from the build
// information the Go toolchain embeds in the binary.
type buildVersion struct {
	Module    string `json:"module"`
	Version   string `json:"version"`            // "(devel)" for a build from a checkout
	Revision  string `json:"revision,omitempty"` // the VCS revision, when the build stamped it
	Time      string `json:"time,omitempty"`     // the revision's commit time
	Modified  bool   `json:"modified"`           // the checkout had uncommitted changes
	GoVersion string `json:"go_version"`
}

// readVersion reads the build information. go build stamps the VCS
// revision when it builds in a checkout with -buildvcs (the default,
// unless GOFLAGS turns it off); go run and go test never stamp it.
func readVersion() (buildVersion, bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return buildVersion{}, false
	}
	v := buildVersion{Module: bi.Main.Path, Version: bi.Main.Version, GoVersion: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v, true
}

func runVersion(_ context.Context, args []string, std stdio) int {
	f := newFlags("version", "[--json]", std)
	asJSON := f.Bool("json", false, "print one JSON object")
	f.notes = "The revision is known when the binary was built with go build in a checkout\n" +
		"(-buildvcs, the default); go run and go test do not record it.\n"
	if words, code, ok := f.parse(args); !ok {
		return code
	} else if len(words) > 0 {
		return f.usage(fmt.Sprintf("unexpected argument %q", words[0]))
	}
	v, ok := readVersion()
	if !ok {
		fmt.Fprintln(std.err, "idem version: this binary carries no build information")
		return exitRefused
	}
	if *asJSON {
		enc := json.NewEncoder(std.out)
		enc.SetIndent("", "  ")
		enc.Encode(v)
		return exitOK
	}
	rev := v.Revision
	switch {
	case rev == "":
		rev = "unknown (built without VCS information: go build in a checkout records it)"
	case v.Modified:
		rev += " (modified)"
	}
	fmt.Fprintf(std.out, "idem %s\nmodule:   %s\nrevision: %s\n", v.Version, v.Module, rev)
	if v.Time != "" {
		fmt.Fprintf(std.out, "time:     %s\n", v.Time)
	}
	fmt.Fprintf(std.out, "go:       %s\n", v.GoVersion)
	return exitOK
}
