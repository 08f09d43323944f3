package launch

import (
	"context"
	"fmt"
	"strings"
)

// AddrOf waits, as WaitLog does, for the child's line "WHAT listening on
// ADDR" — a second listener, such as "idem serve"'s admin listener
// ("admin" or "console") — and returns its address. Start only reads the
// first "listening on" line; this finds another.
func (c *Child) AddrOf(ctx context.Context, what string) (string, error) {
	text := what + " " + readyText
	if err := c.WaitLog(ctx, text); err != nil {
		return "", err
	}
	for _, line := range strings.Split(c.Log(), "\n") {
		if strings.Contains(line, text) {
			if addr, ok := listenAddr(line); ok {
				return addr, nil
			}
		}
	}
	return "", fmt.Errorf("%s: the %q line is no longer in the kept log", c.name, text)
}
