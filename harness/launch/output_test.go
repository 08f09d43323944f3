package launch

import (
	"strings"
	"testing"
)

func TestOutputSearch(t *testing.T) {
	t.Parallel()
	o := newOutput(4, nil)
	o.Write([]byte("hello wor")) // more than twice the limit: cut to " wor"
	found, next, changed := o.search("world", 0)
	if found {
		t.Fatal("found world in \"hello wor\"")
	}
	o.Write([]byte("ld"))
	select {
	case <-changed:
	default:
		t.Fatal("a write did not close the changed channel")
	}
	if found, _, _ := o.search("world", next); !found {
		t.Errorf("world split over two writes and a cut not found (log %q)", o.String())
	}
	if got := o.String(); got != "orld" {
		t.Errorf("String() = %q; want the last 4 bytes", got)
	}
	if found, _, _ := o.search("hello", 0); found {
		t.Error("found text cut from the log")
	}
	if found, _, _ := o.search("", 0); !found {
		t.Error("the empty text not found")
	}
	if o.address() != "" {
		t.Errorf("address %q without a listening line", o.address())
	}
	o.Write([]byte("x\nlistening on 127.0.0.1:1"))
	if o.address() != "" {
		t.Error("address announced before the line ended")
	}
	o.Write([]byte("2\n"))
	select {
	case <-o.ready:
	default:
		t.Fatal("ready not closed after the listening line")
	}
	if o.address() != "127.0.0.1:12" {
		t.Errorf("address %q; want 127.0.0.1:12", o.address())
	}
	o.Write([]byte("listening on 127.0.0.1:3\n")) // only the first line counts
	if o.address() != "127.0.0.1:12" {
		t.Errorf("address %q after a second line; want the first", o.address())
	}
}

func FuzzListenAddr(f *testing.F) {
	f.Add(`time=… level=INFO msg="listening on 127.0.0.1:8080" addr=127.0.0.1:8080`)
	f.Add(`listening on [::1]:9000`)
	f.Add(`msg="listening on x" addr=""`)
	f.Add(`listening on "`)
	f.Fuzz(func(t *testing.T, line string) {
		addr, ok := listenAddr(line)
		if !ok {
			if addr != "" {
				t.Fatalf("listenAddr(%q) = %q, false", line, addr)
			}
			return
		}
		if addr == "" || !strings.Contains(line, readyText) || !strings.Contains(line, addr) ||
			strings.ContainsAny(addr, " \t\n") || strings.HasPrefix(addr, `"`) || strings.HasSuffix(addr, `"`) {
			t.Fatalf("listenAddr(%q) = %q", line, addr)
		}
	})
}
