package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// journal is the state file of a persistent Server (Options.State): one
// JSON object a line, appended and synced to disk before the answer it
// records is sent, so a provider that restarts on the same file answers
// every key as before — it keeps its idempotency as a real provider does.
//
// A line is either what became of one key (an executed transfer or a
// decline, with the bytes answered and the event announcing it) or the
// acknowledgement of an event by the receiver of Options.Events. A last
// line without its newline is a write the process did not finish (it died
// mid-append; its key was never answered): it is cut off when the file is
// opened. Any other line that is not an entry is an error: the file is
// not the provider's, or was damaged, and the provider refuses to start
// rather than forget a key. A key's first line counts.
//
// A journal is used with Server.mu held; it is not safe for concurrent
// use by itself.
type journal struct {
	f *os.File
}

// journalEntry is one line of the journal. Bytes are kept as strings so
// that every answer is replayed byte for byte as first sent.
type journalEntry struct {
	// Key, Request, Declined and Response: what became of one key.
	Key      string `json:"key,omitempty"`
	Request  string `json:"request,omitempty"`
	Declined bool   `json:"declined,omitempty"`
	Response string `json:"response,omitempty"`
	// Event and EventBody: the webhook-id and body of the event that
	// announces it (Options.Events).
	Event     string `json:"event,omitempty"`
	EventBody string `json:"event_body,omitempty"`
	// Delivered: the receiver acknowledged the event with this
	// webhook-id (a line of its own).
	Delivered string `json:"delivered,omitempty"`
}

// openJournal opens (creating it if need be) the journal at path and
// returns it with its entries in order. A torn last line is cut off.
func openJournal(path string) (*journal, []journalEntry, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("provider: state file: %w", err)
	}
	entries, good, err := readJournal(f)
	if err == nil {
		err = cutTail(f, path, good)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return &journal{f: f}, entries, nil
}

// readJournal reads every complete line of f and returns the entries and
// the length of the complete lines.
func readJournal(f *os.File) ([]journalEntry, int64, error) {
	data, err := os.ReadFile(f.Name())
	if err != nil {
		return nil, 0, fmt.Errorf("provider: state file: %w", err)
	}
	var entries []journalEntry
	var good int64
	for n := 1; ; n++ {
		line, rest, complete := bytes.Cut(data, []byte{'\n'})
		if !complete {
			break // empty, or a torn last line
		}
		var e journalEntry
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil || (e.Key == "") == (e.Delivered == "") {
			return nil, 0, fmt.Errorf("provider: state file %s: line %d is not a provider state entry: refusing to start rather than forget a key", f.Name(), n)
		}
		entries = append(entries, e)
		good += int64(len(line)) + 1
		data = rest
	}
	return entries, good, nil
}

// cutTail truncates f to its complete lines, good bytes, and makes the
// file's name durable in its directory.
func cutTail(f *os.File, path string, good int64) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("provider: state file: %w", err)
	}
	if st.Size() != good {
		if err := f.Truncate(good); err != nil {
			return fmt.Errorf("provider: state file: cutting a torn last line: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("provider: state file: %w", err)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("provider: state file's directory: %w", err)
	}
	defer dir.Close()
	if err := dir.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("provider: state file's directory: %w", err)
	}
	return nil
}

// append writes e as one line and syncs it to disk. An error means the
// line may or may not be on disk.
func (j *journal) append(e journalEntry) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b) // ends the line with '\n'
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return err
	}
	if _, err := j.f.Write(b.Bytes()); err != nil {
		return fmt.Errorf("provider: state file: %w", err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("provider: state file: %w", err)
	}
	return nil
}

func (j *journal) close() error { return j.f.Close() }
