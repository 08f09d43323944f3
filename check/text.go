package check

import (
	"strconv"
	"strings"
)

func itoa(n int) string { return strconv.Itoa(n) }

// list joins at most n of s, saying how many were left out.
func list(s []string, n int) string {
	if len(s) <= n {
		return strings.Join(s, ", ")
	}
	return strings.Join(s[:n], ", ") + ", … (" + strconv.Itoa(len(s)-n) + " more)"
}
