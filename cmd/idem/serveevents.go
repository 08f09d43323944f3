package main

import (
	"errors"
	"flag"
	"strings"

	"github.com/idemkit/idem/outbox"
)

// eventSecretFiles is the repeatable --provider-events-secret-file flag of
// "idem serve": the files of the secrets the provider's transfer events
// may be signed with (two during a rotation: the new one and the old).
type eventSecretFiles []string

func (f *eventSecretFiles) String() string { return strings.Join(*f, ",") }
func (f *eventSecretFiles) Set(s string) error {
	if s == "" {
		return errors.New("empty file name")
	}
	*f = append(*f, s)
	return nil
}

func addEventSecretFlag(fs *flag.FlagSet) *eventSecretFiles {
	f := &eventSecretFiles{}
	fs.Var(f, "provider-events-secret-file", "`FILE` holding a signing secret of the provider's transfer events (whsec_<base64> or raw bytes), "+
		"received at POST /webhooks/provider and settled by a lookup at --provider, never on the event alone; repeat it during a rotation; needs --provider (docs/webhooks.md)")
	return f
}

// check reports a usage error: the events need the provider they come
// from, and one registry.
func (f *eventSecretFiles) check(provider string, sharded bool) error {
	switch {
	case len(*f) == 0:
		return nil
	case provider == "":
		return errors.New("--provider-events-secret-file needs --provider: the events are about its transfers")
	case sharded:
		return errors.New("--provider-events-secret-file is not served with --shard in this version")
	}
	return nil
}

// load reads the secrets (outbox.LoadSecret: a file its group or others
// may read is refused).
func (f *eventSecretFiles) load() ([][]byte, error) {
	var secrets [][]byte
	for _, path := range *f {
		s, err := outbox.LoadSecret(path)
		if err != nil {
			return nil, err
		}
		secrets = append(secrets, s)
	}
	return secrets, nil
}
