package sqlfile

import (
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	fsys := fstest.MapFS{
		"a.sql": {Data: []byte("-- header comment\n-- name: One\nSELECT 1;\n\n-- name: Two\nSELECT\n  2;\n")},
		"b.sql": {Data: []byte("-- name: Three\nSELECT 3\n")},
	}
	q, err := Load(fsys, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"One": "SELECT 1;", "Two": "SELECT\n  2;", "Three": "SELECT 3"}
	if len(q) != len(want) {
		t.Fatalf("got %d queries %v, want %d", len(q), q, len(want))
	}
	for k, v := range want {
		if q.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, q.Get(k), v)
		}
	}
}

func TestLoadDuplicate(t *testing.T) {
	fsys := fstest.MapFS{"a.sql": {Data: []byte("-- name: X\nSELECT 1\n-- name: X\nSELECT 2\n")}}
	if _, err := Load(fsys, "*.sql"); err == nil {
		t.Fatal("duplicate names accepted")
	}
}

func TestGetMissingPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Get of a missing name did not panic")
		}
	}()
	Queries{}.Get("nope")
}
