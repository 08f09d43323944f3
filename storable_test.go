package idem

import (
	"errors"
	"testing"
)

// TestResponseStorable: a response is storable exactly when its status is
// a 2xx or a 4xx and its body at most MaxStoredBody bytes; the refusal is
// ErrResponseRefused, and ErrResponseTooLarge too when the body is over
// the cap, and names the status and size. threat:unstorable-response
func TestResponseStorable(t *testing.T) {
	for _, tc := range []struct {
		status, size int
		ok, tooLarge bool
	}{
		{200, 0, true, false}, {201, MaxStoredBody, true, false}, {299, 1, true, false},
		{400, 1, true, false}, {422, MaxStoredBody, true, false}, {499, 1, true, false},
		{0, 1, false, false}, {100, 1, false, false}, {199, 1, false, false}, {300, 1, false, false},
		{302, 1, false, false}, {399, 1, false, false}, {500, 1, false, false}, {503, 1, false, false},
		{201, MaxStoredBody + 1, false, true}, {422, 200 << 10, false, true}, {503, MaxStoredBody + 1, false, true},
	} {
		err := Response{Status: tc.status, Body: make([]byte, tc.size)}.Storable()
		if (err == nil) != tc.ok || StorableStatus(tc.status) != (tc.ok || tc.tooLarge && tc.status < 500) {
			t.Errorf("status %d, %d bytes: %v, StorableStatus %v; want storable %v", tc.status, tc.size, err, StorableStatus(tc.status), tc.ok)
			continue
		}
		if tc.ok {
			continue
		}
		var rule *ResponseRuleError
		if !errors.Is(err, ErrResponseRefused) || errors.Is(err, ErrResponseTooLarge) != tc.tooLarge ||
			!errors.As(err, &rule) || rule.Status != tc.status || rule.BodySize != tc.size {
			t.Errorf("status %d, %d bytes: %v (too large %v), want ErrResponseRefused naming them, too large %v",
				tc.status, tc.size, err, errors.Is(err, ErrResponseTooLarge), tc.tooLarge)
		}
	}
}
